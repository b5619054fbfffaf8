"""What ``NEARDUP_MIN_REPLICAS`` waits for, on real clusters with replicas: a retry that keeps the
stored copy of its first try (the unchanged path) waits for the replicas of every node its answer
depends on, the copy's stamp included, even when it has nothing left to write there; and a node
without the append-only file is refused (WAITAOF), with a message that says what to change."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest
import redis

from neardup.domain import CollectionParams, Document, Index, StoreUnavailable
from neardup.domain.banding import sketch_texts
from neardup.storage import ClusterStore, keys
from neardup.testing import LocalCluster
from tests.domain.test_index import text

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_a_kept_copy_is_acknowledged_only_once_replicas_have_its_stamp(tmp_path: Path) -> None:
    # The first try of `a` writes its reservation, claims, bands and id (their replicas confirm); the
    # state shard's replica is then frozen, and its stamp, on the state shard, cannot be confirmed: a
    # 503. Its retry finds the copy stamped and unchanged, and nothing left to write; it must
    # still not be acknowledged while the stamp is on the state primary only (a failover then would
    # lose the stamp the answer relied on): another 503, until the replica is back.
    cluster = LocalCluster(tmp_path / "cluster", nodes=3, replicas=1)
    cluster.start()
    store = ClusterStore.from_url(cluster.url, timeout=1.0, min_replicas=1)
    routing = redis.RedisCluster.from_url(cluster.url)
    frozen: int | None = None
    try:
        index = Index(store)
        ports = [node.port for node in cluster.nodes]

        def shard(key: str) -> int:
            return ports.index(routing.get_node_from_key(key).port)  # type: ignore[no-untyped-call]

        # A collection whose state shard holds none of the first document's other keys (one band:
        # its bucket is on one shard), and a document whose id and bucket are elsewhere too.
        chosen = None
        for attempt in range(40):
            params = CollectionParams.create(f"c{attempt}", threshold=0.7, bands=1)
            await index.create_collection(params)
            gen = routing.hget(keys.state(params.name), "gen")
            assert isinstance(gen, bytes)
            k = keys.CollectionKeys(params.name, gen.decode())
            g = await store._routing.groups(k)
            state_shard = shard(k.state)
            if state_shard in (shard(g.sig(1)[0]), shard(g.doc(1)[0])):
                continue
            for d in range(40):
                doc = Document(f"a{d}", text(d))
                band = sketch_texts(params, [doc.text]).band_key_bytes[:8]
                if state_shard not in (shard(g.ids(doc.id.encode())), shard(g.band_record(band)[0])):
                    chosen = (params.name, k, doc, state_shard)
                    break
            if chosen:
                break
        assert chosen, "no collection and document with keys off the state shard"
        name, k, doc, state_shard = chosen

        # The first try is held before its stamp (its reservation, claims, bands and id confirmed by
        # the replicas); the state shard's replica freezes; the stamp lands on the primary only.
        released = asyncio.Event()
        reached = asyncio.Event()

        async def hold() -> None:
            reached.set()
            await released.wait()

        store.pause_points["written"] = hold
        first = asyncio.create_task(index.check(name, [doc]))
        await asyncio.wait_for(reached.wait(), 30)
        del store.pause_points["written"]
        frozen = cluster.nodes[cluster.size + state_shard].pid
        assert frozen is not None
        os.kill(frozen, signal.SIGSTOP)
        released.set()
        with pytest.raises(StoreUnavailable, match="acknowledged by 0 of the 1 replicas"):
            await first
        with redis.Redis.from_url(cluster.urls[state_shard]) as primary:
            assert primary.hlen(k.pending) == 0  # the first try's stamp is on the primary

        with pytest.raises(StoreUnavailable, match="acknowledged by 0 of the 1 replicas"):
            await index.check(name, [doc])  # the retry: unchanged, stamped, nothing to write

        os.kill(frozen, signal.SIGCONT)
        frozen = None
        await asyncio.to_thread(cluster.wait_ok, 30)
        [again] = await index.check(name, [doc])
        assert again.inserted and not again.duplicate
        assert (await index.get_document(name, doc.id)).id == doc.id
        assert [m.id for m in await index.query(name, doc.text)] == [doc.id]
    finally:
        if frozen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGCONT)
        routing.close()
        await store.close()
        cluster.stop()


async def test_min_replicas_refuses_nodes_without_the_append_only_file(tmp_path: Path) -> None:
    # A primary without the append-only file that restarts within the node timeout comes back with
    # less than its replica confirmed, and the replica resyncs from it: WAIT alone would have
    # acknowledged writes that are then lost. The store refuses such nodes with a clear message.
    with LocalCluster(tmp_path / "rdb", nodes=1, replicas=1, extra_config={"appendonly": "no"}) as cluster:
        store = ClusterStore.from_url(cluster.url, timeout=2.0, min_replicas=1)
        try:
            index = Index(store)
            with pytest.raises(StoreUnavailable, match="appendonly yes"):
                await index.create_collection(CollectionParams.create("c", threshold=0.7))
        finally:
            await store.close()
