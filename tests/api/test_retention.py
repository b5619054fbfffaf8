"""Collection retention and size limit over HTTP (on a standalone server and a cluster): validated,
returned, and an expired document no longer matches."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.api.conftest import Texts

pytestmark = pytest.mark.anyio


async def test_retention_is_validated_returned_and_applied(
    client: httpx.AsyncClient, texts: type[Texts]
) -> None:
    for bad in ({"ttl_seconds": 0}, {"max_documents": -1}, {"ttl_seconds": "soon"}):
        response = await client.post("/v1/collections", json={"name": "r", **bad})
        assert response.status_code == 422, response.text
    response = await client.post(
        "/v1/collections", json={"name": "r", "ttl_seconds": 1, "max_documents": 100}
    )
    assert response.status_code == 201, response.text
    assert response.json()["ttl_seconds"] == 1 and response.json()["max_documents"] == 100
    assert (await client.get("/v1/collections/r")).json()["ttl_seconds"] == 1
    base = texts.words(1)
    await client.post("/v1/collections/r/check", json={"id": "a", "text": base})
    await asyncio.sleep(1.1)
    response = await client.post("/v1/collections/r/check", json={"id": "b", "text": texts.edited(base)})
    assert response.json()["duplicate"] is False
    assert (await client.get("/v1/collections/r/documents/a")).status_code == 404
