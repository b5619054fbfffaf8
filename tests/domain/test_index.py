"""The domain against a real valkey-server and a real 3-node cluster (tests taking ``store`` or
``store_target`` run on both) and the real native core: collections, check semantics, replace/delete,
empty documents, first seen under concurrency, retention, durability, store down."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, cast

import pytest

from neardup.domain import (
    CollectionConflict,
    CollectionNotFound,
    CollectionParams,
    Document,
    DocumentNotFound,
    Index,
    InvalidInput,
    InvalidParameters,
    StoreUnavailable,
)
from neardup.storage import EmbeddedValkey, RedisStore, Store
from neardup.storage.embedded import find_free_port
from tests.conftest import StoreTarget

pytestmark = pytest.mark.anyio

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
]


def text(seed: int, length: int = 120) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) + str(rng.randrange(50)) for _ in range(length))


def variant(base: str, seed: int) -> str:
    # A light edit: one word changed near the end keeps the Jaccard of 5-shingles around 0.9.
    words = base.split()
    words[-3 - seed % 5] = f"edit{seed}"
    return " ".join(words)


@pytest.fixture
async def index(store: Store) -> Index:
    ix = Index(store)
    await ix.create_collection(CollectionParams.create("c", threshold=0.7))
    return ix


async def test_params_are_validated_and_filled() -> None:
    p = CollectionParams.create("x", threshold=0.8, num_perm=128)
    assert p.bands * p.rows <= 128 and p.bands > 1
    for bad in (
        dict(name="x", threshold=1.5),
        dict(name="a b"),
        dict(name="x{y}"),
        dict(name="x", num_perm=8),
        dict(name="x", bands=20, rows=10),
        dict(name="x", size=0),
    ):
        with pytest.raises(InvalidParameters):
            CollectionParams.create(**bad)


async def test_collection_lifecycle(index: Index) -> None:
    p = CollectionParams.create("c", threshold=0.7)
    assert await index.create_collection(p) == (p, False)
    with pytest.raises(CollectionConflict, match="threshold"):
        await index.create_collection(CollectionParams.create("c", threshold=0.9))
    assert await index.ensure_default_collection(CollectionParams.create("c", threshold=0.9)) == p
    await index.check("c", [Document("a", text(1))])
    info = await index.get_collection("c")
    assert info.params == p and info.documents == 1
    assert [i.params.name for i in await index.list_collections()] == ["c"]
    await index.delete_collection("c")
    with pytest.raises(CollectionNotFound):
        await index.get_collection("c")
    with pytest.raises(CollectionNotFound):
        await index.check("c", [Document("a", text(1))])
    with pytest.raises(CollectionNotFound):
        await index.delete_collection("c")


async def test_recreated_collection_starts_empty_even_through_a_stale_cache(store: Store) -> None:
    one, two = Index(store), Index(store)  # two service processes
    await one.create_collection(CollectionParams.create("c", threshold=0.7))
    await one.check("c", [Document("a", text(1))])
    await two.delete_collection("c")
    await two.create_collection(CollectionParams.create("c", threshold=0.5))
    [result] = await one.check("c", [Document("b", text(1))])  # `one` cached the old generation
    assert not result.duplicate
    assert (await one.get_collection("c")).params.threshold == 0.5


async def test_check_reports_earlier_verified_matches_best_first(index: Index) -> None:
    base = text(1)
    results = await index.check(
        "c",
        [
            Document("orig", base, {"url": "u1"}),
            Document("copy", variant(base, 1)),
            Document("other", text(2)),
            Document("copy2", base),
        ],
    )
    assert [r.duplicate for r in results] == [False, True, False, True]
    assert results[1].duplicate_of == "orig" and results[1].matches[0].metadata == {"url": "u1"}
    assert results[3].duplicate_of == "orig"
    assert [m.id for m in results[3].matches] == ["orig", "copy"]  # exact copy first
    assert results[3].matches[0].similarity == 1.0
    assert all(r.inserted for r in results)
    strict = await index.check("c", [Document("x", variant(base, 2))], insert=False, min_similarity=0.999)
    assert strict[0].matches == [] and not strict[0].inserted
    with pytest.raises(DocumentNotFound):
        await index.get_document("c", "x")


async def test_read_only_check_sees_earlier_batch_documents_and_not_itself(index: Index) -> None:
    base = text(3)
    await index.check("c", [Document("a", base)])
    results = await index.check("c", [Document("a", base), Document("b", base)], insert=False)
    assert results[0].matches == []  # the stored "a" is this very document
    assert results[1].duplicate_of == "a"
    assert (await index.get_collection("c")).documents == 1


async def test_query_is_read_only_and_limited(index: Index) -> None:
    base = text(4)
    await index.check("c", [Document(f"d{i}", variant(base, i)) for i in range(5)])
    matches = await index.query("c", base, limit=3)
    assert len(matches) == 3
    assert matches == sorted(matches, key=lambda m: -m.similarity)
    assert (await index.get_collection("c")).documents == 5
    with pytest.raises(InvalidInput):
        await index.query("c", base, limit=0)


async def test_replace_and_delete(index: Index) -> None:
    first, second = text(5), text(6)
    await index.put("c", Document("a", first, {"v": 1}))
    [r] = await index.check("c", [Document("a", second, {"v": 2})])
    assert not r.duplicate  # never matches its own older version
    assert await index.query("c", first) == []  # the old version's entries are gone
    assert [m.id for m in await index.query("c", second)] == ["a"]
    stored = await index.get_document("c", "a")
    assert stored.metadata == {"v": 2} and stored.inserted_at > 0
    assert (await index.get_collection("c")).documents == 1
    await index.delete_document("c", "a")
    assert await index.query("c", second) == []
    with pytest.raises(DocumentNotFound):
        await index.delete_document("c", "a")
    with pytest.raises(DocumentNotFound):
        await index.get_document("c", "a")
    [r] = await index.check("c", [Document("b", second)])
    assert not r.duplicate  # a deleted document never matches again


async def test_a_document_checked_again_unchanged_keeps_its_place_in_first_seen_order(index: Index) -> None:
    # A client retries a check whose answer was lost, after a near-duplicate arrived: that one was told
    # "a" is earlier, so "a" must not now be told that "b" is earlier (nor move after it).
    base = text(7)
    [a] = await index.check("c", [Document("a", base, {"u": 1})])
    [b] = await index.check("c", [Document("b", variant(base, 1))])
    assert not a.duplicate and b.duplicate_of == "a"
    inserted_at = (await index.get_document("c", "a")).inserted_at
    [again] = await index.check("c", [Document("a", base, {"u": 1})])
    assert again.inserted is True and not again.duplicate and again.matches == []
    assert (await index.get_document("c", "a")).inserted_at == inserted_at  # the stored copy, untouched
    [later] = await index.check("c", [Document("d", variant(base, 2))])
    assert later.duplicate_of == "a"
    # In a batch beside new documents (a new near-copy of it among them) and a real replacement.
    results = await index.check(
        "c",
        [Document("e", variant(base, 3)), Document("a", base, {"u": 1}), Document("b", text(8))],
    )
    assert [r.duplicate_of for r in results] == ["a", None, None]
    assert (await index.get_document("c", "a")).inserted_at == inserted_at
    # Other metadata, or another text, is a replacement: it moves to the end of first-seen order.
    [moved] = await index.check("c", [Document("a", base, {"u": 2})])
    assert moved.duplicate and moved.duplicate_of == "d"
    assert (await index.get_document("c", "a")).metadata == {"u": 2}
    # PUT of the same document changes nothing either.
    stored = await index.get_document("c", "a")
    assert await index.put("c", Document("a", base, {"u": 2})) == stored
    assert (await index.get_collection("c")).documents == 4


async def test_the_same_id_twice_in_a_batch_is_a_replacement_even_when_one_is_unchanged(index: Index) -> None:
    base, other = text(9), text(10)
    await index.check("c", [Document("a", base)])
    results = await index.check("c", [Document("a", base), Document("a", other)])
    assert [r.inserted for r in results] == [True, True]
    assert [m.id for m in await index.query("c", other)] == ["a"]
    assert await index.query("c", base) == []


async def test_empty_documents_are_stored_but_never_match(index: Index) -> None:
    results = await index.check("c", [Document("e1", ""), Document("e2", ""), Document("e3", "  ...  ")])
    assert [r.duplicate for r in results] == [False, False, False]
    assert (await index.get_document("c", "e1")).id == "e1"
    assert await index.query("c", "") == []
    await index.delete_document("c", "e2")
    assert (await index.get_collection("c")).documents == 2


async def test_bad_input_is_reported(index: Index) -> None:
    for doc in (Document("", "x"), Document("a" * 600, "x"), Document("a", "x", {"f": {1, 2}})):
        with pytest.raises(InvalidInput):
            await index.check("c", [doc])
    with pytest.raises(InvalidInput):
        await index.check("c", [Document("a", "x")], min_similarity=2.0)
    with pytest.raises(InvalidInput):
        await index.check("c", [Document(str(i), "x") for i in range(1001)])


async def test_first_seen_wins_under_concurrency(store_target: StoreTarget) -> None:
    # 300 groups of 4 light variants, sent in random order by 32 concurrent clients with their own
    # connections: exactly one document per group is new, and no two are each other's duplicate.
    # Threshold 0.5 (25 bands of 5) makes LSH recall of these ~0.8-similar variants ~1: this test is
    # about ordering, and a pair LSH missed would look like two "new" documents.
    groups, copies, clients = 300, 4, 32
    docs = [
        Document(f"g{g}-{c}", variant(text(1000 + g, 60), c) if c else text(1000 + g, 60))
        for g in range(groups)
        for c in range(copies)
    ]
    random.Random(5).shuffle(docs)
    stores = [store_target.open() for _ in range(4)]
    try:
        indexes = [Index(stores[i % len(stores)]) for i in range(clients)]
        await indexes[0].create_collection(CollectionParams.create("race", threshold=0.5))
        queue = list(docs)
        results = {}

        async def worker(ix: Index) -> None:
            while queue:
                batch = [queue.pop() for _ in range(min(len(queue), random.randint(1, 3)))]
                for r in await ix.check("race", batch):
                    results[r.id] = r

        await asyncio.gather(*(worker(ix) for ix in indexes))
    finally:
        for s in stores:
            await s.close()
    assert len(results) == groups * copies
    new_per_group = {g: 0 for g in range(groups)}
    for r in results.values():
        group = r.id.split("-")[0]
        if not r.duplicate:
            new_per_group[int(group[1:])] += 1
        else:
            assert r.duplicate_of is not None and r.duplicate_of.split("-")[0] == group
            assert not results[r.duplicate_of].duplicate or results[r.duplicate_of].duplicate_of != r.id
    assert set(new_per_group.values()) == {1}


class CountingStore:
    """The real store, counting its check calls (to see group commit at work)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.checks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def check(self, *args: Any, **kwargs: Any) -> Any:
        self.checks += 1
        return await self.inner.check(*args, **kwargs)


