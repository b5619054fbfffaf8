"""check, check/batch and query over the real app and a real valkey-server."""

from __future__ import annotations

from typing import Any

import pytest
from httpx import AsyncClient

CHECK = "/v1/collections/default/check"
BATCH = "/v1/collections/default/check/batch"
QUERY = "/v1/collections/default/query"

pytestmark = pytest.mark.anyio


async def test_a_light_edit_is_a_duplicate_of_the_first_copy(client: AsyncClient, texts: Any) -> None:
    original = texts.words(1)
    first = await client.post(CHECK, json={"id": "a", "text": original, "metadata": {"url": "https://a"}})
    assert first.status_code == 200, first.text
    assert first.json() == {
        "id": "a",
        "duplicate": False,
        "duplicate_of": None,
        "matches": [],
        "inserted": True,
    }

    second = (await client.post(CHECK, json={"id": "b", "text": texts.edited(original)})).json()
    assert second["duplicate"] is True and second["duplicate_of"] == "a" and second["inserted"] is True
    [match] = second["matches"]
    assert match["id"] == "a" and 0.8 <= match["similarity"] < 1.0
    assert match["metadata"] == {"url": "https://a"}

    unrelated = (await client.post(CHECK, json={"id": "c", "text": texts.words(2)})).json()
    assert unrelated["duplicate"] is False and unrelated["matches"] == []


async def test_matches_are_best_first_and_duplicate_of_is_the_earliest(
    client: AsyncClient, texts: Any
) -> None:
    original = texts.words(3)
    await client.post(CHECK, json={"id": "old", "text": texts.edited(original, 10)})
    await client.post(CHECK, json={"id": "new", "text": original})
    result = (await client.post(CHECK, json={"id": "q", "text": original})).json()
    assert [m["id"] for m in result["matches"]] == ["new", "old"]
    assert result["matches"][0]["similarity"] == 1.0
    assert result["duplicate_of"] == "old"


async def test_insert_false_stores_nothing(client: AsyncClient, texts: Any) -> None:
    text = texts.words(4)
    response = (await client.post(CHECK, json={"id": "a", "text": text, "insert": False})).json()
    assert response["inserted"] is False
    assert (await client.get("/v1/collections/default/documents/a")).status_code == 404
    assert (await client.post(CHECK, json={"id": "b", "text": text})).json()["duplicate"] is False


async def test_min_similarity_overrides_the_threshold(client: AsyncClient, texts: Any) -> None:
    text = texts.words(5)
    await client.post(CHECK, json={"id": "a", "text": text})
    edited = texts.edited(texts.edited(texts.edited(text, 10), 100), 200)
    [match] = (await client.post(CHECK, json={"id": "b", "text": edited, "insert": False})).json()["matches"]
    similarity = match["similarity"]
    assert 0.8 <= similarity < 1.0
    at = await client.post(
        CHECK, json={"id": "b", "text": edited, "insert": False, "min_similarity": similarity}
    )
    assert [m["id"] for m in at.json()["matches"]] == ["a"]
    above = await client.post(
        CHECK,
        json={"id": "b", "text": edited, "insert": False, "min_similarity": min(1.0, similarity + 0.01)},
    )
    assert above.json()["matches"] == [] and above.json()["duplicate"] is False
    query = await client.post(QUERY, json={"text": edited, "min_similarity": min(1.0, similarity + 0.01)})
    assert query.json() == {"matches": []}
    for bad in (0, -0.5, 1.5, "high"):
        response = await client.post(CHECK, json={"id": "b", "text": edited, "min_similarity": bad})
        assert response.status_code == 422, bad


async def test_rechecking_an_id_replaces_it_and_never_matches_itself(client: AsyncClient, texts: Any) -> None:
    text = texts.words(6)
    await client.post(CHECK, json={"id": "a", "text": text})
    again = (await client.post(CHECK, json={"id": "a", "text": text})).json()
    assert again["duplicate"] is False and again["matches"] == []
    assert (await client.get("/v1/collections/default")).json()["documents"] == 1


