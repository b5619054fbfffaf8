"""``neardup.client`` against a real ``neardup serve``: every method of Client and AsyncClient, typed results,
errors, check_many's batching, and the retry policy (503 and connection errors)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from neardup.client import (
    AsyncClient,
    CheckResult,
    Client,
    Collection,
    Conflict,
    InvalidRequest,
    Match,
    NeardupError,
    NotFound,
    StoredDocument,
    Unavailable,
)

PROSE = (
    "The lighthouse on the northern point was built in 1874, after two ships ran aground on the reef in a "
    "single winter. Its first keeper, a retired sailor named Thomas Avery, kept a logbook in which he noted "
    "the weather every four hours, the ships that passed, and the birds that struck the lantern glass."
)
EDITED = PROSE.replace("retired sailor", "retired seaman") + " "
OTHER = "An unrelated note about compilers, register allocation and the cost of spilling values to memory."


@pytest.fixture
def client(service: Any) -> Iterator[Client]:
    with Client(service.url, retries=2, backoff=0.01) as nd:
        yield nd


def fresh(nd: Client, name: str, **params: Any) -> Collection:
    with contextlib.suppress(NotFound):
        nd.delete_collection(name)
    return nd.create_collection(name, **params)


def test_collections(client: Client) -> None:
    created = fresh(client, "c1", threshold=0.7, num_perm=64)
    assert isinstance(created, Collection)
    assert (created.name, created.threshold, created.num_perm, created.documents) == ("c1", 0.7, 64, 0)
    assert created.bands * created.rows <= 64
    assert 0.0 < created.candidate_probability(0.7) < 1.0
    assert client.create_collection("c1", threshold=0.7, num_perm=64) == created  # idempotent
    with pytest.raises(Conflict) as conflict:
        client.create_collection("c1", threshold=0.9)
    assert conflict.value.status == 409 and "threshold" in conflict.value.message
    assert "c1" in [c.name for c in client.list_collections()]
    client.delete_collection("c1")
    with pytest.raises(NotFound):
        client.get_collection("c1")
    sized = fresh(client, "c2", expected_documents=10_000)
    assert client.create_collection("c2", expected_documents=10_000) == sized
    with pytest.raises(Conflict) as conflict:
        client.create_collection("c2", expected_documents=20_000)
    assert "expected_documents" in conflict.value.message
    exact = fresh(client, "c3", verify="exact", ttl_seconds=3600, max_documents=100)
    assert (exact.verify, exact.ttl_seconds, exact.max_documents) == ("exact", 3600, 100)
    assert client.get_collection("c3") == exact
    assert fresh(client, "c4").verify == "estimate"
    with pytest.raises(Conflict) as conflict:
        client.create_collection("c3", verify="estimate", ttl_seconds=3600, max_documents=100)
    assert "verify" in conflict.value.message


def test_check_query_and_documents(client: Client) -> None:
    fresh(client, "c2", threshold=0.7)
    first = client.check("c2", "a", PROSE, metadata={"url": "https://example.org/a"})
    assert first == CheckResult("a", False, None, [], True)
    second = client.check("c2", "b", EDITED)
    assert second.duplicate and second.duplicate_of == "a" and second.inserted
    [match] = second.matches
    assert isinstance(match, Match) and match.id == "a" and match.similarity >= 0.7
    assert match.metadata == {"url": "https://example.org/a"}
    dry = client.check("c2", "c", EDITED, insert=False)
    assert dry.duplicate and not dry.inserted
    assert [m.id for m in client.query("c2", PROSE, limit=5)] == ["a", "b"]
    assert client.query("c2", PROSE, limit=1, min_similarity=0.99)[0].id == "a"

    stored = client.put("c2", "odd/id with space", OTHER, metadata={"k": 1})
    assert isinstance(stored, StoredDocument) and stored.id == "odd/id with space"
    fetched = client.get("c2", "odd/id with space")
    assert fetched.metadata == {"k": 1} and fetched.inserted_at > 0
    client.delete("c2", "odd/id with space")
    with pytest.raises(NotFound) as missing:
        client.get("c2", "odd/id with space")
    assert missing.value.code == "not_found"
    assert client.get_collection("c2").documents == 2


def test_ids_that_are_dot_segments_address_their_document_not_the_collection(client: Client) -> None:
    fresh(client, "dots")
    for doc_id in (".", "..", "a/..", "%2E"):
        client.put("dots", doc_id, f"the text of {doc_id}")
    for doc_id in (".", "..", "a/..", "%2E"):
        assert client.get("dots", doc_id).id == doc_id
    client.delete("dots", "..")  # unescaped, the URL would become DELETE /v1/collections/dots
    assert client.get_collection("dots").documents == 3
    with pytest.raises(NotFound):
        client.get("dots", "..")


def test_check_many_batches_and_streams_in_order(client: Client, service: Any) -> None:
    fresh(client, "c3", threshold=0.7)
    docs = [{"id": f"d{i}", "text": f"{PROSE} {i}" if i % 2 else f"{OTHER} number {i}"} for i in range(7)]
    requests: list[int] = []

    def count(request: httpx.Request) -> None:
        if request.url.path.endswith("/check/batch"):
            requests.append(1)

    with Client(service.url) as nd:
        nd._http.event_hooks["request"] = [count]
        results = nd.check_many("c3", iter(docs), batch_size=3)
        assert not requests  # lazy: nothing sent before the first result is asked for
        first = next(results)
        assert len(requests) == 1 and first.id == "d0"
        rest = list(results)
    assert [r.id for r in [first, *rest]] == [d["id"] for d in docs]
    assert len(requests) == 3  # 3 + 3 + 1
    assert [r.duplicate_of for r in [first, *rest]] == [None, None, "d0", "d1", "d0", "d1", "d0"]


def test_invalid_request_says_what_to_change(client: Client) -> None:
    with pytest.raises(InvalidRequest) as bad:
        client.create_collection("no spaces allowed")
    assert bad.value.status == 422 and "collection name" in bad.value.message
    with pytest.raises(NotFound):
        client.check("no-such-collection", "a", PROSE)


def test_unreachable_service_is_retried_then_reported() -> None:
    with Client("http://127.0.0.1:9", retries=2, backoff=0.01) as nd:
        started = time.monotonic()
        with pytest.raises(NeardupError) as error:
            nd.list_collections()
    assert error.value.status == 0 and error.value.code == "unreachable"
    assert time.monotonic() - started < 5


def test_503_is_retried_with_retry_after_and_api_key_is_sent() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) < 3:
            return httpx.Response(
                503, json={"error": "store_unavailable", "message": "down"}, headers={"Retry-After": "0"}
            )
        return httpx.Response(200, json={"collections": []})

    with Client(
        "http://neardup.test", api_key="s3cret", backoff=0.001, transport=httpx.MockTransport(handler)
    ) as nd:
        assert nd.list_collections() == []
    assert len(seen) == 3
    assert all(r.headers["authorization"] == "Bearer s3cret" for r in seen)

    seen.clear()
    with (
        Client(
            "http://neardup.test",
            retries=1,
            backoff=0.001,
            transport=httpx.MockTransport(lambda r: handler(r)),
        ) as nd,
        pytest.raises(Unavailable) as down,
    ):
        nd.list_collections()
    assert down.value.status == 503 and len(seen) == 2


@pytest.mark.anyio
async def test_async_client(service: Any) -> None:
    async with AsyncClient(service.url, retries=1, backoff=0.01) as nd:
        with contextlib.suppress(NotFound):
            await nd.delete_collection("c4")
        created = await nd.create_collection("c4", threshold=0.7)
        assert created.documents == 0
        assert (await nd.check("c4", "a", PROSE)).inserted

        async def documents() -> Any:
            yield {"id": "b", "text": EDITED}
            yield {"id": "c", "text": OTHER}

        results = [r async for r in nd.check_many("c4", documents(), batch_size=1)]
        assert [(r.id, r.duplicate_of) for r in results] == [("b", "a"), ("c", None)]
        assert [m.id for m in await nd.query("c4", PROSE)] == ["a", "b"]
        await nd.put("c4", "d", OTHER)
        assert (await nd.get("c4", "d")).id == "d"
        await nd.delete("c4", "d")
        assert (await nd.get_collection("c4")).documents == 3
        assert [c.name for c in await nd.list_collections()].count("c4") == 1
        assert await nd.ready()
        await nd.delete_collection("c4")
        with pytest.raises(NotFound):
            await nd.get_collection("c4")


@pytest.mark.anyio
async def test_passages_sync_and_async_parse_the_grouped_answer(client: Client, service: Any) -> None:
    """Copies of a passage come back under its best source, with their offsets; both clients alike."""
    with contextlib.suppress(NotFound):
        client.delete_collection("c5")
    client.create_collection("c5", passages=True)
    for doc_id in ("a", "b", "c"):
        client.put("c5", doc_id, PROSE, metadata={"n": doc_id})
    found = client.passages("c5", OTHER + " " + PROSE, limit=10)
    [source] = found.sources
    [span] = source.spans
    assert (source.id, source.metadata, found.documents, found.more_sources) == ("a", {"n": "a"}, 3, 0)
    assert [(c.id, c.metadata) for c in span.also_in] == [("b", {"n": "b"}), ("c", {"n": "c"})]
    assert all((c.source_start, c.source_end) == (span.source_start, span.source_end) for c in span.also_in)
    assert span.also_in_count == 2 and found.coverage == found.coverage_all > 0.5
    async with AsyncClient(service.url) as nd:
        assert await nd.passages("c5", OTHER + " " + PROSE, limit=10) == found
    client.delete_collection("c5")


COLLECTION_C = {"name": "c", "threshold": 0.8, "num_perm": 128, "shingle": "word", "size": 5, "bands": 16,
                "rows": 8, "seed": 1, "documents": 0}  # fmt: skip


def _lost_first_answer(collection_exists: bool) -> tuple[list[str], Any]:
    """A service whose first DELETE is carried out but its answer is lost (a read timeout); the retry
    then finds nothing to delete (404)."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.method == "DELETE" and len(seen) == 1:
            raise httpx.ReadTimeout("answer lost", request=request)
        if request.method == "GET" and collection_exists:
            return httpx.Response(200, json=COLLECTION_C)
        return httpx.Response(404, json={"error": "not_found", "message": "not found"})

    return seen, handler


