"""Passages on a Redis Cluster (docs/design.md, "Passages on a cluster"): the same stream checked into
one server and into a 3-node cluster gets the same passage answers (sources, spans, containment,
coverage, counts), and every way a document goes (replace, delete, max_documents, expiry, dropping
the collection) takes its postings and blob out of the cluster's families too."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable

import pytest
import redis

from neardup.domain import CollectionParams, Document, Index, StoreUnavailable, fingerprints
from neardup.storage import ClusterStore, RedisStore, Store
from neardup.testing import LocalCluster
from tests.domain.test_passages import VOCABULARY, words
from tests.storage.test_cluster import die_at_stamp
from tests.storage.test_cluster_commit_point import Hold

pytestmark = pytest.mark.anyio


def text(seed: int, n: int) -> str:
    return " ".join(words(seed, n))


def edited(base: list[str], seed: int, rate: float) -> list[str]:
    """``base`` with about ``rate`` of its words substituted."""
    rng = random.Random(seed)
    return [rng.choice(VOCABULARY) if rng.random() < rate else w for w in base]


@pytest.fixture
async def both(redis_url: str, cluster_url: str) -> AsyncIterator[tuple[Index, Index]]:
    """An index on one server and one on the 3-node cluster, both emptied."""
    one: Store = RedisStore.from_url(redis_url)
    many: Store = ClusterStore.from_url(cluster_url)
    try:
        yield Index(one), Index(many)
    finally:
        await one.close()
        await many.close()


def cluster_keys(cluster: LocalCluster, pattern: str) -> dict[bytes, redis.Redis]:
    """Every key matching ``pattern`` on every node, with a client of the node that holds it."""
    out: dict[bytes, redis.Redis] = {}
    for url in cluster.urls:
        client = redis.Redis.from_url(url)
        out.update({key: client for key in client.scan_iter(match=pattern, count=1000)})
    return out


def posting_entries(cluster: LocalCluster, collection: str) -> dict[bytes, set[int]]:
    """Every posting of the collection's passage families: fingerprint key -> ordinals."""
    out: dict[bytes, set[int]] = {}
    for key, client in cluster_keys(cluster, f"nd:{collection}:*:f:*").items():
        if not key.endswith(b"}"):  # a group (a family's shape key ends with its tag)
            for field, value in client.hgetall(key).items():
                assert len(field) == 4, "a posting's field is the 4-byte fingerprint key"
                out[field] = {int.from_bytes(value[p : p + 5], "big") for p in range(0, len(value), 5)}
    return out


def blob_fields(cluster: LocalCluster, collection: str) -> int:
    return sum(client.hlen(key) for key, client in cluster_keys(cluster, f"nd:{collection}:*:p:*").items())


def stream() -> tuple[list[list[Document]], list[str]]:
    """Batches to check (sources, copies of their paragraphs, a passage held by 70 documents, a page
    copied whole 70 times, which fills its postings' cap), and the texts to search."""
    sources = {f"src{i}": words(i, 400) for i in range(30)}
    batches = [[Document(name, " ".join(w), {"n": i}) for i, (name, w) in enumerate(sources.items())]]
    common = words(1000, 60)  # a licence paragraph, in 70 documents with their own text around it
    licensed = [words(2000 + i, 150) + common + words(3000 + i, 150) for i in range(70)]
    batches.append([Document(f"lic{i}", " ".join(w)) for i, w in enumerate(licensed)])
    page = text(4000, 300)
    batches.append([Document(f"mirror{i}", page) for i in range(70)])
    essays = []
    for i in range(12):
        parts = [
            words(5000 + i, 120),
            sources[f"src{i}"][50:130],
            words(6000 + i, 80),
            edited(sources[f"src{i + 12}"][200:300], i, 0.04),
            words(7000 + i, 60),
        ]
        essays.append(Document(f"essay{i}", " ".join(w for part in parts for w in part)))
    batches.append(essays[:6])
    batches.append(essays[6:])
    queries = [text(11_000 + i, 80) + " " + " ".join(sources[f"src{12 + i}"][:100]) for i in range(12)]
    queries += [
        " ".join(sources["src5"][150:300]),  # src5 is replaced, src6 deleted: nothing holds these
        " ".join(sources["src6"][150:300]),
        text(8000, 100) + " " + " ".join(common) + " " + text(8001, 100),
        page,
        " ".join(sources["src3"][:200] + sources["src4"][100:250]),
        text(9000, 500),  # nothing copied
    ]
    return batches, queries


