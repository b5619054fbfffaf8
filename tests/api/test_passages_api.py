"""Passages over HTTP on a standalone server and a cluster: the parameter is validated, returned and
fixed at creation; a cluster refuses it with a 422 that names the limitation; bad searches are 4xx."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import Texts
from tests.conftest import StoreTarget

pytestmark = pytest.mark.anyio


async def test_passages_are_created_or_refused_with_a_clear_4xx(
    client: httpx.AsyncClient, store_target: StoreTarget, texts: type[Texts]
) -> None:
    assert (await client.post("/v1/collections", json={"name": "p", "passages": "yes"})).status_code == 422
    response = await client.post("/v1/collections", json={"name": "p", "passages": True})
    if store_target.cluster:
        assert response.status_code == 422
        assert "not supported on a Redis Cluster" in response.json()["message"]
        assert (await client.get("/v1/collections/p")).status_code == 404
        return
    assert response.status_code == 201 and response.json()["passages"] is True
    again = await client.post("/v1/collections", json={"name": "p", "passages": False})
    assert again.status_code == 409 and "passages" in again.json()["message"]
    source = texts.words(1)
    await client.post("/v1/collections/p/check", json={"id": "s", "text": source})
    essay = texts.words(2, 100) + " " + " ".join(source.split()[50:150]) + " " + texts.words(3, 100)
    found = (await client.post("/v1/collections/p/passages", json={"text": essay})).json()
    [hit] = found["sources"]
    [span] = hit["spans"]
    assert hit["id"] == "s" and essay[span["start"] : span["end"]] == " ".join(source.split()[50:150])
    assert source[span["source_start"] : span["source_end"]] == " ".join(source.split()[50:150])
    too_many = await client.post("/v1/collections/p/passages", json={"text": essay, "limit": 10**6})
    assert too_many.status_code == 422


async def test_plain_collections_report_passages_off(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/collections", json={"name": "plain"})).json()["passages"] is False
    refused = await client.post("/v1/collections/plain/passages", json={"text": "x"})
    assert refused.status_code == 409 and "without passages" in refused.json()["message"]
