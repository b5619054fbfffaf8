"""/v1/collections over the real app and a real valkey-server: create (201/200/409), list, get, delete."""

from __future__ import annotations

from typing import Any

import pytest
from httpx import AsyncClient

pytestmark = pytest.mark.anyio


async def test_default_collection_exists_from_the_start_with_the_configured_defaults(
    client: AsyncClient,
) -> None:
    response = await client.get("/v1/collections/default")
    assert response.status_code == 200
    body = response.json()
    assert body["threshold"] == 0.8
    assert (body["num_perm"], body["shingle"], body["size"], body["documents"]) == (128, "word", 5, 0)
    assert body["bands"] * body["rows"] <= 128
    names = [c["name"] for c in (await client.get("/v1/collections")).json()["collections"]]
    assert names == ["default"]


async def test_create_is_201_then_200_with_the_same_parameters_then_409_with_others(
    client: AsyncClient,
) -> None:
    created = await client.post(
        "/v1/collections", json={"name": "pages", "threshold": 0.7, "shingle": "char"}
    )
    assert created.status_code == 201, created.text
    params = created.json()
    assert params["name"] == "pages" and params["threshold"] == 0.7 and params["shingle"] == "char"
    assert params["num_perm"] == 128 and params["size"] == 5  # configured defaults fill the rest
    assert params["bands"] >= 1 and params["rows"] >= 1

    again = await client.post("/v1/collections", json={"name": "pages", "threshold": 0.7, "shingle": "char"})
    assert again.status_code == 200
    assert {k: v for k, v in again.json().items() if k != "documents"} == {
        k: v for k, v in params.items() if k != "documents"
    }

    other = await client.post("/v1/collections", json={"name": "pages", "threshold": 0.9})
    assert other.status_code == 409
    assert "pages" in other.json()["message"]


async def test_explicit_bands_and_rows_are_kept(client: AsyncClient) -> None:
    response = await client.post("/v1/collections", json={"name": "b", "num_perm": 64, "bands": 8, "rows": 8})
    assert response.status_code == 201
    assert (response.json()["bands"], response.json()["rows"]) == (8, 8)


async def test_inconsistent_parameters_are_422_saying_what_to_change(client: AsyncClient) -> None:
    response = await client.post("/v1/collections", json={"name": "b", "num_perm": 64, "bands": 9, "rows": 8})
    assert response.status_code == 422
    assert "bands*rows" in response.json()["message"]
    for bad in (
        {"name": "b", "threshold": 1.5},
        {"name": "b", "threshold": 0},
        {"name": "b", "num_perm": 8},
        {"name": "b", "shingle": "sentence"},
        {"name": "b", "size": 0},
        {"name": "b", "treshold": 0.5},  # a typo is refused, not silently ignored
        {"threshold": 0.5},
    ):
        response = await client.post("/v1/collections", json=bad)
        assert response.status_code == 422, (bad, response.text)
        assert response.json()["error"] == "invalid_request"
        assert response.json()["message"]


async def test_names_that_could_reach_other_keys_are_refused(client: AsyncClient) -> None:
    for name in ("", "a b", "{x}", "a:b", "../x", ".hidden", "x" * 65, "ünï", "a*"):
        response = await client.post("/v1/collections", json={"name": name})
        assert response.status_code == 422, (name, response.text)
    for path in ("a%20b", "%7Bx%7D", "a:b", "x" * 65):
        response = await client.get(f"/v1/collections/{path}")
        assert response.status_code == 422, (path, response.text)
        assert "collection name" in response.json()["message"]


async def test_get_counts_documents_and_delete_removes_the_collection(
    client: AsyncClient, texts: Any
) -> None:
    assert (await client.post("/v1/collections", json={"name": "c"})).status_code == 201
    for i in range(3):
        response = await client.post("/v1/collections/c/check", json={"id": f"d{i}", "text": texts.words(i)})
        assert response.status_code == 200
    assert (await client.get("/v1/collections/c")).json()["documents"] == 3
    assert (await client.post("/v1/collections", json={"name": "c"})).json()["documents"] == 3

    assert (await client.delete("/v1/collections/c")).status_code == 204
    assert (await client.get("/v1/collections/c")).status_code == 404
    assert (await client.delete("/v1/collections/c")).status_code == 404
    assert (await client.post("/v1/collections/c/check", json={"id": "x", "text": "t"})).status_code == 404
    # The name is free again, with new parameters.
    assert (await client.post("/v1/collections", json={"name": "c", "threshold": 0.5})).status_code == 201
    assert (await client.get("/v1/collections/c")).json()["documents"] == 0


async def test_unknown_collection_is_404_everywhere(client: AsyncClient) -> None:
    for method, path, body in (
        ("GET", "/v1/collections/nope", None),
        ("DELETE", "/v1/collections/nope", None),
        ("POST", "/v1/collections/nope/check", {"id": "a", "text": "t"}),
        ("POST", "/v1/collections/nope/check/batch", {"documents": [{"id": "a", "text": "t"}]}),
        ("POST", "/v1/collections/nope/query", {"text": "t"}),
        ("PUT", "/v1/collections/nope/documents/a", {"text": "t"}),
        ("GET", "/v1/collections/nope/documents/a", None),
        ("DELETE", "/v1/collections/nope/documents/a", None),
    ):
        response = await client.request(method, path, json=body)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json() == {"error": "not_found", "message": "collection 'nope' does not exist"}


async def test_verify_estimate_by_default_or_exact(client: AsyncClient) -> None:
    # The estimate sketch by default (bands chosen for recall at the threshold, the bins that fit the
    # byte budget); verify is part of the parameters: asking again with the other mode is a conflict.
    new = (await client.post("/v1/collections", json={"name": "new"})).json()
    assert (new["verify"], new["bins"], new["bands"], new["rows"]) == ("estimate", 1408, 16, 6)
    assert "sketch_format" not in new
    again = await client.post("/v1/collections", json={"name": "new", "verify": "estimate"})
    assert again.status_code == 200 and again.json() == {**new, "documents": 0}
    conflict = await client.post("/v1/collections", json={"name": "new", "verify": "exact"})
    assert conflict.status_code == 409 and "verify" in conflict.json()["message"]
    # exact mode: the true Jaccard of the shingle sets (here 8 of 10 word 1-grams shared: 8 / 12)
    exact = await client.post(
        "/v1/collections", json={"name": "ex", "threshold": 0.6, "size": 1, "verify": "exact"}
    )
    assert exact.status_code == 201 and exact.json()["verify"] == "exact" and exact.json()["bins"] == 0
    words = [f"w{i}" for i in range(12)]
    first = await client.post("/v1/collections/ex/check", json={"id": "a", "text": " ".join(words[:10])})
    second = await client.post("/v1/collections/ex/check", json={"id": "b", "text": " ".join(words[2:])})
    assert first.json()["duplicate"] is False
    [match] = second.json()["matches"]
    assert match["id"] == "a" and match["similarity"] == pytest.approx(8 / 12, abs=1e-6)
    for bad in (
        {"name": "x", "verify": "exact", "sketch_format": 1},  # no such parameter: verify says it
        {"name": "x", "sketch_format": 3},
        {"name": "x", "verify": "roughly"},
    ):
        response = await client.post("/v1/collections", json=bad)
        assert response.status_code == 422, (bad, response.text)
