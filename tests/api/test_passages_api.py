"""Passages over HTTP on a standalone server and a cluster: the parameter is validated, returned and
fixed at creation, the same answers on both; bad searches are 4xx."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import Texts

pytestmark = pytest.mark.anyio


async def test_passages_are_created_fixed_and_searched(client: httpx.AsyncClient, texts: type[Texts]) -> None:
    assert (await client.post("/v1/collections", json={"name": "p", "passages": "yes"})).status_code == 422
    response = await client.post("/v1/collections", json={"name": "p", "passages": True})
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


async def test_copies_of_a_passage_are_grouped_under_its_best_source(
    client: httpx.AsyncClient, texts: type[Texts]
) -> None:
    """A passage held by 20 stored documents beside one held by one, limit 10: both passages' sources,
    the 19 other copies under the first with their offsets, coverage of the spans returned."""
    await client.post("/v1/collections", json={"name": "p", "passages": True})
    common, rare = texts.words(10, 150), texts.words(11, 80)
    batch = [{"id": f"c{i:02}", "text": texts.words(100 + i, 200) + "\n\n" + common} for i in range(20)]
    batch.append({"id": "rare", "text": texts.words(200, 200) + "\n\n" + rare, "metadata": {"url": "u"}})
    assert (await client.post("/v1/collections/p/check/batch", json={"documents": batch})).status_code == 200
    text = f"{texts.words(300, 100)}\n\n{common}\n\n{texts.words(301, 100)}\n\n{rare}"
    found = (await client.post("/v1/collections/p/passages", json={"text": text, "limit": 10})).json()
    first, second = found["sources"]
    assert second["id"] == "rare" and second["metadata"] == {"url": "u"}
    [copied], [alone] = first["spans"], second["spans"]
    # A passage's edges may overshoot by a word that agrees by chance (docs/design.md, "Passages").
    assert about(text[copied["start"] : copied["end"]], common)
    assert about(text[alone["start"] : alone["end"]], rare)
    assert copied["also_in_count"] == 19 and len(copied["also_in"]) == 10
    stored = {d["id"]: d["text"] for d in batch}
    for copy in copied["also_in"]:
        assert copy["id"] != first["id"] and copy["id"].startswith("c") and copy["metadata"] is None
        assert about(stored[copy["id"]][copy["source_start"] : copy["source_end"]], common)
    assert (alone["also_in"], alone["also_in_count"]) == ([], 0)
    spans = [(s["start"], s["end"]) for s in (copied, alone)]
    assert found["coverage"] == found["coverage_all"] == round(sum(e - s for s, e in spans) / len(text), 4)
    assert (found["more_sources"], found["documents"]) == (0, 21)
    cut = (await client.post("/v1/collections/p/passages", json={"text": text, "limit": 1})).json()
    assert [s["id"] for s in cut["sources"]] == [first["id"]] and cut["more_sources"] == 1
    assert cut["coverage"] == round((copied["end"] - copied["start"]) / len(text), 4)
    assert cut["coverage_all"] == found["coverage"]


def about(piece: str, expected: str) -> bool:
    """The same passage but for a word at either edge."""
    return expected[30:-30] in piece and abs(len(piece.split()) - len(expected.split())) <= 2
