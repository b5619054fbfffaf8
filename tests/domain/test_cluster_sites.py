"""Sites on a Redis Cluster (docs/design.md, "Sites on a cluster"): the same stream checked into one
server and into a 3-node cluster gets the same site counts, which equal a recount from scratch; a check
killed at any step of the cluster protocol, then retried as a client retries a 503, leaves the counts
as one server's; every way a document goes takes its page out."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis

from neardup.domain import (
    CollectionFull,
    CollectionParams,
    Document,
    DocumentNotFound,
    Index,
    StoreUnavailable,
)
from neardup.storage import ClusterStore, RedisStore, Store, keys
from neardup.storage.errors import StoreDown
from tests.domain.test_index import text, variant
from tests.domain.test_sites import SITES, THRESHOLD, Recount, compare, page, replay, stored_edges_agree

pytestmark = pytest.mark.anyio


@pytest.fixture
async def both(redis_url: str, cluster_url: str) -> AsyncIterator[tuple[Store, ClusterStore]]:
    """A store on one server and one on the 3-node cluster, both emptied."""
    one = RedisStore.from_url(redis_url)
    many = ClusterStore.from_url(cluster_url)
    try:
        yield one, many
    finally:
        await one.close()
        await many.close()


async def counts(index: Index, name: str, names: list[str] = SITES) -> tuple[dict[str, Any], list[Any]]:
    """Every site's answer and the mirror pairs, as plain values to compare across stores."""
    sites = {s: await index.site(name, s) for s in names}
    return sites, await index.mirrors(name, min_share=0.0, min_pages=1, limit=1000)


@pytest.mark.parametrize("ttl", [None, 4])
async def test_a_cluster_counts_sites_as_one_server_does(
    both: tuple[Store, ClusterStore], ttl: int | None
) -> None:
    """One stream of checks in batches, with replacements, deletes and (with a TTL) every document
    expiring halfway, into both stores: the answers, the counts and the stored edges agree, and equal
    a recount from the answers."""
    stores = both
    indexes = [Index(s) for s in stores]
    recounts = [Recount(), Recount()]
    name = f"mirror{ttl or 0}"
    for index in indexes:
        await index.create_collection(
            CollectionParams.create(name, threshold=THRESHOLD, site_field="url", ttl_seconds=ttl)
        )
    phases = 2
    for phase in range(phases):
        for index, recount, seed in zip(indexes, recounts, (phase, phase), strict=True):
            await replay(index, name, recount, random.Random(31 + seed), 50, replacements_first=True)
        assert recounts[0].edges == recounts[1].edges  # the same matches were answered
        for index, store, recount in zip(indexes, stores, recounts, strict=True):
            await compare(index, store, name, recount)
        assert await counts(indexes[0], name) == await counts(indexes[1], name)
        if ttl and phase == 0:
            await asyncio.sleep(ttl + 0.3)  # every document so far expires


def killed_after(
    cstore: ClusterStore, monkeypatch: pytest.MonkeyPatch, when: Callable[[str, list[Any]], bool]
) -> None:
    """The next state script call that ``when(name, args)`` picks runs, then the check dies (as if
    its process were killed right after it): the caller gets a 503."""
    real = cstore._routing.run_state_script
    armed = [True]

    async def run(name: str, k: Any, args: Any) -> Any:
        reply = await real(name, k, args)
        if armed[0] and when(name, list(args)):
            armed[0] = False
            raise StoreDown(f"killed after {name}")
        return reply

    monkeypatch.setattr(cstore._routing, "run_state_script", run)


KILLS: dict[str, Callable[[str, list[Any]], bool]] = {
    # the replaced versions' pages taken away, nothing else of the check landed
    "after_remove": lambda name, args: name == "cluster_sites" and args[9] == "remove",
    # committed: its pages counted, its journal entry written with the candidates unread
    "after_stamp": lambda name, args: name.startswith("cluster_stamp"),
    # the candidates in the journal entry, the carried pairs linked; the answer lost
    "after_settle": lambda name, args: name == "cluster_sites" and args[9] == "settle",
}


