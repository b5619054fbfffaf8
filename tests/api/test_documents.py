"""PUT/GET/DELETE of single documents over the real app and a real valkey-server."""

from __future__ import annotations

import time
from typing import Any

import pytest
from httpx import AsyncClient

DOCS = "/v1/collections/default/documents"

pytestmark = pytest.mark.anyio


async def test_put_get_delete(client: AsyncClient, texts: Any) -> None:
    before = time.time()
    put = await client.put(f"{DOCS}/a", json={"text": texts.words(1), "metadata": {"k": [1, 2]}})
    assert put.status_code == 200, put.text
    assert put.json()["id"] == "a" and put.json()["metadata"] == {"k": [1, 2]}

    got = await client.get(f"{DOCS}/a")
    assert got.status_code == 200
    assert got.json()["id"] == "a" and got.json()["metadata"] == {"k": [1, 2]}
    assert before - 1 <= got.json()["inserted_at"] <= time.time() + 1

    assert (await client.delete(f"{DOCS}/a")).status_code == 204
    missing = await client.get(f"{DOCS}/a")
    assert missing.status_code == 404
    assert missing.json()["message"] == "document 'a' does not exist in collection 'default'"
    assert (await client.delete(f"{DOCS}/a")).status_code == 404


async def test_put_document_is_the_earlier_copy_for_later_checks(client: AsyncClient, texts: Any) -> None:
    text = texts.words(2)
    await client.put(f"{DOCS}/stored", json={"text": text})
    result = (await client.post("/v1/collections/default/check", json={"id": "new", "text": text})).json()
    assert result["duplicate_of"] == "stored"


async def test_put_replaces_and_deleted_documents_stop_matching(client: AsyncClient, texts: Any) -> None:
    await client.put(f"{DOCS}/a", json={"text": texts.words(3), "metadata": {"v": 1}})
    await client.put(f"{DOCS}/a", json={"text": texts.words(4), "metadata": {"v": 2}})
    assert (await client.get(f"{DOCS}/a")).json()["metadata"] == {"v": 2}
    query = "/v1/collections/default/query"
    assert (await client.post(query, json={"text": texts.words(3)})).json()["matches"] == []
    assert [m["id"] for m in (await client.post(query, json={"text": texts.words(4)})).json()["matches"]] == [
        "a"
    ]
    await client.delete(f"{DOCS}/a")
    assert (await client.post(query, json={"text": texts.words(4)})).json()["matches"] == []


async def test_ids_with_slashes_spaces_and_unicode_round_trip(client: AsyncClient, texts: Any) -> None:
    for doc_id, path in (
        ("https://example.org/a/b?c=1", "https%3A%2F%2Fexample.org%2Fa%2Fb%3Fc%3D1"),
        ("with space", "with%20space"),
        ("ünïcødé-文書", "%C3%BCn%C3%AFc%C3%B8d%C3%A9-%E6%96%87%E6%9B%B8"),
    ):
        assert (await client.put(f"{DOCS}/{path}", json={"text": texts.words(5)})).status_code == 200
        got = await client.get(f"{DOCS}/{path}")
        assert got.status_code == 200 and got.json()["id"] == doc_id
        checked = await client.post("/v1/collections/default/check", json={"id": doc_id, "text": "x"})
        assert checked.json()["id"] == doc_id
        assert (await client.delete(f"{DOCS}/{path}")).status_code == 204


async def test_bad_ids_and_bodies_are_422(client: AsyncClient) -> None:
    for path in ("a%7Fb", "a%01b", "x" * 101, "%C3%BC" * 51):
        response = await client.put(f"{DOCS}/{path}", json={"text": "t"})
        assert response.status_code == 422, (path, response.text)
        assert "id" in response.json()["message"]
        assert (await client.get(f"{DOCS}/{path}")).status_code == 422
    assert (await client.put(f"{DOCS}/a", json={"metadata": {}})).status_code == 422  # no text
    assert (await client.put(f"{DOCS}/a", json={"text": "t", "metadata": [1]})).status_code == 422
    big = await client.put(f"{DOCS}/a", json={"text": "t", "metadata": {"k": "v" * 300}})
    assert big.status_code == 422 and "metadata" in big.json()["message"]
    assert "at most 200" in big.json()["message"]
    assert (await client.get(f"{DOCS}/")).status_code in (404, 405, 422)