async def answers(index: Index, name: str, queries: list[str]) -> list[object]:
    return [await index.passages(name, q, limit=10) for q in queries]


async def test_a_cluster_answers_passage_searches_as_one_server_does(
    both: tuple[Index, Index], valkey_cluster: LocalCluster
) -> None:
    one, many = both
    batches, queries = stream()
    for index in both:
        await index.create_collection(CollectionParams.create("p", passages=True))
        for batch in batches:
            await index.check("p", batch)
        # replaced, deleted, sent again unchanged: the index follows every way a document goes
        await index.put("p", Document("src5", text(10_000, 400)))
        await index.delete_document("p", "src6")
        await index.delete_document("p", "mirror3")
        await index.check("p", batches[0][:3])
    expected = await answers(one, "p", queries)
    assert await answers(many, "p", queries) == expected
    # the answers are not empty ones: the copied paragraphs, the licence and the mirrored page are found
    found = [{s.id for s in a.sources} for a in expected]  # type: ignore[attr-defined]
    assert all(f"src{12 + i}" in found[i] for i in range(12))
    assert found[12] == found[13] == set()  # replaced and deleted: their text is gone
    # a passage held by 70 documents: one source, the other copies grouped under it
    assert len(found[14]) == 1 and found[14] <= {f"lic{i}" for i in range(70)}
    assert len(found[15]) == 1 and found[15] <= {f"mirror{i}" for i in range(70)}
    assert expected[14].documents > 50 and expected[15].documents > 50  # type: ignore[attr-defined]
    assert {"src3", "src4"} <= found[16]
    assert found[-1] == set()
    # The mirrored page's postings filled at 64 ordinals (the cap), as one server's do; mirror3's
    # deletion took it out of them.
    postings = posting_entries(valkey_cluster, "p")
    page_keys = distinct_keys(queries[15])
    assert {len(postings[key]) for key in page_keys} == {63}


async def test_every_way_a_document_goes_takes_its_passages_out(
    cluster_url: str, valkey_cluster: LocalCluster
) -> None:
    store = ClusterStore.from_url(cluster_url)
    index = Index(store)
    try:
        await index.create_collection(CollectionParams.create("p", passages=True))
        first, second = text(1, 300), text(2, 300)
        await index.check("p", [Document("a", first)])
        assert [s.id for s in (await index.passages("p", first)).sources] == ["a"]
        await index.put("p", Document("a", second))  # replaced
        assert (await index.passages("p", first)).sources == []
        assert [s.id for s in (await index.passages("p", second)).sources] == ["a"]
        await index.check("p", [Document("b", first), Document("b", second)])  # replaced in one batch
        assert (await index.passages("p", first)).sources == []  # b's first version is gone
        both = await index.passages("p", second)
        assert both.documents == 2 and both.sources[0].spans[0].also_in_count == 1  # a and b hold it
        # exactly the live documents' keys are posted, each under its own ordinal only
        live = {key for t in (second,) for key in distinct_keys(t)}
        assert set(posting_entries(valkey_cluster, "p")) == live
        await index.delete_document("p", "a")
        await index.delete_document("p", "b")
        assert posting_entries(valkey_cluster, "p") == {}
        assert blob_fields(valkey_cluster, "p") == 0
        await index.check("p", [Document("c", first)])
        assert blob_fields(valkey_cluster, "p") > 0
        await index.delete_collection("p")
        assert cluster_keys(valkey_cluster, "nd:p:*") == {}
    finally:
        await store.close()


def distinct_keys(t: str) -> set[bytes]:
    f = fingerprints.features(t)
    raw = fingerprints.key_bytes(f.grams[f.selected])
    return {raw[p : p + 4] for p in range(0, len(raw), 4)}