async def test_batch_results_are_in_order_and_later_documents_see_earlier_ones(
    client: AsyncClient, texts: Any
) -> None:
    base = texts.words(7)
    documents = [
        {"id": "x1", "text": texts.words(8)},
        {"id": "b1", "text": base, "metadata": {"n": 1}},
        {"id": "b2", "text": texts.edited(base)},
        {"id": "x2", "text": texts.words(9)},
        {"id": "b3", "text": base},
    ]
    response = await client.post(BATCH, json={"documents": documents})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["id"] for r in results] == ["x1", "b1", "b2", "x2", "b3"]
    assert [r["duplicate"] for r in results] == [False, False, True, False, True]
    assert results[2]["duplicate_of"] == "b1" and results[4]["duplicate_of"] == "b1"
    assert results[2]["matches"][0]["metadata"] == {"n": 1}
    assert all(r["inserted"] for r in results)
    assert (await client.get("/v1/collections/default")).json()["documents"] == 5


async def test_batch_limits_and_shape(client: AsyncClient) -> None:
    too_many = {"documents": [{"id": f"d{i}", "text": "t"} for i in range(51)]}
    response = await client.post(BATCH, json=too_many)
    assert response.status_code == 422
    assert "at most 50" in response.json()["message"]
    assert (await client.post(BATCH, json={"documents": []})).status_code == 422
    assert (await client.post(BATCH, json={"documents": "no"})).status_code == 422
    assert (await client.post(BATCH, json=[{"id": "a", "text": "t"}])).status_code == 422

    mixed = {
        "documents": [{"id": "ok", "text": "t"}, {"id": "", "text": "t"}, {"id": "c", "text": "x" * 20_001}]
    }
    response = await client.post(BATCH, json=mixed)
    assert response.status_code == 422
    locs = [d["loc"] for d in response.json()["detail"]]
    assert ["body", "documents", 1, "id"] in locs
    # Nothing of a refused batch is stored.
    assert (await client.get("/v1/collections/default")).json()["documents"] == 0


async def test_query_is_read_only_best_first_and_limited(client: AsyncClient, texts: Any) -> None:
    base = texts.words(10)
    for i in range(5):
        await client.post(CHECK, json={"id": f"v{i}", "text": texts.edited(base, 20 + i * 30) if i else base})
    before = (await client.get("/v1/collections/default")).json()["documents"]
    response = await client.post(QUERY, json={"text": base, "limit": 3})
    assert response.status_code == 200
    matches = response.json()["matches"]
    assert len(matches) == 3 and matches[0] == {"id": "v0", "similarity": 1.0, "metadata": None}
    assert [m["similarity"] for m in matches] == sorted((m["similarity"] for m in matches), reverse=True)
    assert (await client.get("/v1/collections/default")).json()["documents"] == before
    assert (await client.post(QUERY, json={"text": texts.words(11)})).json() == {"matches": []}
    assert len((await client.post(QUERY, json={"text": base})).json()["matches"]) == 5  # default limit 10


async def test_query_limits(client: AsyncClient) -> None:
    assert (await client.post(QUERY, json={"text": "t", "limit": 0})).status_code == 422
    response = await client.post(QUERY, json={"text": "t", "limit": 101})
    assert response.status_code == 422 and "at most 100" in response.json()["message"]
    assert (await client.post(QUERY, json={"text": "x" * 20_001})).status_code == 422
    assert (await client.post(QUERY, json={})).status_code == 422


async def test_empty_and_wordless_texts_are_accepted_but_never_match(client: AsyncClient) -> None:
    for i, text in enumerate(("", "   ", "!!! ???")):
        first = await client.post(CHECK, json={"id": f"e{i}", "text": text})
        assert first.status_code == 200, first.text
        assert first.json()["duplicate"] is False
    assert (await client.post(QUERY, json={"text": ""})).json() == {"matches": []}