@pytest.mark.parametrize(
    "kill, retried",
    [
        ("after_remove", True),
        ("before_stamp", True),
        ("after_stamp", True),
        ("after_stamp", False),
        ("after_settle", True),
        ("after_settle", False),
    ],
)
async def test_a_check_killed_at_any_step_counts_as_one_server(
    both: tuple[Store, ClusterStore], monkeypatch: pytest.MonkeyPatch, kill: str, retried: bool
) -> None:
    """A batch of replacements and new pages of two mirrored sites dies at one step of the cluster
    protocol, and the client retries it (a 503 is retried), or, once it was committed (its stamp), does
    not: the counts are one server's, where the batch ran once. A committed batch whose process died
    is counted by its stamp, and its links come from its journal entry, candidates read by the next
    site read when the check died before reading them."""
    one, many = both
    indexes = [Index(one), Index(many)]
    name = "killed"
    base = [text(500 + i) for i in range(6)]
    first = [Document(f"a/{i}", base[i], page("a.example", str(i))) for i in range(6)]
    copies = [Document(f"b/{i}", variant(base[i], 1), page("b.example", str(i))) for i in range(4)]
    # replacements of a/0 and a/1 (other texts: their pages and edges move) and new pages of c
    batch = [
        Document("a/0", text(900), page("a.example", "0")),
        Document("a/1", variant(base[3], 2), page("a.example", "1")),
        Document("c/0", variant(base[2], 3), page("c.example", "0")),
        Document("c/1", variant(base[4], 4), page("c.example", "1")),
    ]
    after = [Document(f"c/{i}", variant(base[5], 5 + i), page("c.example", str(i))) for i in range(2, 4)]
    for index in indexes:
        await index.create_collection(CollectionParams.create(name, threshold=THRESHOLD, site_field="url"))
        await index.check(name, first, min_similarity=THRESHOLD)
        await index.check(name, copies, min_similarity=THRESHOLD)
    await indexes[0].check(name, batch, min_similarity=THRESHOLD)
    if kill == "before_stamp":
        real = many._routing.run_state_script
        armed = [True]

        async def dies(n: str, k: Any, args: Any) -> Any:
            if armed[0] and n.startswith("cluster_stamp"):
                armed[0] = False
                raise StoreDown("killed between the write round and the stamp")
            return await real(n, k, args)

        monkeypatch.setattr(many._routing, "run_state_script", dies)
    else:
        killed_after(many, monkeypatch, KILLS[kill])
    with pytest.raises(StoreUnavailable):
        await indexes[1].check(name, batch, min_similarity=THRESHOLD)
    if retried:
        answers = await indexes[1].check(name, batch, min_similarity=THRESHOLD)
        assert [r.id for r in answers] == [d.id for d in batch]
    else:  # the process died with its memory: the answer, and the pairs it had verified
        indexes[1] = Index(many)
    for index in indexes:
        await index.check(name, after, min_similarity=THRESHOLD)
    names = ["a.example", "b.example", "c.example"]
    assert await counts(indexes[0], name, names) == await counts(indexes[1], name, names)
    for index, store in zip(indexes, both, strict=True):
        assert await stored_edges_agree(store, index, name)
    sites, _ = await counts(indexes[1], name, names)
    assert sites["a.example"].pages == 6 and sites["c.example"].pages == 4
    assert any(m.shared for m in sites["b.example"].mirrors)  # the stream does make cross-site matches


async def test_delete_and_eviction_take_pages_out_on_a_cluster(cluster_url: str) -> None:
    store = ClusterStore.from_url(cluster_url)
    try:
        index = Index(store)
        await index.create_collection(
            CollectionParams.create("evict", threshold=0.7, site_field="url", max_documents=6)
        )
        for k in range(4):
            await index.check("evict", [Document(f"a{k}", text(300 + k), page("a.example", str(k)))])
        for k in range(2):
            await index.check(
                "evict", [Document(f"b{k}", variant(text(300 + k), 1), page("b.example", str(k)))]
            )
        b = await index.site("evict", "b.example")
        assert b.pages == 2 and [m.shared for m in b.mirrors] == [2]
        await index.delete_document("evict", "b1")
        assert [m.other_shared for m in (await index.site("evict", "a.example")).mirrors] == [1]
        for k in range(4):  # a0 .. a3 are evicted by these (6 documents at most)
            await index.check("evict", [Document(f"c{k}", text(700 + k), page("c.example", str(k)))])
        a = await index.site("evict", "a.example")
        assert a.pages == 0 and a.mirrors == []
        assert (await index.site("evict", "b.example")).mirrors == []
        assert await stored_edges_agree(store, index, "evict")
    finally:
        await store.close()


async def test_dropping_a_cluster_collection_unlinks_its_site_keys(
    cluster_url: str, valkey_cluster: Any
) -> None:
    store = ClusterStore.from_url(cluster_url)
    try:
        index = Index(store)
        await index.create_collection(CollectionParams.create("gone", threshold=0.7, site_field="url"))
        docs = [
            Document("a", text(7), page("a.example", "1")),
            Document("b", variant(text(7), 2), page("b.example", "1")),
        ]
        await index.check("gone", docs)
        assert (await index.site("gone", "b.example")).mirrors
        site_keys = "nd:gone:*{gone}*"
        assert keys_on_nodes(valkey_cluster.urls, site_keys)
        await index.delete_collection("gone")
        assert keys_on_nodes(valkey_cluster.urls, "nd:gone:*") == []
    finally:
        await store.close()


def keys_on_nodes(urls: list[str], pattern: str) -> list[bytes]:
    out: list[bytes] = []
    for url in urls:
        client = redis.Redis.from_url(url)
        try:
            out += list(client.scan_iter(match=pattern))
        finally:
            client.close()
    return out


async def test_the_stamp_refuses_a_batch_past_the_last_site_id(
    cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal beside the reservation is an early one, made only for a batch that replaces stored
    versions (and two batches may both pass it, each with a new site, for one id left); the stamp's is
    the one that counts: a refused stamp makes the batch's ordinals dead and counts nothing, and the
    check is a 409 whose documents are absent."""
    store = ClusterStore.from_url(cluster_url)
    try:
        index = Index(store)
        await index.create_collection(CollectionParams.create("full", threshold=THRESHOLD, site_field="url"))
        await index.check("full", [Document("a1", text(1), page("a.example", "1"))])
        client = redis.RedisCluster.from_url(cluster_url)
        try:
            client.hset(keys.state("full"), "sseq", keys.MAX_SITE_ID)  # as after 2^32 - 1 sites held
        finally:
            client.close()

        async def passes(*_: Any) -> None:  # the early refusal, as if another batch raced past it
            return None

        monkeypatch.setattr(store._sites, "remove", passes)
        with pytest.raises(CollectionFull):
            await index.check("full", [Document("b1", text(2), page("b.example", "1"))])
        with pytest.raises(DocumentNotFound):
            await index.get_document("full", "b1")
        assert (await index.site("full", "b.example")).pages == 0
        assert (await index.site("full", "a.example")).pages == 1
        await index.check("full", [Document("a2", text(3), page("a.example", "2"))])  # a known site: taken
        assert (await index.site("full", "a.example")).pages == 2
    finally:
        await store.close()
