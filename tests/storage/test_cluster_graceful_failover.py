"""A graceful failover (CLUSTER FAILOVER on a replica: its primary pauses writes, the replica catches up
and takes over, the old primary becomes its replica) under a stream of checks, on a real cluster of 3
primaries and 3 replicas with neardup's module. A call that reaches the old primary after the switch is
answered READONLY (a script that writes, sent to a node that is a replica now) or MOVED: both are a
slot-map change, so the store learns the map again and sends the call to the new primary. No check is
answered with a 503, and every acknowledged document is found by its id and by its text."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from neardup.domain import CollectionParams, Document, Index, StoreUnavailable
from neardup.storage import ClusterStore
from neardup.testing import LocalCluster
from tests.domain.test_index import text

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKERS = 4


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "cluster", nodes=3, replicas=1) as cluster:
        yield cluster


def role(url: str) -> str:
    with redis.Redis.from_url(url, socket_timeout=5.0) as client:
        return str(client.info("replication")["role"])


def fail_over(url: str, tries: int = 3, timeout: float = 15.0) -> None:
    """A graceful failover to the replica at ``url``; returns once it is the primary. Asked again if
    it did not happen (a manual failover the primary could not finish in time is abandoned)."""
    for _ in range(tries):
        with redis.Redis.from_url(url, socket_timeout=5.0) as client:
            client.execute_command("CLUSTER", "FAILOVER")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if role(url) == "master":
                return
            time.sleep(0.05)
    raise AssertionError(f"{url} did not take over after {tries} graceful failovers")


@pytest.mark.parametrize("min_replicas", [0, 1])
async def test_graceful_failovers_under_checks_answer_no_503_and_lose_nothing(
    replicated: LocalCluster, min_replicas: int
) -> None:
    # With NEARDUP_MIN_REPLICAS=1 too: the demoted primary resyncs from its replica at once (the same
    # replication history), so the waits go on being confirmed.
    store = ClusterStore.from_url(replicated.url, min_replicas=min_replicas)
    fresh = None
    try:
        index = Index(store)
        await index.create_collection(CollectionParams.create("c", threshold=0.7))
        acknowledged: dict[str, str] = {}
        unavailable: list[str] = []
        stop = asyncio.Event()

        async def worker(w: int) -> None:
            n = 0
            while not stop.is_set():
                doc = Document(f"w{w}-{n}", text(1000 * w + n))
                n += 1
                try:
                    [result] = await index.check("c", [doc])
                except StoreUnavailable as error:
                    unavailable.append(f"{doc.id}: {error}")
                    continue
                assert result.inserted
                acknowledged[doc.id] = doc.text

        workers = [asyncio.create_task(worker(w)) for w in range(WORKERS)]
        try:
            await asyncio.sleep(0.5)
            # Every shard fails over to its replica, then back: six switches under the stream.
            size = replicated.size
            for j in (*range(size), *range(size)):
                replica = next(
                    url for url in (replicated.urls[j], replicated.urls[size + j]) if role(url) == "slave"
                )
                await asyncio.to_thread(fail_over, replica)
                await asyncio.sleep(0.3)
        finally:
            stop.set()
            await asyncio.gather(*workers)
        assert not unavailable, unavailable
        assert len(acknowledged) > 50

        fresh = ClusterStore.from_url(replicated.url)
        reader = Index(fresh)
        for doc_id, doc_text in acknowledged.items():
            assert (await reader.get_document("c", doc_id)).id == doc_id
            assert doc_id in [m.id for m in await reader.query("c", doc_text, limit=5)], doc_id
    finally:
        await store.close()
        if fresh is not None:
            await fresh.close()
