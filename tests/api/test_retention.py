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


async def test_a_capacity_hint_is_validated_returned_and_changes_no_result(
    client: httpx.AsyncClient, texts: type[Texts]
) -> None:
    for bad in ({"expected_documents": 0}, {"expected_documents": 2**40}, {"expected_documents": "many"}):
        response = await client.post("/v1/collections", json={"name": "h", **bad})
        assert response.status_code == 422, response.text
    response = await client.post("/v1/collections", json={"name": "h", "expected_documents": 5000})
    assert response.status_code == 201, response.text
    assert response.json()["expected_documents"] == 5000
    again = await client.post("/v1/collections", json={"name": "h", "expected_documents": 9000})
    assert again.status_code == 409 and "expected_documents" in again.json()["message"]
    await client.post("/v1/collections", json={"name": "plain"})
    base = texts.words(3)
    for name in ("h", "plain"):
        await client.post(f"/v1/collections/{name}/check", json={"id": "a", "text": base})
        reply = await client.post(
            f"/v1/collections/{name}/check", json={"id": "b", "text": texts.edited(base)}
        )
        assert reply.json()["duplicate_of"] == "a", reply.text