async def test_concurrent_checks_in_one_process_share_store_calls_and_first_seen_holds(store: Store) -> None:
    # One service process, 48 concurrent single-document checks (12 groups of 4 variants): they go
    # out in far fewer store calls than checks (group commit), each caller gets its own result, with
    # its own min_similarity, and exactly one document per group is new.
    counting = CountingStore(store)
    ix = Index(cast(Store, counting))
    await ix.create_collection(CollectionParams.create("gc", threshold=0.5))
    docs = [
        Document(f"g{g}-{c}", variant(text(2000 + g, 60), c) if c else text(2000 + g, 60))
        for g in range(12)
        for c in range(4)
    ]
    random.Random(9).shuffle(docs)
    strict = {doc.id for doc in docs[::3]}  # these callers ask for near-identical matches only

    async def one(doc: Document) -> Any:
        [result] = await ix.check("gc", [doc], min_similarity=0.99 if doc.id in strict else None)
        return result

    results = await asyncio.gather(*(one(doc) for doc in docs))
    assert [r.id for r in results] == [doc.id for doc in docs]
    assert counting.checks < len(docs) / 4
    for g in range(12):
        group = [r for r in results if r.id.startswith(f"g{g}-")]
        for r in group:
            if r.id in strict:
                assert all(m.similarity >= 0.99 for m in r.matches)
        relaxed = [r for r in group if r.id not in strict]
        new = [r.id for r in relaxed if not r.duplicate]
        earliest = {r.duplicate_of for r in relaxed if r.duplicate}
        # Every relaxed duplicate names the group's first-seen copy; exactly one copy is first: a
        # relaxed one (then it is the only new one) or a strict one (then no relaxed one is new).
        assert len(new) <= 1 and len(earliest) <= 1
        if new and earliest:
            assert earliest == set(new)
        if not new:
            assert earliest <= strict


