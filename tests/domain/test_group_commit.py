"""GroupCommit on its own (a plain asyncio helper, no store): calls that arrive while one is in flight
go out together, every caller gets exactly its own results, failures and cancellations stay with the
calls they belong to."""

from __future__ import annotations

import asyncio

import pytest

from neardup.domain.group_commit import GroupCommit

pytestmark = pytest.mark.anyio


class Recorder:
    """A ``run`` that records the batches it was given and can be held open or made to fail."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[int]]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_on: set[int] = set()

    async def run(self, key: str, items: list[int]) -> list[str]:
        self.batches.append((key, list(items)))
        await self.gate.wait()
        if self.fail_on & set(items):
            raise ValueError(f"bad item in {items}")
        return [f"{key}:{item}" for item in items]


async def test_a_lone_call_goes_out_at_once_alone() -> None:
    rec = Recorder()
    commit: GroupCommit[str, int, str] = GroupCommit(rec.run, max_items=100)
    assert await commit.submit("a", [1, 2]) == ["a:1", "a:2"]
    assert rec.batches == [("a", [1, 2])]


async def test_calls_arriving_while_one_is_in_flight_share_the_next_batch() -> None:
    rec = Recorder()
    commit: GroupCommit[str, int, str] = GroupCommit(rec.run, max_items=100, max_in_flight=1)
    rec.gate.clear()
    first = asyncio.ensure_future(commit.submit("a", [1]))
    await asyncio.sleep(0)  # the first batch is in flight, held at the gate
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(commit.submit("a", [10 * i, 10 * i + 1])) for i in range(1, 6)]
    await asyncio.sleep(0)
    rec.gate.set()
    assert await first == ["a:1"]
    assert [await r for r in rest] == [[f"a:{10 * i}", f"a:{10 * i + 1}"] for i in range(1, 6)]
    # Two store calls for six callers, in arrival order.
    assert rec.batches == [("a", [1]), ("a", [10, 11, 20, 21, 30, 31, 40, 41, 50, 51])]


async def test_with_two_in_flight_the_second_call_goes_at_once_and_later_ones_merge() -> None:
    rec = Recorder()
    commit: GroupCommit[str, int, str] = GroupCommit(rec.run, max_items=100, max_in_flight=2)
    rec.gate.clear()
    together = [asyncio.ensure_future(commit.submit("a", [i])) for i in range(3)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert rec.batches == [("a", [0, 1, 2])]  # arrived together: the first sender takes them all
    second = asyncio.ensure_future(commit.submit("a", [10]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert rec.batches[-1] == ("a", [10])  # the first batch is still in flight: the second goes at once
    later = [asyncio.ensure_future(commit.submit("a", [i])) for i in (11, 12)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(rec.batches) == 2  # both senders busy: these wait
    rec.gate.set()
    assert [await c for c in (*together, second, *later)] == [
        ["a:0"],
        ["a:1"],
        ["a:2"],
        ["a:10"],
        ["a:11"],
        ["a:12"],
    ]
    assert rec.batches == [("a", [0, 1, 2]), ("a", [10]), ("a", [11, 12])]


async def test_batches_never_exceed_max_items_and_calls_are_never_split() -> None:
    rec = Recorder()
    commit: GroupCommit[str, int, str] = GroupCommit(rec.run, max_items=5)
    rec.gate.clear()
    calls = [asyncio.ensure_future(commit.submit("a", [i] * 3)) for i in range(6)]
    await asyncio.sleep(0)
    rec.gate.set()
    results = await asyncio.gather(*calls)
    assert results == [[f"a:{i}"] * 3 for i in range(6)]
    assert all(len(items) <= 5 or len(items) == 3 for _, items in rec.batches)
    assert sorted(item for _, items in rec.batches for item in items) == sorted(
        [i for i in range(6) for _ in range(3)]
    )


async def test_keys_do_not_wait_for_each_other() -> None:
    rec = Recorder()
    commit: GroupCommit[str, int, str] = GroupCommit(rec.run, max_items=100)
    rec.gate.clear()
    a = asyncio.ensure_future(commit.submit("a", [1]))
    b = asyncio.ensure_future(commit.submit("b", [2]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sorted(rec.batches) == [("a", [1]), ("b", [2])]  # both in flight at once
    rec.gate.set()
    assert (await a, await b) == (["a:1"], ["b:2"])


async def test_a_failure_reaches_the_callers_of_that_batch_only() -> None:
    rec = Recorder()
    rec.fail_on = {7}
    commit: GroupCommit[str, int, str] = GroupCommit(rec.run, max_items=100)
    rec.gate.clear()
    first = asyncio.ensure_future(commit.submit("a", [1]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    bad = asyncio.ensure_future(commit.submit("a", [7]))
    with_bad = asyncio.ensure_future(commit.submit("a", [8]))
    await asyncio.sleep(0)
    rec.gate.set()
    assert await first == ["a:1"]
    for call in (bad, with_bad):
        with pytest.raises(ValueError, match="bad item"):
            await call
    assert await commit.submit("a", [9]) == ["a:9"]  # the key keeps working afterwards


async def test_a_caller_that_gives_up_cancels_only_its_own_wait() -> None:
    rec = Recorder()
    commit: GroupCommit[str, int, str] = GroupCommit(rec.run, max_items=100)
    rec.gate.clear()
    leaver = asyncio.ensure_future(commit.submit("a", [1]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    stayer = asyncio.ensure_future(commit.submit("a", [2]))
    await asyncio.sleep(0)
    leaver.cancel()
    await asyncio.sleep(0)
    rec.gate.set()
    assert await stayer == ["a:2"]
    assert leaver.cancelled()
    assert rec.batches == [("a", [1]), ("a", [2])]  # the batch the leaver was in still went out