@pytest.mark.parametrize("retention", ["max_documents", "ttl"])
async def test_retention_takes_passages_out_on_a_cluster(
    cluster_url: str, valkey_cluster: LocalCluster, retention: str
) -> None:
    store = ClusterStore.from_url(cluster_url)
    index = Index(store)
    bound = {"max_documents": 2} if retention == "max_documents" else {"ttl_seconds": 1}
    make: Callable[..., CollectionParams] = CollectionParams.create
    try:
        params = make("r", passages=True, **bound)
        await index.create_collection(params)
        texts = [text(i, 200) for i in range(6)]
        for i, t in enumerate(texts[:-1]):
            await index.check("r", [Document(f"d{i}", t)])
        if retention == "ttl":
            assert [s.id for s in (await index.passages("r", texts[0])).sources] == ["d0"]
            await asyncio.sleep(1.2)
        assert (await index.passages("r", texts[0])).sources == []  # evicted or expired: gone at once
        await index.check("r", [Document("last", texts[-1])])  # a write reclaims what is due
        kept = {"max_documents": texts[4:], "ttl": texts[-1:]}[retention]
        assert [s.id for s in (await index.passages("r", texts[-1])).sources] == ["last"]
        assert set(posting_entries(valkey_cluster, "r")) == {k for t in kept for k in distinct_keys(t)}
    finally:
        await store.close()


async def test_a_check_that_dies_before_its_stamp_leaves_no_passage_after_its_retry(
    cluster_url: str, valkey_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replacement killed between its write round and its stamp: its postings and blob are written
    but never committed, so no search finds them, and the old version's are gone with it; its retry
    (the same document again) replaces the dead version, and the postings left are exactly the live
    document's."""
    store = ClusterStore.from_url(cluster_url, timeout=1.0)
    index = Index(store)
    try:
        await index.create_collection(CollectionParams.create("k", passages=True))
        old, new = text(41, 300), text(42, 300)
        await index.check("k", [Document("a", old)])
        restore = die_at_stamp(store, monkeypatch)
        with pytest.raises(StoreUnavailable):
            await index.check("k", [Document("a", new)])
        restore()
        assert (await index.passages("k", new)).sources == []  # pending: not visible
        assert (await index.passages("k", old)).sources == []  # replaced in the write round
        await index.check("k", [Document("a", new)])  # the retry
        assert [s.id for s in (await index.passages("k", new)).sources] == ["a"]
        postings = posting_entries(valkey_cluster, "k")
        assert set(postings) == distinct_keys(new) and len({o for v in postings.values() for o in v}) == 1
        assert blob_fields(valkey_cluster, "k") == 1
    finally:
        await store.close()


async def test_a_search_sees_a_document_only_once_its_check_committed_it(
    cluster_url: str, valkey_cluster: LocalCluster
) -> None:
    """Another process's check held between its write round and its stamp has its postings and blob
    written already: a search meanwhile leaves that document out (pending) and still answers with the
    committed ones; once the check commits, the same search names it."""
    writer, reader = ClusterStore.from_url(cluster_url), ClusterStore.from_url(cluster_url)
    try:
        await Index(reader).create_collection(CollectionParams.create("v", passages=True))
        shared = words(51, 200)
        early = " ".join(words(52, 100) + shared)
        late = " ".join(shared + words(53, 100))
        await Index(reader).check("v", [Document("early", early)])
        hold = Hold(writer, "written")
        pending = asyncio.create_task(Index(writer).check("v", [Document("late", late)]))
        assert await hold.until_reached(pending)
        assert set(posting_entries(valkey_cluster, "v")) >= distinct_keys(late)  # written, not committed
        found = await Index(reader).passages("v", late)
        assert [s.id for s in found.sources] == ["early"] and found.documents == 1
        hold.released.set()
        [answer] = await pending
        assert answer.inserted
        found = await Index(reader).passages("v", late)
        assert [s.id for s in found.sources] == ["late"] and found.documents == 2  # early: a copy
    finally:
        await writer.close()
        await reader.close()
