"""Bounded growth on a real server and a real cluster: a collection with ``ttl_seconds`` or
``max_documents`` stops matching expired/evicted documents at once, reclaims their entries a bounded
amount per write, and keeps the store's memory flat in a long run."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from neardup.domain import CollectionParams, Document, DocumentNotFound, Index, InvalidParameters
from neardup.storage import Store
from tests.conftest import StoreTarget
from tests.domain.test_index import text, variant

pytestmark = pytest.mark.anyio


def used_memory(target: StoreTarget) -> int:
    """INFO used_memory, summed over the cluster's nodes."""
    client = target.sync_client()
    try:
        if isinstance(client, redis.RedisCluster):
            info = client.info("memory", target_nodes=redis.RedisCluster.PRIMARIES)
            return sum(int(node["used_memory"]) for node in info.values())
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


def test_retention_and_size_are_validated() -> None:
    for bad in (
        dict(ttl_seconds=0),
        dict(ttl_seconds=-5),
        dict(max_documents=0),
        dict(ttl_seconds=1.5),
        dict(expected_documents=0),
        dict(expected_documents=2**40),
    ):
        with pytest.raises(InvalidParameters):
            CollectionParams.create("x", **bad)  # type: ignore[arg-type]
    p = CollectionParams.create("x", ttl_seconds=60, max_documents=1000)
    assert CollectionParams.from_dict(p.to_dict()) == p


async def test_expired_documents_stop_matching_at_once(store: Store) -> None:
    index = Index(store)
    await index.create_collection(CollectionParams.create("t", threshold=0.7, ttl_seconds=1))
    base = text(11)
    [first] = await index.check("t", [Document("old", base)])
    assert not first.duplicate
    [again] = await index.check("t", [Document("copy", variant(base, 1))], insert=False)
    assert again.duplicate_of == "old"
    await asyncio.sleep(1.1)
    # No write happened in between, so nothing was reclaimed yet: verification alone hides it.
    [later] = await index.check("t", [Document("late", variant(base, 2))])
    assert not later.duplicate
    assert await index.query("t", base) == [m for m in await index.query("t", base) if m.id == "late"]
    with pytest.raises(DocumentNotFound):
        await index.get_document("t", "old")


async def test_max_documents_evicts_the_oldest(store: Store) -> None:
    index = Index(store)
    await index.create_collection(CollectionParams.create("m", threshold=0.7, max_documents=20))
    for start in range(0, 60, 10):
        await index.check("m", [Document(f"d{i}", text(100 + i)) for i in range(start, start + 10)])
    assert await index.query("m", text(100)) == []  # evicted: it no longer matches
    assert [m.id for m in await index.query("m", text(159))] == ["d59"]
    with pytest.raises(DocumentNotFound):
        await index.get_document("m", "d0")
    assert (await index.get_document("m", "d59")).id == "d59"
    documents = (await index.get_collection("m")).documents
    assert 20 <= documents <= 30  # reclaimed as it went, not only hidden


async def test_memory_stays_flat_while_inserting_with_a_ttl(store: Store, store_target: StoreTarget) -> None:
    # TTL 1 s: after 2 s the collection is in its steady state (inserting as fast as it expires);
    # from then on memory must not grow with the documents inserted.
    index = Index(store)
    await index.create_collection(CollectionParams.create("flat", ttl_seconds=1))
    samples: list[tuple[int, int, int]] = []  # (inserted so far, documents kept, used_memory)
    started = time.monotonic()
    n = 0
    for at in (2.0, 4.0):
        while time.monotonic() - started < at:
            await index.check("flat", [Document(f"d{n + i}", text(n + i, 60)) for i in range(50)])
            n += 50
        samples.append((n, (await index.get_collection("flat")).documents, used_memory(store_target)))
    print(f"\n(inserted, kept, used_memory): {samples}")
    (inserted0, kept0, memory0), (inserted1, kept1, memory1) = samples
    assert kept1 < 0.5 * inserted1  # most of what was inserted is gone already
    # Keeping everything would cost ~1,000 bytes per document inserted between the two samples;
    # reclaiming as we go keeps the growth near zero: 300 bytes per inserted document of slack, plus
    # up to 2,000 bytes per document more *kept* (the insert rate, so the steady-state size, varies
    # with the machine's load).
    allowance = 300 * (inserted1 - inserted0) + 2_000 * max(0, kept1 - kept0)
    assert memory1 - memory0 < allowance, samples


async def test_reclaiming_steps_over_any_run_of_holes(store: Store) -> None:
    """Deleted documents leave holes in the ordinal sequence. A run of holes longer than one reclaim
    window (4 x limit ordinals on a cluster) used to stop reclaiming for good there: expired documents
    after it were hidden but kept in memory forever."""
    index = Index(store)
    await index.create_collection(CollectionParams.create("holes", ttl_seconds=4))
    inserted = time.monotonic()
    for start in range(0, 600, 100):
        await index.check("holes", [Document(f"d{i}", text(300 + i, 40)) for i in range(start, start + 100)])
    for i in range(550):
        try:
            await index.delete_document("holes", f"d{i}")
        except DocumentNotFound:
            # On a loaded machine the deletes can outlast the 4 s: an expired document is already
            # gone for clients (a hole-to-be all the same); before that, absence is a bug.
            assert time.monotonic() - inserted >= 4
    if time.monotonic() - inserted < 4:
        assert (await index.get_collection("holes")).documents == 50
    await asyncio.sleep(inserted + 4.5 - time.monotonic())  # now d550..d599 have expired
    for n in range(12):  # writes of one document: each reclaims a bounded amount
        await index.check("holes", [Document(f"new{n}", text(2000 + n, 40))])
    kept = (await index.get_collection("holes")).documents
    assert kept == 12, kept  # the 50 expired documents behind the holes were reclaimed


async def test_a_retried_check_keeps_its_place_under_max_documents_until_it_is_evicted(store: Store) -> None:
    """A retry whose answer was lost, after a near-duplicate was told this one is earlier: in a
    max_documents collection too it gets the first answer again and keeps its place (it used to be
    replaced, and then told that the near-duplicate came first). Once evicted, sending it again is a new
    insertion."""
    index = Index(store)
    await index.create_collection(CollectionParams.create("m2", threshold=0.7, max_documents=10))
    base = text(900)
    [a] = await index.check("m2", [Document("a", base)])
    [b] = await index.check("m2", [Document("b", variant(base, 1))])
    assert not a.duplicate and b.duplicate_of == "a"
    [again] = await index.check("m2", [Document("a", base)])
    assert not again.duplicate and again.matches == []
    [c] = await index.check("m2", [Document("c", variant(base, 2))])
    assert c.duplicate_of == "a"
    for start in range(0, 20, 10):  # 20 more insertions: a, b and c are evicted
        await index.check("m2", [Document(f"f{i}", text(950 + i)) for i in range(start, start + 10)])
    [back] = await index.check("m2", [Document("a", base)])
    assert not back.duplicate and back.inserted
    assert [m.id for m in await index.query("m2", base)] == ["a"]
