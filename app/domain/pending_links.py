"""Cross-site matches a process verified and has not yet linked (docs/design.md "Sites").

A check of a collection with a ``site_field`` writes a *link journal* entry with its batch (the batch's
documents of a site that have candidates, and the candidates), in the same script. The service verifies
those candidates anyway for its answer; the pairs it finds on other sites are kept here, under the
entry's field, and go to the store with the collection's next check from this process (check.lua
settles them before its own batch: no call of their own, no second fsync, no second verification on the
server), or after ``delay`` seconds with one link.lua call when no check comes. Nothing here needs to
survive the process: an entry it never settles (its process died, or its check's answer was lost) stays
in the store's journal until a site read settles it, verifying it from the stored sketches, or until a
*sweep*: every ``sweep_every`` seconds a process that keeps writing entries settles, in the background,
the journal's entries written before its previous sweep (``sweep_every`` ago or more: a live process
settled its own long before), so a collection nobody reads keeps a journal of at most about two sweep
intervals of such entries; a process's first sweep comes FIRST_SWEEP after its first entry, so that
processes that restart faster than ``sweep_every`` still settle what the dead ones left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from neardup.storage.store import Settle

log = logging.getLogger("neardup.index")

#: Seconds after a process's first entry of a collection before its first sweep, which settles the
#: entries written before that one: those a process that died before it left (a process that restarts
#: every few seconds would never reach ``sweep_every``), and a live process's newest, which settling
#: twice leaves as it is (link.lua skips an edge already there).
FIRST_SWEEP = 1.0
#: Most journal entries one check settles (their pairs ride in its arguments); the rest wait for the next.
MAX_SETTLE_ENTRIES = 32


@dataclass
class _Entry:
    journal_field: int
    pairs: list[tuple[int, int]]
    #: when it came (time.monotonic()): the timer settles only what waited ``delay``
    since: float


@dataclass
class _Queue:
    gen: str
    #: oldest first; a take keeps each entry whole
    entries: list[_Entry] = field(default_factory=list)
    timer: asyncio.Task[None] | None = None
    #: the journal field of the check that set the last sweep mark, and when (time.monotonic()): the
    #: next sweep settles the entries up to it, all written ``sweep_every`` ago or more
    mark: int = 0
    marked: float = 0.0
    sweeping: bool = False


class PendingLinks:
    """Per collection name: the journal fields of this process's checks not yet settled, with their
    pairs. ``flush(name, gen, settle)`` settles them without a check (link.lua)."""

    def __init__(
        self,
        flush: Callable[[str, str, Settle], Awaitable[None]],
        *,
        delay: float,
        sweep: Callable[[str, str, int], Awaitable[None]] | None = None,
        sweep_every: float = 0.0,
    ) -> None:
        """``sweep(name, gen, through)`` settles the store's journal entries of fields up to ``through``
        (whoever wrote them); it runs at most every ``sweep_every`` seconds per collection, only in a
        process that writes entries (see the module's docstring)."""
        self._flush = flush
        self._delay = delay
        self._sweep = sweep
        self._sweep_every = sweep_every
        self._first_sweep = min(sweep_every, FIRST_SWEEP)
        self._queues: dict[str, _Queue] = {}
        self._sweeps: set[asyncio.Task[None]] = set()

    def add(self, name: str, gen: str, journal_field: int, pairs: list[tuple[int, int]]) -> None:
        """A check's journal entry and the cross-site pairs verified for it (possibly none: the entry
        still has to go)."""
        queue = self._queues.get(name)
        if queue is None or queue.gen != gen:  # a recreated collection: the old entries went with it
            self._cancel(queue)
            queue = self._queues[name] = _Queue(gen)
        now = time.monotonic()
        queue.entries.append(_Entry(journal_field, pairs, now))
        if queue.timer is None:
            queue.timer = asyncio.create_task(self._later(name))
        if self._sweep is not None and not queue.sweeping:
            if not queue.mark:  # this process's first: its first sweep comes FIRST_SWEEP after it
                queue.mark, queue.marked = journal_field, now - self._sweep_every + self._first_sweep
            elif now - queue.marked >= self._sweep_every:
                queue.sweeping = True
                task = asyncio.create_task(self._swept(name, queue, queue.mark))
                self._sweeps.add(task)
                task.add_done_callback(self._sweeps.discard)
                queue.mark, queue.marked = journal_field, now

    def take(self, name: str, gen: str) -> Settle | None:
        """Up to MAX_SETTLE_ENTRIES entries, oldest first, for a check of this generation to settle."""
        queue = self._queues.get(name)
        if queue is None or not queue.entries:
            return None
        if queue.gen != gen:
            self._cancel(self._queues.pop(name))
            return None
        taken = queue.entries[:MAX_SETTLE_ENTRIES]
        del queue.entries[:MAX_SETTLE_ENTRIES]
        return Settle([e.journal_field for e in taken], [pair for e in taken for pair in e.pairs])

    def give_back(self, name: str, gen: str, settle: Settle) -> None:
        """A check that took ``settle`` failed before it could say whether it settled them: they go
        again (linking is idempotent, and deleting a field twice is nothing)."""
        queue = self._queues.get(name)
        if queue is None or queue.gen != gen:
            if queue is not None:
                return  # recreated meanwhile: these belong to a generation that is gone
            queue = self._queues[name] = _Queue(gen)
        # Every pair goes with the first field: a field's pairs are only ever sent together with it, so
        # any split that keeps them all is as good.
        now = time.monotonic()
        back = [_Entry(f, list(settle.pairs) if i == 0 else [], now) for i, f in enumerate(settle.fields)]
        queue.entries[:0] = back
        if queue.timer is None:
            queue.timer = asyncio.create_task(self._later(name))

    async def flush(self, name: str) -> None:
        """Settle what this process holds for ``name`` (before a site read, at shutdown): the entries
        held when it is called, in at most ceil(held / MAX_SETTLE_ENTRIES) calls, however many checks
        add meanwhile (a site read settles what they wrote before it from the store's journal)."""
        queue = self._queues.get(name)
        calls = -(-len(queue.entries) // MAX_SETTLE_ENTRIES) if queue is not None else 0
        for _ in range(calls):
            queue = self._queues.get(name)
            if queue is None:
                return
            settle = self.take(name, queue.gen)
            if settle is None:
                return
            await self._flush(name, queue.gen, settle)

    async def close(self) -> None:
        """Flush every collection (best effort: what fails stays in the store's journal), after the
        sweeps under way (each ends within its store calls' deadlines)."""
        await asyncio.gather(*self._sweeps, return_exceptions=True)
        for name in list(self._queues):
            try:
                await self.flush(name)
            except Exception as error:
                log.info("settling the link journal of %r at shutdown deferred: %s", name, error)
            self._cancel(self._queues.pop(name, None))

    async def _swept(self, name: str, queue: _Queue, through: int) -> None:
        """One sweep of the journal up to ``through`` (best effort: what fails waits for the next)."""
        try:
            assert self._sweep is not None
            await self._sweep(name, queue.gen, through)
        except Exception as error:
            log.info("sweeping the link journal of %r deferred: %s", name, error)
        finally:
            queue.sweeping = False

    async def _later(self, name: str) -> None:
        """Settle what waited ``delay`` with no check to carry it. While checks keep coming, each takes
        what the one before left, so the oldest entry is always younger than that and this only sleeps
        again: no call of its own (and no fsync pass of its own) in a steady stream."""
        while True:
            queue = self._queues.get(name)
            if queue is None or not queue.entries:
                if queue is not None:
                    queue.timer = None
                return
            wait = queue.entries[0].since + self._delay - time.monotonic()
            if wait <= 0:
                break
            await asyncio.sleep(wait)
        queue.timer = None
        try:
            await self.flush(name)
        except Exception as error:
            log.info("settling the link journal of %r deferred: %s", name, error)

    @staticmethod
    def _cancel(queue: _Queue | None) -> None:
        if queue is not None and queue.timer is not None:
            queue.timer.cancel()
            queue.timer = None
