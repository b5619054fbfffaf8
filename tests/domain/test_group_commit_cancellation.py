"""A CancelledError that leaks out of a batch's store call (the store client cancelling something of
its own while the store goes away), with nobody cancelling the sender, fails the batch's callers
with StoreUnavailable (a 503), not with a cancellation (which the HTTP server answers with a bare
500); a sender really cancelled still cancels its callers."""

from __future__ import annotations

import asyncio

import pytest

from neardup.domain.errors import StoreUnavailable
from neardup.domain.group_commit import GroupCommit

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Task.cancelling, asyncio's


async def test_a_leaked_cancellation_fails_every_caller_of_the_batch_with_store_unavailable() -> None:
    async def run(key: str, items: list[int]) -> list[int]:
        await asyncio.sleep(0)
        raise asyncio.CancelledError()  # nobody called cancel() on this task

    commit: GroupCommit[str, int, int] = GroupCommit(run, max_items=10, max_in_flight=1)
    answers = await asyncio.gather(
        commit.submit("k", [1]), commit.submit("k", [2]), commit.submit("k", [3]), return_exceptions=True
    )
    assert [type(a) for a in answers] == [StoreUnavailable] * 3, answers
    assert await GroupCommit(_echo, max_items=10).submit("k", [4]) == [4]  # nothing left stuck


async def _echo(key: str, items: list[int]) -> list[int]:
    return items


async def test_a_sender_cancelled_for_real_cancels_its_callers() -> None:
    started = asyncio.Event()

    async def run(key: str, items: list[int]) -> list[int]:
        started.set()
        await asyncio.sleep(30)
        return items

    commit: GroupCommit[str, int, int] = GroupCommit(run, max_items=10)
    waiting = asyncio.ensure_future(commit.submit("k", [1]))
    await started.wait()
    for task in list(commit._tasks):
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
