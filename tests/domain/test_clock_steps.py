"""The store server's clock stepped forward and back (libfaketime in the server, its offset read from a
file on every call, so a test moves it while the server runs): retention goes by the collection's
clock (app/storage/scripts/_clock.lua), which never goes back, so records' insertion times grow with
ordinals, the reclaim walk from ``low`` never stops at a record stamped "in the future", and every
expired document is reclaimed by the next write (or the timed sweep) after its TTL.

On a standalone server with neardup's module and without it (the Lua steps: the clock is the same
script code on both), and on a one-node Redis Cluster (its state node's scripts: cluster_reserve,
cluster_status, the clock script; data nodes' clocks play no part). The servers run with the C
library's malloc: libfaketime and mimalloc preloaded together crash the server at start."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import redis

from neardup.domain import CollectionParams, Document, DocumentNotFound, Index
from neardup.storage import ClusterStore, EmbeddedValkey, RedisStore, Store, embedded
from neardup.testing import LocalCluster
from tests.domain.test_index import text

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIBFAKETIME = [
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/faketime/libfaketime.so.1"),
]
TTL = 2  # seconds
HOUR = 3600


class ServerClock:
    """The offset, in seconds, of the faked servers' clocks from the real one (a file libfaketime reads
    on every call of the server's clock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.step(0)

    def step(self, seconds: int) -> None:
        partial = self.path.with_suffix(".partial")
        partial.write_text(f"{seconds:+d}\n")
        partial.replace(self.path)  # never a half-written offset


@pytest.fixture(scope="module")
def server_clock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerClock]:
    library = next((p for p in LIBFAKETIME if p.exists()), None)
    if library is None or shutil.which("faketime") is None:
        pytest.skip("Debian's faketime is not installed (scripts/test.sh installs it when run as root)")
    clock = ServerClock(tmp_path_factory.mktemp("clock") / "offset")
    env = {
        "LD_PRELOAD": str(library),
        "FAKETIME_TIMESTAMP_FILE": str(clock.path),
        "FAKETIME_NO_CACHE": "1",
        # the event loop's timers stay on the real monotonic clock: only the wall clock (TIME) steps
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        yield clock
    clock.step(0)


@pytest.fixture(scope="module")
def stepped_servers(
    server_clock: ServerClock, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], str]]:
    """URLs of the faked servers, started on first use: ``module``, ``lua`` (standalone, with and
    without neardup's module) and ``cluster``."""
    started: list[EmbeddedValkey | LocalCluster] = []
    urls: dict[str, str] = {}

    def url(kind: str) -> str:
        if kind not in urls:
            if kind == "cluster":
                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(embedded, "mimalloc_library", lambda: None)  # the nodes take libc's
                    cluster = LocalCluster(tmp_path_factory.mktemp("stepped-cluster"), nodes=1)
                    started.append(cluster)
                    urls[kind] = cluster.start()
            else:
                server = EmbeddedValkey(
                    tmp_path_factory.mktemp(f"stepped-{kind}"), module=kind == "module", malloc="libc"
                )
                started.append(server)
                urls[kind] = server.start()
        return urls[kind]

    try:
        yield url
    finally:
        for running in started:
            running.stop()


@pytest.fixture(params=["module", "lua", "cluster"])
async def stepped(
    request: pytest.FixtureRequest, stepped_servers: Callable[[str], str], server_clock: ServerClock
) -> AsyncIterator[tuple[Store, ServerClock, str]]:
    """A store on an emptied faked server of each kind, its clock at the right time."""
    kind = request.param
    url = stepped_servers(kind)
    server_clock.step(0)
    client = redis.Redis.from_url(url)
    try:
        client.flushall()
    finally:
        client.close()
    store: Store = ClusterStore.from_url(url) if kind == "cluster" else RedisStore.from_url(url)
    try:
        yield store, server_clock, url
    finally:
        server_clock.step(0)
        await store.close()


