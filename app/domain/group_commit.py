"""Group commit: concurrent calls for the same key, arriving while one is being sent, go out together.

A crawler's many small checks each cost one store round trip and one script call, and most of that is
per call, not per document. Here a call for a key is sent at once while fewer than ``max_in_flight``
batches of that key are in flight; calls that arrive meanwhile wait, and the next free sender takes
them as one batch (up to ``max_items`` items), and so on. An idle service adds no delay; a busy one
sends fewer, larger batches, and with two in flight the store has the next batch while the results
of the last one are being worked out. The batch runs in its own
task, so a caller that goes away (client disconnect, timeout) cancels only its own wait, never the
batch the others are in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from neardup.domain.errors import StoreUnavailable

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")


def being_cancelled() -> bool:
    """Whether the current task was asked to cancel (by ``Task.cancel``), as opposed to a
    CancelledError that leaked into it from code that cancelled something of its own. Python 3.10
    cannot tell: every cancellation counts as asked for."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or bool(cancelling())


@dataclass
class _Call(Generic[T, R]):
    items: Sequence[T]
    done: asyncio.Future[list[R]]


@dataclass
class _Queue(Generic[T, R]):
    calls: list[_Call[T, R]] = field(default_factory=list)
    senders: int = 0


class GroupCommit(Generic[K, T, R]):
    """``await submit(key, items)`` returns ``run(key, items)``'s results for those items, in order;
    ``run`` may be handed the items of several calls at once and must return one result per item."""

    def __init__(
        self, run: Callable[[K, list[T]], Awaitable[list[R]]], *, max_items: int, max_in_flight: int = 2
    ) -> None:
        self._run = run
        self._max_items = max_items
        self._max_in_flight = max_in_flight
        self._queues: dict[K, _Queue[T, R]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, key: K, items: Sequence[T]) -> list[R]:
        done: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue()
        queue.calls.append(_Call(items, done))
        if queue.senders < self._max_in_flight:  # a sender free: this call goes out at once
            queue.senders += 1
            task = asyncio.create_task(self._send(key, queue))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await done

    def _take(self, queue: _Queue[T, R]) -> list[_Call[T, R]]:
        """The oldest waiting calls, whole, up to max_items items (at least one call)."""
        taken: list[_Call[T, R]] = []
        count = 0
        while queue.calls and (not taken or count + len(queue.calls[0].items) <= self._max_items):
            call = queue.calls.pop(0)
            taken.append(call)
            count += len(call.items)
        return taken

    @staticmethod
    def _fail(calls: list[_Call[T, R]], error: Exception, cause: BaseException | None = None) -> None:
        if cause is not None:
            error.__cause__ = cause
        for call in calls:
            if not call.done.done():  # a caller that gave up has a cancelled future
                call.done.set_exception(error)

    async def _send(self, key: K, queue: _Queue[T, R]) -> None:
        try:
            while calls := self._take(queue):
                items = [item for call in calls for item in call.items]
                try:
                    results = await self._run(key, items)
                except asyncio.CancelledError as cancelled:
                    if being_cancelled():  # this sender is being cancelled (shutdown)
                        for call in calls:
                            call.done.cancel()
                        raise
                    # A cancellation nobody asked this task for, leaked out of a store client's own
                    # timeouts while the store went away: the batch failed like any store call. A
                    # cancelled caller would be answered by the server's bare 500.
                    self._fail(
                        calls, StoreUnavailable("the store call was interrupted; retry shortly"), cancelled
                    )
                    continue
                except Exception as error:  # every caller of this batch gets the failure
                    self._fail(calls, error)
                    continue
                start = 0
                for call in calls:
                    if not call.done.done():  # a caller that gave up has a cancelled future
                        call.done.set_result(results[start : start + len(call.items)])
                    start += len(call.items)
        finally:
            queue.senders -= 1
            if queue.senders == 0:
                del self._queues[key]
                for call in queue.calls:  # only when cancelled (shutdown): nobody will send these
                    call.done.cancel()
