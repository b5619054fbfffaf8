"""The retention sweep (``Index.sweep_retention``, run by the service every
``NEARDUP_RETENTION_SWEEP_SECONDS``): a collection nobody writes to after its documents' TTL gives them
back within a few intervals (its document count falls to 0, their keys are gone, a site collection's
site counts drop), on a real server and a real cluster; nothing else reclaims them meanwhile."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest
import redis

from neardup.domain import CollectionParams, Document, Index
from neardup.main import sweep_retention_forever
from neardup.storage import RedisStore, Store
from neardup.storage.keys import CollectionKeys
from tests.conftest import StoreTarget
from tests.domain.test_index import text

pytestmark = pytest.mark.anyio

TTL = 1  # seconds
INTERVAL = 0.2  # seconds between two sweeps in these tests
#: More than one round of a sweep (64), so a sweep takes several.
DOCUMENTS = 150


def data_keys(client: redis.Redis | redis.RedisCluster, keys: CollectionKeys) -> list[bytes]:
    """Every data key of the collection's generation that holds data (on a cluster, over all
    primaries; not a band or id family's shape that says it holds no field, N = 0)."""
    if isinstance(client, redis.RedisCluster):
        found = list(client.scan_iter(match=keys.data_pattern, target_nodes=redis.RedisCluster.PRIMARIES))
        return [key for key in found if not (key.endswith(b"}") and client.hget(key, "N") == b"0")]
    return list(client.scan_iter(match=keys.data_pattern))


async def documents_after_sweeps(index: Index, name: str, *, within: float = 30.0) -> int:
    """The collection's document count once the sweep has brought it to 0, or after ``within`` s."""
    stop = asyncio.Event()
    sweeper = asyncio.create_task(sweep_retention_forever(index, stop, INTERVAL))
    try:
        deadline = time.monotonic() + within
        while (documents := (await index.get_collection(name)).documents) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return documents
    finally:
        stop.set()
        await sweeper


@pytest.fixture
async def other_index(store: Store) -> AsyncIterator[Index]:
    """The sweeping process's index, apart from the writer's (as in another service process)."""
    index = Index(store)
    yield index
    await index.close()


async def test_expired_documents_are_reclaimed_without_writes(
    store: Store, store_target: StoreTarget, other_index: Index
) -> None:
    writer = Index(store)
    await writer.create_collection(CollectionParams.create("t", ttl_seconds=TTL))
    await writer.create_collection(CollectionParams.create("kept"))
    await writer.check("t", [Document(f"d{i}", text(i)) for i in range(DOCUMENTS)])
    await writer.check("kept", [Document("k", text(1))])
    keys = (await writer.registry.get("t")).keys
    client = store_target.sync_client()
    try:
        assert data_keys(client, keys)
        await asyncio.sleep(TTL + 0.2)
        # expired, but with no write after them nothing has reclaimed them yet
        assert (await writer.get_collection("t")).documents == DOCUMENTS
        assert await documents_after_sweeps(other_index, "t") == 0
        assert data_keys(client, keys) == []
    finally:
        client.close()
    assert (await writer.get_collection("kept")).documents == 1  # no retention: left alone
    assert (await writer.get_document("kept", "k")).id == "k"
    await writer.close()


async def test_a_store_that_is_down_is_tried_again_next_interval(caplog: pytest.LogCaptureFixture) -> None:
    # a port nobody listens on: every call of the sweep fails, as with a store that is down
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = RedisStore.from_url(f"redis://127.0.0.1:{port}", timeout=0.5)
    stop = asyncio.Event()
    sweeper = asyncio.create_task(sweep_retention_forever(Index(down), stop, INTERVAL))
    try:
        deadline = time.monotonic() + 30
        while caplog.text.count("could not sweep expired documents") < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert caplog.text.count("could not sweep expired documents") >= 2  # logged, and again
        assert not sweeper.done()
    finally:
        stop.set()
        await asyncio.wait_for(sweeper, 10)
        await down.close()


async def test_site_counts_drop_when_the_sweep_reclaims(standalone_store: RedisStore) -> None:
    writer, sweeping = Index(standalone_store), Index(standalone_store)
    await writer.create_collection(CollectionParams.create("s", ttl_seconds=TTL, site_field="url"))
    pages = [
        Document(f"{site}{i}", text(i), {"url": f"https://{site}.example/{i}"})
        for site in ("a", "b")
        for i in range(20)
    ]
    await writer.check("s", pages)
    await writer.settle_links("s")
    keys = (await writer.registry.get("s")).keys
    before = await standalone_store.site(keys, b"a.example")
    assert before.pages == 20 and before.others and before.others[0][0] == b"b.example"
    await asyncio.sleep(TTL + 0.2)
    # read straight from the store: a site read through the index would reclaim first
    assert (await standalone_store.site(keys, b"a.example")).pages == 20
    assert await documents_after_sweeps(sweeping, "s") == 0
    for site in (b"a.example", b"b.example"):
        after = await standalone_store.site(keys, site)
        assert (after.pages, after.others) == (0, []), after
    await writer.close()
    await sweeping.close()
