"""The commit point of a cluster check (docs/design.md, "The commit point"): only the check that
reserved an ordinal makes it visible, by its stamp, and only while the ordinal is pending. Each test
fixes an interleaving with the store's pause points (a check held where a GC pause or a SIGSTOP would
hold it), on the session's real 3-node cluster or, for the failover, a real 3 + 3 cluster with
replication waits: a process paused past the abandon time, processes with other timeouts, a retry
that overlaps its first attempt (fenced, or waited for), a reservation lost by a failover, a check
whose swap lost a race, a stamp run twice. In each, first seen holds (exactly one original, nobody
the duplicate of its own duplicate) and every acknowledged document is found by its id, with its own
record, and by its text."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from neardup.domain import CheckResult, CollectionParams, Document, Index, StoreUnavailable
from neardup.storage import ClusterStore
from neardup.testing import LocalCluster
from tests.domain.test_index import text, variant
from tests.storage.test_cluster import assert_every_id_names_its_own_record, stored_contents

pytestmark = pytest.mark.anyio


class Hold:
    """Holds the checks of ``store`` that reach ``point`` (one of ``ClusterStore.pause_points``) until
    released; ``reached`` is set when the first one gets there."""

    def __init__(self, store: ClusterStore, point: str) -> None:
        self.reached = asyncio.Event()
        self.released = asyncio.Event()
        store.pause_points[point] = self._wait

    async def _wait(self) -> None:
        self.reached.set()
        await self.released.wait()

    async def until_reached(self, task: asyncio.Task[Any] | None = None) -> bool:
        """Whether the hold was reached; False if ``task`` ended first (it failed before getting there)."""
        waiting = asyncio.ensure_future(self.reached.wait())
        others = {waiting} if task is None else {waiting, task}
        done, _ = await asyncio.wait(others, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        assert done, "the check neither reached its hold nor ended"
        return self.reached.is_set()


@pytest.fixture
async def processes(cluster_url: str) -> AsyncIterator[list[ClusterStore]]:
    """Three stores on the cluster, each standing for a service process of its own."""
    stores = [ClusterStore.from_url(cluster_url, timeout=1.0) for _ in range(3)]
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()


def doc(doc_id: str, body: str, n: int) -> Document:
    return Document(doc_id, body, {"n": n})


def assert_first_seen(answers: Sequence[tuple[str, CheckResult]], ids: set[str]) -> None:
    """Acknowledged answers (id, result) of one group of near-duplicates: exactly one of ``ids`` is
    ever called new, nobody is the duplicate of its own duplicate, and answers about one id agree."""
    new = {doc_id for doc_id, r in answers if not r.duplicate}
    assert len(new) == 1, answers
    duplicate_of = {(doc_id, r.duplicate_of) for doc_id, r in answers if r.duplicate}
    assert not any((b, a) in duplicate_of for a, b in duplicate_of), answers
    by_id: dict[str, set[str | None]] = {}
    for doc_id, r in answers:
        by_id.setdefault(doc_id, set()).add(r.duplicate_of)
    assert all(len(said) == 1 for said in by_id.values()), answers
    assert set(by_id) == ids


async def assert_found(index: Index, urls: list[str], collection: str, docs: Sequence[Document]) -> None:
    """Every document found by its id with its own record, and by its own text."""
    ids, found = stored_contents(urls, collection)
    assert_every_id_names_its_own_record(ids, found)
    for d in docs:
        stored = await index.get_document(collection, d.id)
        assert stored.metadata == d.metadata, d.id
        assert d.id in [m.id for m in await index.query(collection, d.text)], d.id


async def test_a_check_paused_past_the_abandon_time_is_refused_and_its_retry_starts_clean(
    processes: list[ClusterStore], valkey_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # P1 reserves and claims an ordinal for a, then pauses before its write round, past the collection's
    # abandon time (1 s here, 60 s or more in service); P2's stamp sweeps a's ordinal while P2 checks
    # b, a near-duplicate. P1 comes back and writes: its stamp must be refused (the ordinal is dead), not
    # taken for "stamped already", and its retry starts clean.
    p1, p2, _ = processes
    for p in (p1, p2):  # every process's, so the creator's: the collection's
        monkeypatch.setattr(p._routing, "abandon_ms", lambda: 1000)
    first, second = Index(p1), Index(p2)
    await first.create_collection(CollectionParams.create("paused", threshold=0.7))
    a, b = doc("a", text(70), 1), doc("b", variant(text(70), 1), 2)
    hold = Hold(p1, "claimed")
    paused = asyncio.create_task(first.check("paused", [a]))
    assert await hold.until_reached(paused)
    await asyncio.sleep(1.1)
    [answer_b] = await second.check("paused", [b])
    hold.released.set()
    answers = [("b", answer_b)]
    try:
        [answer_a] = await paused
    except StoreUnavailable:
        [answer_a] = await first.check("paused", [a])  # the retry
    answers.append(("a", answer_a))
    assert_first_seen(answers, {"a", "b"})
    assert not answer_b.duplicate and answer_a.duplicate_of == "b"
    await assert_found(second, valkey_cluster.urls, "paused", [a, b])


async def test_processes_with_other_timeouts_sweep_by_the_collections_one_abandon_time(
    processes: list[ClusterStore], valkey_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # P1 created the collection (abandon time 60 s) and checks a, held before its write round. P2's own
    # abandon time is shorter (here 0: a process with a shorter NEARDUP_STORE_TIMEOUT, taken to the
    # extreme); its stamp must not sweep P1's live check.
    p1, p2, _ = processes
    monkeypatch.setattr(p2._routing, "abandon_ms", lambda: 0)
    first, second = Index(p1), Index(p2)
    await first.create_collection(CollectionParams.create("timeouts", threshold=0.7))
    a, b = doc("a", text(71), 1), doc("b", variant(text(71), 1), 2)
    hold = Hold(p1, "claimed")
    live = asyncio.create_task(first.check("timeouts", [a]))
    assert await hold.until_reached(live)
    await asyncio.sleep(0.05)
    [answer_b] = await second.check("timeouts", [b])
    hold.released.set()
    [answer_a] = await live  # never refused: nothing swept it
    assert_first_seen([("a", answer_a), ("b", answer_b)], {"a", "b"})
    await assert_found(second, valkey_cluster.urls, "timeouts", [a, b])


async def test_a_retry_overlapping_its_first_attempt_fences_a_copy_it_does_not_keep(
    processes: list[ClusterStore], valkey_cluster: LocalCluster
) -> None:
    # P1 checks a and is held between its write round and its stamp; P2 gets the retry of a (same text
    # and metadata), finds the copy pending and, once it has waited long enough, writes a again (held
    # before its own write round); P1 comes back; P3 checks b, a near-duplicate; P2 goes on. The copy P2
    # gave up on must never be committed by P1 after all.
    p1, p2, p3 = processes
    index = Index(p3)
    await index.create_collection(CollectionParams.create("overlap", threshold=0.7))
    a, b = doc("a", text(72), 1), doc("b", variant(text(72), 1), 2)
    hold1, hold2 = Hold(p1, "written"), Hold(p2, "claimed")
    attempt = asyncio.create_task(Index(p1).check("overlap", [a]))
    assert await hold1.until_reached(attempt)
    retry = asyncio.create_task(Index(p2).check("overlap", [a]))
    assert await hold2.until_reached(retry)
    hold1.released.set()
    answers = []
    with contextlib.suppress(StoreUnavailable):  # refused: its copy was fenced
        [answer] = await attempt
        answers.append(("a", answer))
    [answer_b] = await index.check("overlap", [b])
    answers.append(("b", answer_b))
    hold2.released.set()
    [answer] = await retry
    answers.append(("a", answer))
    assert_first_seen(answers, {"a", "b"})
    await assert_found(index, valkey_cluster.urls, "overlap", [a, b])


async def test_a_retry_overlapping_its_first_attempt_waits_for_the_pending_copy_and_keeps_it(
    cluster_url: str, valkey_cluster: LocalCluster
) -> None:
    # P1 checks a and is held between its write round and its stamp; P2 gets the retry of a and finds
    # the copy pending; P1 stamps it while P2 waits. P2 keeps the copy (a's place in first-seen order)
    # and answers as P1 did, rather than writing a again.
    p1 = ClusterStore.from_url(cluster_url, timeout=1.0)
    p2 = ClusterStore.from_url(cluster_url, timeout=20.0)  # it waits up to 5 s for a pending copy
    try:
        index = Index(p1)
        await index.create_collection(CollectionParams.create("wait", threshold=0.7))
        a = doc("a", text(73), 1)
        hold = Hold(p1, "written")
        attempt = asyncio.create_task(index.check("wait", [a]))
        assert await hold.until_reached(attempt)
        [held] = await p1.lookup((await index.registry.get("wait")).keys, [b"a"])
        assert held is not None
        retry = asyncio.create_task(Index(p2).check("wait", [a]))
        await asyncio.sleep(0.5)
        hold.released.set()
        [first] = await attempt
        [again] = await retry
        assert first == again and not first.duplicate
        [kept] = await p1.lookup((await index.registry.get("wait")).keys, [b"a"])
        assert kept is not None and kept.ordinal == held.ordinal  # not written again
        await assert_found(index, valkey_cluster.urls, "wait", [a])
    finally:
        await p1.close()
        await p2.close()


async def test_a_check_whose_swap_lost_a_race_gives_its_reservation_up_dead_at_once(
    processes: list[ClusterStore], cluster_url: str, valkey_cluster: LocalCluster
) -> None:
    # P1 checks a new id and is held before its write round; P2 stores that id meanwhile. P1's swap
    # fails: it takes its versions out and writes again as a replacement. Its first reservation is
    # dead at once, not left pending until a sweep (which would hold retention back till then).
    p1, p2, _ = processes
    index = Index(p2)
    await index.create_collection(CollectionParams.create("race", threshold=0.7))
    mine, theirs = doc("a", text(75), 1), doc("a", text(76), 2)
    hold = Hold(p1, "claimed")
    late = asyncio.create_task(Index(p1).check("race", [mine]))
    assert await hold.until_reached(late)
    await index.check("race", [theirs])
    hold.released.set()
    [answer] = await late
    assert answer.inserted and not answer.duplicate
    k = (await index.registry.get("race")).keys
    client = redis.RedisCluster.from_url(cluster_url)
    try:
        assert client.hlen(k.pending) == 0
        assert list(client.hvals(k.late)) == [b"0"]  # P1's first ordinal: dead
    finally:
        client.close()
    await assert_found(index, valkey_cluster.urls, "race", [mine])


async def test_a_stamp_run_twice_is_refused_and_the_retry_answers_as_the_first_attempt_would(
    processes: list[ClusterStore], valkey_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A replay: the stamp ran, its reply was lost, and it was sent again (as the client resends a
    # command once after a timeout). The second run is refused (a 503: what the check's stamp came
    # to is not known to it); the document is committed, and its retry answers as the first would.
    p1, p2, _ = processes
    index = Index(p1)
    await index.create_collection(CollectionParams.create("replay", threshold=0.7))
    a, b = doc("a", text(77), 1), doc("b", variant(text(77), 1), 2)
    real = p1._routing.run_state_script

    async def stamp_twice(name: str, k: Any, args: Any) -> Any:
        if name.startswith("cluster_stamp"):
            await real(name, k, args)
        return await real(name, k, args)

    monkeypatch.setattr(p1._routing, "run_state_script", stamp_twice)
    with pytest.raises(StoreUnavailable):
        await index.check("replay", [a])
    monkeypatch.setattr(p1._routing, "run_state_script", real)
    [answer_b] = await Index(p2).check("replay", [b])
    [answer_a] = await index.check("replay", [a])  # the retry
    assert_first_seen([("b", answer_b), ("a", answer_a)], {"a", "b"})
    assert answer_b.duplicate_of == "a"
    await assert_found(index, valkey_cluster.urls, "replay", [a, b])


def client_of(node: Any) -> redis.Redis:
    return redis.Redis(host=node.host, port=node.port, socket_timeout=5.0)


@pytest.mark.slow
async def test_a_reservation_a_failover_would_lose_is_never_committed_with_min_replicas_1(
    tmp_path: Path,
) -> None:
    # A 3 + 3 cluster, NEARDUP_MIN_REPLICAS=1. The replica of the state's shard is frozen (SIGSTOP); P1
    # checks a and is held after its claims (on other shards); the state's shard then fails over to the
    # frozen replica, which holds nothing written since the freeze: the state is put back as it was at
    # the freeze (the state-rollback simulation), and the replica resumes. P2 checks b, a
    # near-duplicate; P1 goes on. A reservation the replica never confirmed must not have been counted
    # on: first seen holds.
    cluster = LocalCluster(tmp_path / "replicated", nodes=3, replicas=1)
    cluster.start()
    p1 = ClusterStore.from_url(cluster.url, timeout=1.0, min_replicas=1)
    p2 = ClusterStore.from_url(cluster.url, timeout=1.0, min_replicas=1)
    frozen: list[int] = []
    try:
        index = Index(p2)
        # a collection whose first signature and record groups live off the state's shard, so that the
        # claims (waited for on their own shards) do not need the frozen replica
        for attempt in range(400):  # the groups of one ordinal are not independent (CRC16 is linear)
            name = f"lost{attempt}"
            await index.create_collection(CollectionParams.create(name, threshold=0.7))
            k = (await index.registry.get(name)).keys
            g = await p2._routing.groups(k)
            nodes = {p2._routing._node(key).name for key in (k.state, g.sig(1)[0], g.doc(1)[0])}
            if len(nodes) == 3:
                break
        else:
            pytest.fail("no collection name put its state and first groups on three shards")
        state_node = p2._routing._node(k.state)
        primary = next(n for n in cluster.nodes if n.port == state_node.port)
        with client_of(primary) as c:
            replica_port = int(c.info("replication")["slave0"]["port"])
        replica = next(n for n in cluster.nodes if n.port == replica_port)
        assert replica.pid is not None
        a, b = doc("a", text(74), 1), doc("b", variant(text(74), 1), 2)
        await Index(p1).registry.get(name)

        os.kill(replica.pid, signal.SIGSTOP)
        frozen.append(replica.pid)
        with client_of(primary) as c:
            confirmed = {key: c.hgetall(key) for key in (k.state, k.pending, k.late)}
        hold = Hold(p1, "claimed")
        first = asyncio.create_task(Index(p1).check(name, [a]))
        await hold.until_reached(first)
        # the failover to the frozen replica: the state as it confirmed it
        with client_of(primary) as c:
            for key, fields in confirmed.items():
                c.delete(key)
                if fields:
                    c.hset(key, mapping=fields)
        os.kill(replica.pid, signal.SIGCONT)
        frozen.clear()
        await asyncio.to_thread(cluster.wait_ok, 30)
        answers = []
        [answer_b] = await index.check(name, [b])
        answers.append(("b", answer_b))
        hold.released.set()
        try:
            [answer_a] = await first
        except StoreUnavailable:
            [answer_a] = await Index(p1).check(name, [a])  # the retry
        answers.append(("a", answer_a))
        assert_first_seen(answers, {"a", "b"})
        await assert_found(index, cluster.urls, name, [a, b])
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        await p1.close()
        await p2.close()
        cluster.stop()