async def test_a_bad_document_fails_its_own_call_not_the_batch_it_would_share(index: Index) -> None:
    # Two calls go out at once (two batches in flight), the rest wait and would share the next batch:
    # the one with metadata that cannot be stored fails alone.
    def call(i: int, metadata: Any = None) -> asyncio.Future[Any]:
        return asyncio.ensure_future(index.check("c", [Document(f"d{i}", text(40 + i), metadata)]))

    first = [call(0), call(1)]
    bad = call(2, {"tags": {1, 2}})
    rest = [call(i) for i in range(3, 10)]
    with pytest.raises(InvalidInput, match="not JSON-serializable"):
        await bad
    for done in (*first, *rest):
        assert [r.inserted for r in await done] == [True]


async def test_checked_document_survives_a_server_crash(data_dir: Path) -> None:
    server = EmbeddedValkey(data_dir)
    server.start()
    try:
        store = RedisStore.from_url(server.url, timeout=2.0)
        ix = Index(store)
        await ix.create_collection(CollectionParams.create("c"))
        await ix.check("c", [Document("kept", text(7))])
        server.kill()  # SIGKILL right after the check returned
        with pytest.raises(StoreUnavailable):
            await ix.query("c", text(7))
        port = server.port
        server._requested_port = port  # same address, so the client's pool reconnects by itself
        server.start()
        assert (await ix.get_document("c", "kept")).id == "kept"
        assert [m.id for m in await ix.query("c", text(7))] == ["kept"]
        await store.close()
    finally:
        server.stop()


async def test_store_down_is_store_unavailable() -> None:
    store = RedisStore.from_url(f"redis://127.0.0.1:{find_free_port()}/0", timeout=0.5)
    ix = Index(store)
    try:
        with pytest.raises(StoreUnavailable):
            await ix.ping()
        with pytest.raises(StoreUnavailable):
            await ix.check("c", [Document("a", "x")])
        with pytest.raises(StoreUnavailable):
            await ix.create_collection(CollectionParams.create("c"))
    finally:
        await store.close()