def test_a_retried_delete_whose_first_answer_was_lost_is_done_not_404() -> None:
    seen, handler = _lost_first_answer(collection_exists=True)
    with Client("http://neardup.test", backoff=0.001, transport=httpx.MockTransport(handler)) as nd:
        nd.delete("c", "a")  # no NotFound: the first attempt deleted it
        assert seen == ["DELETE /v1/collections/c/documents/a"] * 2 + ["GET /v1/collections/c"]
        seen.clear()
        nd.delete_collection("c")
        assert seen == ["DELETE /v1/collections/c"] * 2
    # ... unless the collection itself is missing
    seen, handler = _lost_first_answer(collection_exists=False)
    transport = httpx.MockTransport(handler)
    with Client("http://neardup.test", backoff=0.001, transport=transport) as nd, pytest.raises(NotFound):
        nd.delete("c", "a")
    # A 404 with no doubtful attempt before it is a plain NotFound, and connection refusals (never
    # sent) leave no doubt either.
    plain = httpx.MockTransport(lambda r: httpx.Response(404, json={"error": "not_found", "message": "x"}))
    with Client("http://neardup.test", backoff=0.001, transport=plain) as nd, pytest.raises(NotFound):
        nd.delete("c", "a")
    refused: list[str] = []

    def refuse_once(request: httpx.Request) -> httpx.Response:
        refused.append(request.method)
        if len(refused) == 1:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(404, json={"error": "not_found", "message": "x"})

    transport = httpx.MockTransport(refuse_once)
    with Client("http://neardup.test", backoff=0.001, transport=transport) as nd, pytest.raises(NotFound):
        nd.delete("c", "a")
    assert refused == ["DELETE", "DELETE"]


@pytest.mark.anyio
async def test_the_async_client_treats_a_retried_delete_the_same_way() -> None:
    seen, handler = _lost_first_answer(collection_exists=True)
    async with AsyncClient(
        "http://neardup.test", backoff=0.001, transport=httpx.MockTransport(handler)
    ) as nd:
        await nd.delete("c", "a")
        assert seen == ["DELETE /v1/collections/c/documents/a"] * 2 + ["GET /v1/collections/c"]
        seen.clear()
        await nd.delete_collection("c")
        assert seen == ["DELETE /v1/collections/c"] * 2
    seen, handler = _lost_first_answer(collection_exists=False)
    async with AsyncClient(
        "http://neardup.test", backoff=0.001, transport=httpx.MockTransport(handler)
    ) as nd:
        with pytest.raises(NotFound):
            await nd.delete("c", "a")
