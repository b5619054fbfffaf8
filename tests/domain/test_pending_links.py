"""The pairs a process holds for its next check of a collection (domain/pending_links.py): what waited
the delay with no check to carry it is settled with a call of its own; in a steady stream, where every
check takes what the one before left, the timer makes no call at all; and on a real store the journal
is empty once the delay has passed, with no site read."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from neardup.domain import CollectionParams, Document, Index
from neardup.domain.pending_links import MAX_SETTLE_ENTRIES, PendingLinks
from neardup.storage import RedisStore
from neardup.storage.store import Settle

pytestmark = pytest.mark.anyio

DELAY = 0.2


async def eventually(condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Wait until ``condition()`` holds (a loaded machine may run the timer late)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition() and loop.time() < deadline:
        await asyncio.sleep(0.01)


class Flushes:
    """The settles a PendingLinks handed to its flush call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Settle]] = []

    async def __call__(self, name: str, gen: str, settle: Settle) -> None:
        self.calls.append((name, gen, settle))


async def test_what_no_check_carries_is_settled_after_the_delay() -> None:
    flushes = Flushes()
    pending = PendingLinks(flushes, delay=DELAY)
    pending.add("c", "g1", 7, [(7, 1), (8, 2)])
    pending.add("c", "g1", 9, [])
    await asyncio.sleep(DELAY / 4)
    assert flushes.calls == []
    await eventually(lambda: flushes.calls)
    assert flushes.calls == [("c", "g1", Settle([7, 9], [(7, 1), (8, 2)]))]
    assert pending.take("c", "g1") is None
    await pending.close()


async def test_a_steady_stream_of_checks_makes_no_call_of_its_own() -> None:
    flushes = Flushes()
    pending = PendingLinks(flushes, delay=DELAY)
    taken = []
    for step in range(30):  # a check every DELAY / 10 for 3 x DELAY, each taking the last one's entry
        pending.add("c", "g1", step + 1, [(step + 1, 0)])
        await asyncio.sleep(DELAY / 10)
        settle = pending.take("c", "g1")
        assert settle is not None
        taken.extend(settle.fields)
    assert taken == list(range(1, 31)) and flushes.calls == []
    await asyncio.sleep(DELAY * 2)
    assert flushes.calls == []
    await pending.close()


async def test_what_a_failed_check_gives_back_is_settled_after_the_delay() -> None:
    flushes = Flushes()
    pending = PendingLinks(flushes, delay=DELAY)
    pending.add("c", "g1", 3, [(3, 1)])
    settle = pending.take("c", "g1")
    assert settle is not None
    pending.give_back("c", "g1", settle)
    pending.give_back("other", "g2", Settle([5], [(5, 4)]))
    await eventually(lambda: len(flushes.calls) == 2)
    assert sorted(call[0] for call in flushes.calls) == ["c", "other"]
    assert {call[0]: call[2] for call in flushes.calls}["c"] == Settle([3], [(3, 1)])
    await pending.close()


async def test_a_flush_settles_what_was_held_when_it_began() -> None:
    """A flush (before a site read) takes the entries held when it began, in at most
    ceil(held / MAX_SETTLE_ENTRIES) calls, however many checks add entries meanwhile."""
    pending: PendingLinks

    async def adding(name: str, gen: str, settle: Settle) -> None:
        flushes.calls.append((name, gen, settle))
        for _ in range(MAX_SETTLE_ENTRIES):  # a steady stream of checks, faster than the flush
            pending.add("c", "g1", next(fields), [])

    flushes = Flushes()
    fields = iter(range(1, 10_000))
    pending = PendingLinks(adding, delay=3600)
    for _ in range(MAX_SETTLE_ENTRIES + 1):
        pending.add("c", "g1", next(fields), [])
    await asyncio.wait_for(pending.flush("c"), 5)
    assert len(flushes.calls) == 2
    assert [f for _, _, settle in flushes.calls for f in settle.fields][: MAX_SETTLE_ENTRIES + 1] == list(
        range(1, MAX_SETTLE_ENTRIES + 2)
    )
    for queue in pending._queues.values():
        pending._cancel(queue)


async def test_a_sweep_settles_what_was_written_a_sweep_interval_ago() -> None:
    """Each sweep goes up to the field of the entry that started the one before (written ``sweep_every``
    ago or more), never while one is under way, and not at a process's first entry."""
    sweeps: list[tuple[str, str, int]] = []
    release = asyncio.Event()

    async def sweep(name: str, gen: str, through: int) -> None:
        sweeps.append((name, gen, through))
        await release.wait()

    pending = PendingLinks(Flushes(), delay=3600, sweep=sweep, sweep_every=DELAY)
    pending.add("c", "g1", 10, [])
    pending.add("c", "g1", 20, [])
    await asyncio.sleep(DELAY)
    pending.add("c", "g1", 30, [])  # a sweep interval after the first: up to it
    await eventually(lambda: sweeps)
    await asyncio.sleep(DELAY)
    pending.add("c", "g1", 40, [])  # the sweep is still under way: none more
    release.set()
    await asyncio.sleep(DELAY / 10)
    pending.add("c", "g1", 50, [])  # the next: up to the entry that started the last one
    await eventually(lambda: len(sweeps) == 2)
    assert sweeps == [("c", "g1", 10), ("c", "g1", 30)]
    await pending.close()


async def test_the_journal_is_empty_once_the_delay_has_passed(redis_url: str) -> None:
    store = RedisStore.from_url(redis_url, timeout=5.0)
    try:
        index = Index(store, settle_delay=DELAY)
        await index.create_collection(CollectionParams.create("held", threshold=0.7, site_field="url"))
        body = " ".join(f"w{i}" for i in range(300))
        await index.check("held", [Document("a", body, {"url": "https://a.example/1"})])
        await index.check("held", [Document("b", body + " x", {"url": "https://b.example/1"})])
        k = (await index.registry.get("held")).keys
        assert await store.client.hlen(k.link_journal) == 1  # the second check's entry: held
        for _ in range(50):  # a loaded machine may run the timer late
            await asyncio.sleep(DELAY)
            if not await store.client.hlen(k.link_journal):
                break
        assert await store.client.hlen(k.link_journal) == 0  # settled by a call of its own
        mirrors = (await index.site("held", "a.example")).mirrors
        assert [(m.site, m.shared) for m in mirrors] == [("b.example", 1)]
        await index.close()
        await index.delete_collection("held")
    finally:
        await store.close()
