"""Passage search end to end: a real ``neardup serve`` over HTTP, through the Python client, the raw API
(its 4xx answers) and the ``neardup passages`` command."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import httpx
import orjson
import pytest

from neardup.client import Client, Conflict
from tests.e2e.conftest import Service, neardup_command
from tests.e2e.test_flows import BREAD, LIGHTHOUSE

ESSAY_OWN = (
    "My own opening paragraph explains why I chose to write about coastal history and home cooking in a "
    "single essay, which my teacher found an odd pairing at first but accepted after some discussion."
)


def essay() -> tuple[str, str, str]:
    """An essay copying a part of each stored text, with the copied parts."""
    lighthouse_part = " ".join(LIGHTHOUSE.split()[40:120])
    bread_part = " ".join(BREAD.split()[20:70])
    text = (
        f"{ESSAY_OWN}\n\n{lighthouse_part.upper()}\n\nThen, in between, a thought of my own.\n\n{bread_part}"
    )
    return text, lighthouse_part, bread_part


@pytest.fixture(scope="module")
def client(service: Service) -> Client:
    with Client(service.url) as nd:
        nd.create_collection("sources", passages=True)
        nd.check("sources", "lighthouse", LIGHTHOUSE, metadata={"title": "The lighthouse"})
        nd.put("sources", "bread", BREAD)
        yield nd


def test_the_client_finds_each_source_with_offsets_in_both_texts(client: Client) -> None:
    assert client.get_collection("sources").passages is True
    text, lighthouse_part, bread_part = essay()
    found = client.passages("sources", text)
    assert [s.id for s in found.sources] == ["lighthouse", "bread"]
    lighthouse, bread = found.sources
    assert lighthouse.metadata == {"title": "The lighthouse"}
    # A span runs from the first letter of the passage's first word to the last of its last word.
    [span] = lighthouse.spans
    assert text[span.start : span.end] == lighthouse_part.upper().rstrip(",.")
    assert " ".join(LIGHTHOUSE[span.source_start : span.source_end].split()) == lighthouse_part.rstrip(",.")
    [span] = bread.spans
    assert text[span.start : span.end] == bread_part.rstrip(",.")
    assert " ".join(BREAD[span.source_start : span.source_end].split()) == bread_part.rstrip(",.")
    copied = len(lighthouse_part) + len(bread_part)
    assert found.coverage == pytest.approx(copied / len(text), abs=0.01)
    assert 0.3 < lighthouse.containment < 0.7 and 0.1 < bread.containment < lighthouse.containment


def test_a_copy_is_grouped_under_its_passage_and_goes_when_deleted(client: Client) -> None:
    client.put("sources", "copy", BREAD)  # the same text: the tie goes to the smaller id
    found = client.passages("sources", BREAD)
    [bread] = found.sources
    [span] = bread.spans
    assert bread.id == "bread" and span.also_in_count == 1 and found.documents == 2
    [copy] = span.also_in
    assert copy.id == "copy" and (copy.source_start, copy.source_end) == (span.source_start, span.source_end)
    client.delete("sources", "copy")
    found = client.passages("sources", BREAD)
    assert [s.id for s in found.sources] == ["bread"] and found.sources[0].spans[0].also_in_count == 0


def test_bad_requests_are_4xx(service: Service, client: Client) -> None:
    client.create_collection("plain")
    with httpx.Client(base_url=service.url, timeout=10.0) as http:
        reply = http.post("/v1/collections/plain/passages", json={"text": BREAD})
        assert reply.status_code == 409 and "without passages" in reply.json()["message"]
        for body in ({"text": BREAD, "min_words": 0}, {"text": 5}, {"text": "x", "limit": 0}, {}):
            assert http.post("/v1/collections/sources/passages", json=body).status_code == 422
        assert http.post("/v1/collections/nope/passages", json={"text": "x"}).status_code == 404
        assert http.post("/v1/collections/sources/passages", json={"text": ""}).json() == {
            "coverage": 0.0,
            "coverage_all": 0.0,
            "sources": [],
            "more_sources": 0,
            "documents": 0,
        }
    with pytest.raises(Conflict, match="without passages"):
        client.passages("plain", BREAD)


def test_the_command_prints_a_readable_report(service: Service, client: Client, tmp_path: Path) -> None:
    path = tmp_path / "essay.txt"
    path.write_text(essay()[0], encoding="utf-8")
    done = subprocess.run(
        [*neardup_command(), "passages", str(path), "--collection", "sources", "--url", service.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "of the text is in passages of 2 stored documents" in lines[0]
    assert lines[2].startswith(" 1. lighthouse  containment") and '{"title":"The lighthouse"}' in lines[2]
    assert any(line.strip().startswith("2. bread") for line in lines)
    assert "(collection 'sources'; found in 2 stored documents in all)" in lines[0]
    cut = subprocess.run(
        [*neardup_command(), "passages", str(path), "-c", "sources", "--url", service.url, "--limit", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = cut.stdout.splitlines()
    assert "passages of 1 stored document " in lines[0] and lines[1].startswith("--limit left out 1 source ")
    as_json = subprocess.run(
        [*neardup_command(), "passages", str(path), "-c", "sources", "--url", service.url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    reply = orjson.loads(as_json.stdout)
    assert reply == dataclasses.asdict(client.passages("sources", essay()[0]))
    assert set(reply["sources"][0]["spans"][0]) >= {"also_in", "also_in_count", "source_start"}
    missing = subprocess.run(
        [*neardup_command(), "passages", str(path), "-c", "nope", "--url", service.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "nope" in missing.stderr
