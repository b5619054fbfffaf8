"""A drop that dies half way (the dropping process killed, or the store gone, after the state was deleted
and before every data key was unlinked) used to leave the rest of the generation in memory for ever:
nothing read those keys and nothing removed them. Now the drop records the generation in keys.DROPPED
first, and a sweep (the service runs one at start and every minute) finishes it; on a real server and a
real cluster, and through a real ``neardup serve``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
import redis

from neardup.domain import CollectionParams, Document, Index
from neardup.storage import ClusterStore, RedisStore, Store, keys
from tests.conftest import StoreTarget
from tests.domain.test_index import text
from tests.e2e.conftest import Service

pytestmark = pytest.mark.anyio


def data_keys(target: StoreTarget, k: keys.CollectionKeys) -> int:
    if target.cluster:
        client = redis.RedisCluster.from_url(target.url)
        try:
            return sum(
                len(client.keys(k.data_pattern, target_nodes=node))  # type: ignore[union-attr]
                for node in client.get_primaries()
            )
        finally:
            client.close()
    plain = redis.Redis.from_url(target.url)
    try:
        return len(plain.keys(k.data_pattern))
    finally:
        plain.close()


def dropped_entries(target: StoreTarget) -> dict[bytes, bytes]:
    client = target.sync_client()
    try:
        return client.hgetall(keys.DROPPED)  # type: ignore[return-value]
    finally:
        client.close()


async def die_half_way_through_a_drop(store: Store, name: str, k: keys.CollectionKeys) -> None:
    """What a drop does before it unlinks the data keys; the process 'dies' right after."""
    if isinstance(store, ClusterStore):
        state = await store.client.hmget(keys.state(name), ["seq", "bG", "iG"])
        shape = keys.dropped_shape(*(int(v) for v in state), await store.now_ms(k))
        await store.client.hset(keys.DROPPED, keys.dropped_entry(name, k.gen), shape)
        dropped = await store._routing.run_state_script("cluster_drop", name, [])
        await store._routing.run_script("cluster_unregister", [keys.REGISTRY], [name, dropped[4]])
    else:
        assert isinstance(store, RedisStore)
        await store._call("drop_collection", [keys.REGISTRY, keys.state(name), keys.DROPPED], [name])


async def test_a_drop_that_died_half_way_is_finished_by_the_sweep(
    store: Store, store_target: StoreTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = Index(store)
    await index.create_collection(CollectionParams.create("gone", threshold=0.7))
    await index.check("gone", [Document(f"d{i}", text(i)) for i in range(300)])
    await index.create_collection(CollectionParams.create("kept", threshold=0.7))
    await index.check("kept", [Document("k", text(999))])
    k = (await index.registry.get("gone")).keys
    assert data_keys(store_target, k) > 0
    await die_half_way_through_a_drop(store, "gone", k)
    assert [c.params.name for c in await index.list_collections()] == ["kept"]
    assert data_keys(store_target, k) > 0  # left behind: before, nothing would ever remove them
    assert list(dropped_entries(store_target)) == [f"gone:{k.gen}".encode()]

    # A young entry is its own drop's business (it may still be unlinking): a sweep leaves it.
    assert await store.sweep_dropped() == 0
    assert data_keys(store_target, k) > 0
    if isinstance(store, ClusterStore):
        monkeypatch.setattr(store._routing, "abandon_ms", lambda: 0)
    assert await store.sweep_dropped(min_age_ms=0) == 1
    assert data_keys(store_target, k) == 0 and dropped_entries(store_target) == {}
    [kept] = await index.check("kept", [Document("k2", text(999))], insert=False)
    assert kept.duplicate_of == "k"  # the other collection is untouched


async def test_a_completed_drop_leaves_no_entry_behind_on_one_server(
    store: Store, store_target: StoreTarget
) -> None:
    index = Index(store)
    await index.create_collection(CollectionParams.create("done", threshold=0.7))
    await index.check("done", [Document("a", text(1))])
    k = (await index.registry.get("done")).keys
    await index.delete_collection("done")
    assert data_keys(store_target, k) == 0
    # One server: the entry goes with the last unlink. A cluster keeps it for the sweep, which unlinks
    # again what checks that were in flight wrote after the drop.
    expected = [f"done:{k.gen}".encode()] if store_target.cluster else []
    assert list(dropped_entries(store_target)) == expected


async def test_an_entry_whose_generation_is_still_live_is_forgotten_without_touching_it(
    store: Store, store_target: StoreTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cluster drop that died after writing its entry and before deleting the state: the collection
    # is whole, and the sweep must not unlink it.
    index = Index(store)
    await index.create_collection(CollectionParams.create("alive", threshold=0.7))
    await index.check("alive", [Document("a", text(5))])
    k = (await index.registry.get("alive")).keys
    client = store_target.sync_client()
    try:
        client.hset(keys.DROPPED, keys.dropped_entry("alive", k.gen), keys.dropped_shape(1, 64, 16, 0))
    finally:
        client.close()
    if isinstance(store, ClusterStore):
        monkeypatch.setattr(store._routing, "abandon_ms", lambda: 0)
    assert await store.sweep_dropped(min_age_ms=0) == 1
    assert dropped_entries(store_target) == {}
    assert (await index.get_document("alive", "a")).id == "a"


@pytest.mark.slow
def test_the_service_sweeps_at_start(tmp_path: Path, redis_url: str) -> None:
    # Left behind by a service that died half way through a drop, long ago; a new one starts.
    async def leave_a_half_dropped_collection() -> keys.CollectionKeys:
        store = RedisStore.from_url(redis_url)
        try:
            index = Index(store)
            await index.create_collection(CollectionParams.create("old", threshold=0.7))
            await index.check("old", [Document(f"d{i}", text(i)) for i in range(50)])
            k = (await index.registry.get("old")).keys
            await die_half_way_through_a_drop(store, "old", k)
            entry = keys.dropped_entry("old", k.gen)
            shape = (await store.client.hget(keys.DROPPED, entry)).rsplit(b":", 1)[0] + b":0"  # long ago
            await store.client.hset(keys.DROPPED, entry, shape)
            return k
        finally:
            await store.close()

    k = asyncio.run(leave_a_half_dropped_collection())
    target = StoreTarget(redis_url, cluster=False)
    assert data_keys(target, k) > 0
    service = Service(tmp_path / "svc", env={"NEARDUP_REDIS_URL": redis_url}).start()
    try:
        deadline = time.monotonic() + 10
        while data_keys(target, k) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert data_keys(target, k) == 0 and dropped_entries(target) == {}
        assert httpx.get(f"{service.url}/readyz").status_code == 200
    finally:
        service.stop()


async def test_the_sweep_also_unlinks_a_half_dropped_collections_passages(
    standalone_store: RedisStore,
) -> None:
    index = Index(standalone_store)
    await index.create_collection(CollectionParams.create("gone", passages=True))
    await index.check("gone", [Document(f"d{i}", text(i)) for i in range(300)])
    k = (await index.registry.get("gone")).keys
    client = standalone_store.client
    assert await client.keys(k.passage_pattern)  # the passage index and blobs
    await die_half_way_through_a_drop(standalone_store, "gone", k)
    assert await standalone_store.sweep_dropped(min_age_ms=0) == 1
    assert await client.keys(k.data_pattern) == [] and await client.hgetall(keys.DROPPED) == {}