def server_ms(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        seconds, micros = client.time()
    finally:
        client.close()
    return int(seconds) * 1000 + int(micros) // 1000


async def reclaimed(index: Index, store: Store, ids: list[str]) -> bool:
    """Whether none of these ids has a stored version any more (not merely hidden: reclaim deletes the
    id's entry, expiry alone does not)."""
    collection = await index.registry.get("c")
    found = await store.lookup(collection.keys, [i.encode() for i in ids])
    return all(version is None for version in found)


async def test_reclaim_goes_on_after_the_server_clock_is_stepped_forward_and_back(
    stepped: tuple[Store, ServerClock, str],
) -> None:
    store, clock, url = stepped
    index = Index(store)
    await index.create_collection(CollectionParams.create("c", threshold=0.7, ttl_seconds=TTL))
    before = [f"before{i}" for i in range(3)]
    await index.check("c", [Document(i, text(10 + n)) for n, i in enumerate(before)])

    # One hour ahead for 5 checks: the step expires what it passes over, and the writes reclaim it.
    clock.step(HOUR)
    assert server_ms(url) > time.time() * 1000 + 3_000_000  # the fault is real
    ahead = [f"ahead{i}" for i in range(5)]
    for n, doc_id in enumerate(ahead):
        await index.check("c", [Document(doc_id, text(100 + n))])
    with pytest.raises(DocumentNotFound):
        await index.get_document("c", before[0])
    assert await reclaimed(index, store, before)

    # Set back: 100 later documents, stamped after the ones stamped in the step, never before them.
    clock.step(0)
    assert abs(server_ms(url) - time.time() * 1000) < 60_000
    later = [f"later{i}" for i in range(100)]
    for start in range(0, 100, 20):
        await index.check(
            "c", [Document(i, text(200 + start + n)) for n, i in enumerate(later[start : start + 20])]
        )
    last_ahead = (await index.get_document("c", ahead[-1])).inserted_at
    first_later = (await index.get_document("c", later[0])).inserted_at  # live: not expired early
    assert first_later >= last_ahead
    assert (await index.get_document("c", later[-1])).inserted_at >= first_later

    # Within twice the TTL (the clock runs at half speed until the server's catches up), writes
    # reclaim them all, the ones stamped an hour ahead included (before the fix: an hour).
    deadline = time.monotonic() + 30
    tick = 0
    while not await reclaimed(index, store, ahead + later):
        assert time.monotonic() < deadline, "expired documents were not reclaimed"
        await asyncio.sleep(0.25)
        tick += 1
        await index.check("c", [Document(f"tick{tick}", text(1000 + tick))])
    for doc_id in (ahead[0], later[-1]):
        with pytest.raises(DocumentNotFound):
            await index.get_document("c", doc_id)
    assert (await index.get_collection("c")).documents <= tick


async def test_the_clock_never_goes_back_and_catches_up_with_the_server(
    stepped: tuple[Store, ServerClock, str],
) -> None:
    store, clock, url = stepped
    index = Index(store)
    await index.create_collection(CollectionParams.create("c", threshold=0.7))
    first = await index.put("c", Document("first", text(1)))
    clock.step(-2)  # back 2 s
    times = [first.inserted_at]
    deadline = time.monotonic() + 30
    n = 0
    while True:
        n += 1
        before = server_ms(url)
        stored = await index.put("c", Document(f"d{n}", text(10 + n)))
        assert stored.inserted_at >= times[-1]  # never back, across the step too
        times.append(stored.inserted_at)
        if round(stored.inserted_at * 1000) <= server_ms(url):
            assert round(stored.inserted_at * 1000) >= before
            break  # caught up: insertion times are the server's again
        assert time.monotonic() < deadline, "the collection's clock did not catch up with the server's"
        await asyncio.sleep(0.1)
    assert n > 1  # it did stand ahead of the server for a while
    assert (await index.get_document("c", "first")).inserted_at == first.inserted_at
