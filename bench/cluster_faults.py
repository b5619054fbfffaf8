"""A randomized fault harness for the cluster store, in the manner of Jepsen: real processes on
loopback, faults injected at random by a seeded scheduler, every answer recorded, and a checker that
judges the history afterwards.

The system under test: a Redis Cluster of 3 primaries and 3 replicas (``neardup.testing.LocalCluster``:
the module loaded, ``appendonly yes``, ``appendfsync always``) and several real ``neardup serve``
processes on it (``NEARDUP_MIN_REPLICAS=1``). Clients check groups of near-duplicates: each group is
one text and three light variants (recased, a word replaced, a word inserted), its members sent to
different service processes, most within 0.3 s of each other (they race), one in four 0.5-4 s later.
A client does what a real one does: a 503 is retried after its Retry-After, a refused connection on
the next service process, and so is a check not answered within 2 s (shorter than most pauses), while
its first attempt goes on, as after a load balancer's resend: the retry overlaps it, held in a paused
process, and its answer, if one comes, is recorded too.

Faults, one at a time, each undone before the next (the scheduler waits for the cluster to be whole):

- ``service_pause``: SIGSTOP of a service process for 0.5-8 s (``hold``), then SIGCONT;
- ``service_kill``: SIGKILL of a service process, started again on its port (its start-up is not
  waited for: the next fault may come while it starts);
- ``primary_kill``: SIGKILL of a primary, ``CLUSTER FAILOVER TAKEOVER`` on its replica, the old
  primary started again (it comes back as a replica);
- ``reshard``: a range of 32-256 hash slots moved from one primary to another as operators do
  (SETSLOT IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE on every primary);
- ``graceful_failover``: ``CLUSTER FAILOVER`` on a replica;
- ``replica_freeze``: SIGSTOP of a replica for 0.5-8 s (``hold``), then SIGCONT;
- ``service_long_pause`` (only if asked for): SIGSTOP of a service process for 2-5 s past the
  collection's abandon time (a minute), then SIGCONT.

The checker, on the recorded history and the store once every fault is undone:

- first seen wins: at most one acknowledged original per group, exactly one when every member was
  acknowledged; a member answered twice (its first attempt and its retry) got the same answer twice;
  every acknowledged duplicate names a member of its group, the group's original when it was
  acknowledged; no member answered original after another member's answer had come back (real
  time: that one was stored before it was sent);
- every acknowledged document is found by its id (with its own metadata), by its text (a check
  without insert lists it) and by a passage search of its group's text (the collection keeps
  passages);
- the site counts (the collection has a site_field; member v of every group is a page of site
  ``s<v>.example``): every site's pages are the stored members of its variant, and its shared counts
  those the acknowledged answers' matches imply;
- straight from every primary: no ordinal is named by two ids, the record each id names carries that
  id, and every acknowledged id is in the id table.

Prints one JSON object (faults injected by kind, checks acknowledged, 503s, timeouts, violations with
details) and writes it to ``bench/results/cluster_faults.json``; exits 1 on a violation.

    python bench/cluster_faults.py                     # 5 minutes, seed 1
    python bench/cluster_faults.py --minutes 1 --seed 7
    python bench/cluster_faults.py --kinds service_pause,service_long_pause,primary_kill

``run()`` is also the short seeded test's driver (tests/e2e/test_cluster_fault_harness.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from neardup.storage import keys, records
from neardup.storage.keys import CollectionKeys
from neardup.testing import LocalCluster

RESULTS = Path(__file__).resolve().parent / "results" / "cluster_faults.json"
KINDS = (
    "service_pause",
    "service_kill",
    "primary_kill",
    "reshard",
    "graceful_failover",
    "replica_freeze",
)
#: opt-in (``--kinds``): a pause past the collection's abandon time costs a minute of the run
LONG_KINDS = ("service_long_pause",)
#: the collection's abandon time: ``max(60 s, 20 x store timeout)`` of the process that created it
ABANDON_FLOOR = 60.0
COLLECTION = "faults"
VARIANTS = 4
WORDS = 400
#: a member not answered within this long (retries included) is given up and reported unanswered
MEMBER_DEADLINE = 120.0


# --- the system under test --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _neardup_command() -> list[str]:
    script = Path(sys.executable).with_name("neardup")
    return [str(script)] if script.exists() else [sys.executable, "-m", "neardup.cli"]


class ServiceProcess:
    """One ``neardup serve`` on the cluster, on a fixed port (a restart takes the same one)."""

    def __init__(self, n: int, work: Path, env: dict[str, str]) -> None:
        self.n = n
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = work / f"service{n}"
        self.log_path = work / f"service{n}.log"
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    def start(self, timeout: float = 60.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")} | self.env
        command = [
            *_neardup_command(),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout: float = 60.0) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"service {self.n} exited with {self.process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"service {self.n} not ready within {timeout} s")

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def kill(self) -> None:
        if self.process is not None:
            self.signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=10.0)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _role(url: str) -> str:
    with _client(url) as client:
        return str(client.info("replication")["role"])


def _node_id(client: redis.Redis) -> str:
    return _text(client.execute_command("CLUSTER", "MYID"))  # type: ignore[no-untyped-call]


def _primaries(cluster: LocalCluster) -> list[str]:
    return [url for url in cluster.urls if _role(url) == "master"]


def _replica_of(cluster: LocalCluster, primary_url: str) -> int:
    """Index into ``cluster.nodes`` of the replica of the primary at ``primary_url``."""
    with _client(primary_url) as client:
        port = client.connection_pool.connection_kwargs["port"]
    for i, url in enumerate(cluster.urls):
        with _client(url) as client:
            info = client.info("replication")
        if info["role"] == "slave" and int(info["master_port"]) == int(port):
            return i
    raise RuntimeError(f"no replica of {primary_url}")


def _wait_role(url: str, role: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(redis.RedisError):
            if _role(url) == role:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} is not {role} after {timeout} s")


def _owned_ranges(client: redis.Redis) -> list[tuple[int, int]]:
    me = _node_id(client)
    return [
        (int(first), int(last))
        for first, last, *nodes in client.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
        if _text(nodes[0][2]) == me
    ]


def _move_slots(primaries: Sequence[str], source: int, target: int, slots: Sequence[int]) -> int:
    """``slots`` from primary ``source`` to primary ``target`` as redis-cli --cluster reshard does;
    returns how many keys were migrated."""
    clients = [_client(url) for url in primaries]
    src, dst = clients[source], clients[target]
    src_id, dst_id = _node_id(src), _node_id(dst)
    kwargs = dst.connection_pool.connection_kwargs
    migrated = 0
    try:
        for slot in slots:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)  # type: ignore[no-untyped-call]
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)  # type: ignore[no-untyped-call]
            while names := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):  # type: ignore[no-untyped-call]
                src.execute_command(  # type: ignore[no-untyped-call]
                    "MIGRATE", kwargs["host"], kwargs["port"], "", 0, 10_000, "KEYS", *names
                )
                migrated += len(names)
            for i in (target, source, *(i for i in range(len(clients)) if i not in (source, target))):
                clients[i].execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)  # type: ignore[no-untyped-call]
    finally:
        for client in clients:
            client.close()
    return migrated


class Faults:
    """The seeded scheduler's fault kinds, each run to its end (the fault undone) in a thread."""

    def __init__(
        self, cluster: LocalCluster, services: list[ServiceProcess], rng: random.Random, hold: float
    ) -> None:
        self.cluster = cluster
        self.services = services
        self.rng = rng
        #: the longest pause of a service process or freeze of a replica, in seconds
        self.hold = hold
        self.abandon = ABANDON_FLOOR

    def run(self, kind: str) -> dict[str, Any]:
        self.cluster.wait_ok(120)
        started = time.monotonic()
        detail: dict[str, Any] = getattr(self, kind)()
        self.cluster.wait_ok(120)
        return {"kind": kind, **detail, "took_s": round(time.monotonic() - started, 2)}

    def service_pause(self) -> dict[str, Any]:
        service = self.rng.choice(self.services)
        seconds = round(self.rng.uniform(0.5, self.hold), 2)
        service.signal(signal.SIGSTOP)
        time.sleep(seconds)
        service.signal(signal.SIGCONT)
        return {"service": service.n, "seconds": seconds}

    def service_long_pause(self) -> dict[str, Any]:
        """A pause past the collection's abandon time: the other processes' stamps sweep the paused
        one's pending ordinals dead, and its checks are refused when it resumes."""
        service = self.rng.choice(self.services)
        seconds = round(self.abandon + self.rng.uniform(2.0, 5.0), 2)
        service.signal(signal.SIGSTOP)
        time.sleep(seconds)
        service.signal(signal.SIGCONT)
        return {"service": service.n, "seconds": seconds}

    def service_kill(self) -> dict[str, Any]:
        service = self.rng.choice(self.services)
        down = round(self.rng.uniform(0.2, 2.0), 2)
        service.kill()
        time.sleep(down)
        # Started again, not waited for: clients find it refusing connections until it is up, and
        # the next faults do not wait for its start-up (checked ready before the checker runs).
        service.launch()
        return {"service": service.n, "down_s": down}

    def primary_kill(self) -> dict[str, Any]:
        primaries = _primaries(self.cluster)
        victim_url = self.rng.choice(primaries)
        replica = _replica_of(self.cluster, victim_url)
        victim = self.cluster.urls.index(victim_url)
        self.cluster.nodes[victim].kill()
        with _client(self.cluster.urls[replica]) as client:
            client.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
        _wait_role(self.cluster.urls[replica], "master", 30)
        self.cluster.nodes[victim].start()  # back as a replica of the new primary
        return {"killed": victim, "promoted": replica}

    def graceful_failover(self) -> dict[str, Any]:
        replicas = [i for i, url in enumerate(self.cluster.urls) if _role(url) == "slave"]
        chosen = self.rng.choice(replicas)
        url = self.cluster.urls[chosen]
        for _ in range(3):  # a manual failover the primary could not finish in time is abandoned
            with _client(url) as client:
                client.execute_command("CLUSTER", "FAILOVER")
            with contextlib.suppress(RuntimeError):
                _wait_role(url, "master", 15)
                return {"promoted": chosen}
        raise RuntimeError(f"node {chosen} did not take over after 3 graceful failovers")

    def replica_freeze(self) -> dict[str, Any]:
        replicas = [i for i, url in enumerate(self.cluster.urls) if _role(url) == "slave"]
        chosen = self.rng.choice(replicas)
        pid = self.cluster.nodes[chosen].pid
        assert pid is not None
        seconds = round(self.rng.uniform(0.5, self.hold), 2)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        return {"frozen": chosen, "seconds": seconds}

    def reshard(self) -> dict[str, Any]:
        primaries = _primaries(self.cluster)
        owned = []
        for url in primaries:
            with _client(url) as client:
                owned.append(_owned_ranges(client))
        source = self.rng.choice([i for i, ranges in enumerate(owned) if ranges])
        target = self.rng.choice([i for i in range(len(primaries)) if i != source])
        first, last = self.rng.choice(owned[source])
        count = min(self.rng.randint(32, 256), last - first + 1)
        start = self.rng.randint(first, last - count + 1)
        slots = list(range(start, start + count))
        migrated = _move_slots(primaries, source, target, slots)
        return {
            "from": self.cluster.urls.index(primaries[source]),
            "to": self.cluster.urls.index(primaries[target]),
            "slots": f"{start}-{start + count - 1}",
            "keys": migrated,
        }


# --- the clients -----------------------------------------------------------------------------------


def group_texts(rng: random.Random, vocabulary: list[str]) -> list[str]:
    """One text and three light variants: recased and repunctuated, one word replaced, one inserted."""
    words = [rng.choice(vocabulary) for _ in range(WORDS)]
    recased = " ".join(w.upper() + "," if i % 7 == 0 else w for i, w in enumerate(words))
    replaced = list(words)
    replaced[rng.randrange(WORDS)] = "replacement"
    inserted = list(words)
    inserted.insert(rng.randrange(WORDS), "insertion")
    return [" ".join(words), recased, " ".join(replaced), " ".join(inserted)]


def member_delay(rng: random.Random) -> float:
    """Most members within 0.3 s of each other (they race); one in four 0.5-4 s later (it arrives
    while another member's check or retry may still be held in a paused process)."""
    return rng.uniform(0.0, 0.3) if rng.random() < 0.75 else rng.uniform(0.5, 4.0)


def member_id(group: int, variant: int) -> str:
    return f"g{group}-v{variant}"


@dataclass
class History:
    #: id -> (text, metadata) of every member sent
    sent: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    #: id -> monotonic time of its first send
    first_sent: dict[str, float] = field(default_factory=dict)
    #: id -> every 200 it got: (monotonic time it came back, its body); two when an attempt the
    #: client stopped waiting for was answered too
    acknowledged: dict[str, list[tuple[float, dict[str, Any]]]] = field(default_factory=dict)
    #: the attempts left running after their client's timeout
    late: list[asyncio.Future[None]] = field(default_factory=list)
    #: every attempt's outcome: "200", "503", "timeout", "connect", or another status
    attempts: Counter[str] = field(default_factory=Counter)
    unanswered: list[str] = field(default_factory=list)
    #: the checker's reading of the site counts: site -> (pages, {other site: shared})
    sites: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)
    #: other statuses than 200 and 503 (a 500 is a violation in itself)
    broken: list[str] = field(default_factory=list)
    groups: int = 0


async def _send_member(
    https: list[httpx.AsyncClient],
    first: int,
    delay: float,
    timeout: float,
    doc_id: str,
    text: str,
    metadata: dict[str, Any],
    history: History,
) -> None:
    """Sends one member until a 200. An attempt not answered within ``timeout`` is not cancelled:
    it goes on (as after a load balancer's resend, or a client's retry while its first request is
    still being served) and its answer, when it comes, is recorded too (``late``)."""
    body = {"id": doc_id, "text": text, "metadata": metadata}
    history.sent[doc_id] = (text, metadata)
    await asyncio.sleep(delay)
    history.first_sent[doc_id] = time.monotonic()
    deadline = time.monotonic() + MEMBER_DEADLINE
    at = first
    while time.monotonic() < deadline:
        http = https[at % len(https)]
        attempt = asyncio.ensure_future(http.post(f"/v1/collections/{COLLECTION}/check", json=body))
        done, _ = await asyncio.wait({attempt}, timeout=timeout)
        if not done:
            history.attempts["timeout"] += 1
            history.late.append(asyncio.ensure_future(_late_answer(attempt, doc_id, history)))
            at += 1  # the next process; the first attempt may still be held in a paused one
            continue
        try:
            response = attempt.result()
        except httpx.HTTPError:
            history.attempts["connect"] += 1
            at += 1
            await asyncio.sleep(0.1)
            continue
        history.attempts[str(response.status_code)] += 1
        if response.status_code == 200:
            history.acknowledged.setdefault(doc_id, []).append((time.monotonic(), response.json()))
            return
        if response.status_code == 503:
            retry_after = float(response.headers.get("retry-after", "1"))
            await asyncio.sleep(min(retry_after, 1.0) * random.uniform(0.2, 1.0))
            continue
        history.broken.append(f"{doc_id}: {response.status_code} {response.text[:300]}")
        return
    history.unanswered.append(doc_id)


async def _late_answer(attempt: asyncio.Future[httpx.Response], doc_id: str, history: History) -> None:
    """The answer of an attempt its client stopped waiting for: a 200 is acknowledged like any."""
    try:
        response = await attempt
    except httpx.HTTPError:
        history.attempts["late error"] += 1
        return
    history.attempts[f"late {response.status_code}"] += 1
    if response.status_code == 200:
        history.acknowledged.setdefault(doc_id, []).append((time.monotonic(), response.json()))
    elif response.status_code != 503:
        history.broken.append(f"{doc_id} (late): {response.status_code} {response.text[:300]}")


async def _clients(
    urls: list[str], workers: int, seed: int, stop: asyncio.Event, history: History, timeout: float
) -> None:
    vocab_rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = [
        "".join(vocab_rng.choice(letters) for _ in range(vocab_rng.randint(3, 10))) for _ in range(20_000)
    ]
    next_group = iter(range(10**9))
    # Attempts left running hold their connections: room for many.
    limits = httpx.Limits(max_connections=64 * workers, max_keepalive_connections=4 * workers)
    https = [httpx.AsyncClient(base_url=url, timeout=MEMBER_DEADLINE, limits=limits) for url in urls]

    async def worker() -> None:
        while not stop.is_set():
            group = next(next_group)
            history.groups += 1
            group_rng = random.Random(seed * 1_000_003 + group)
            texts = group_texts(group_rng, vocabulary)
            # Each member to another service process, at its own moment (member_delay): some race,
            # some are sent after another member's answer came back.
            await asyncio.gather(
                *(
                    _send_member(
                        https,
                        group + v,
                        member_delay(group_rng),
                        timeout,
                        member_id(group, v),
                        t,
                        {"group": group, "variant": v, "url": f"https://s{v}.example/g{group}"},
                        history,
                    )
                    for v, t in enumerate(texts)
                )
            )

    try:
        await asyncio.gather(*(worker() for _ in range(workers)))
        await asyncio.gather(*history.late)
    finally:
        for http in https:
            await http.aclose()


# --- the checker -----------------------------------------------------------------------------------


def check_history(history: History) -> list[dict[str, Any]]:
    """First seen wins, judged on the answers alone."""
    violations: list[dict[str, Any]] = []
    by_group: dict[int, list[str]] = {}
    for doc_id in history.sent:
        by_group.setdefault(int(doc_id[1:].split("-")[0]), []).append(doc_id)
    for group, members in sorted(by_group.items()):
        got = {m: history.acknowledged[m] for m in members if m in history.acknowledged}
        answers = {m: [body for _, body in bodies] for m, bodies in got.items()}
        for m, bodies in answers.items():
            if len({(body["duplicate"], body["duplicate_of"]) for body in bodies}) > 1:
                violations.append({"kind": "answers_disagree", "group": group, "id": m, "answers": bodies})
        originals = [m for m, bodies in answers.items() if any(not body["duplicate"] for body in bodies)]
        if len(originals) > 1:
            violations.append({"kind": "two_originals", "group": group, "answers": answers})
        elif not originals and len(answers) == len(members):
            violations.append({"kind": "no_original", "group": group, "answers": answers})
        for m, bodies in answers.items():
            for body in bodies:
                if not body["inserted"]:
                    violations.append({"kind": "not_inserted", "id": m, "answer": body})
                if body["duplicate"] and (
                    body["duplicate_of"] not in members
                    or (len(originals) == 1 and body["duplicate_of"] != originals[0])
                ):
                    violations.append(
                        {"kind": "wrong_duplicate_of", "group": group, "id": m, "answers": answers}
                    )
        for original in originals:
            before = [
                m
                for m, bodies in got.items()
                if m != original and min(t for t, _ in bodies) < history.first_sent[original]
            ]
            if before:
                violations.append(
                    {
                        "kind": "original_after_an_acknowledged_member",
                        "group": group,
                        "original": original,
                        "acknowledged_before_it_was_sent": before,
                        "answers": answers,
                    }
                )
    return violations


def stored_contents(urls: list[str], name: str) -> tuple[dict[bytes, int], dict[int, bytes]]:
    """From every primary directly: the id table (id -> ordinal) and the records (ordinal -> record)
    of the collection's generation. An id found in two groups is reported by the caller."""
    ids: dict[bytes, int] = {}
    twice: list[bytes] = []
    found: dict[int, bytes] = {}
    clients = [_client(url) for url in urls]
    try:
        primaries = [c for c in clients if c.info("replication")["role"] == "master"]
        gen = next(
            _text(c.hget(key, "gen")) for c in primaries for key in c.scan_iter(match=keys.state(name))
        )
        k = CollectionKeys(name, gen)
        for client in primaries:
            for key in client.scan_iter(match=f"{k.id_prefix}*", count=1000):
                if key.endswith(b"}"):  # a family's shape (L, S, N), not a group of ids
                    continue
                for raw_id, ordinal in client.hgetall(key).items():
                    doc_id = raw_id if isinstance(raw_id, bytes) else raw_id.encode()
                    if doc_id in ids:
                        twice.append(doc_id)
                    ids[doc_id] = int(ordinal)
            for key in client.scan_iter(match=f"{k.doc_prefix}*", count=1000):
                group = int(key.decode().rsplit(":", 1)[1])
                for slot, record in client.hgetall(key).items():
                    found[group * keys.DOC_GROUP + int(slot)] = (
                        record if isinstance(record, bytes) else record.encode()
                    )
    finally:
        for client in clients:
            client.close()
    if twice:
        raise AssertionError(f"ids held in two id groups: {twice[:10]}")
    return ids, found


async def check_store(url: str, cluster: LocalCluster, history: History) -> list[dict[str, Any]]:
    """Every acknowledged document by id (its own metadata) and by text; the store's own tables."""
    violations: list[dict[str, Any]] = []
    acknowledged = sorted(history.acknowledged)
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as http:
        semaphore = asyncio.Semaphore(8)

        async def answered(method: str, path: str, body: Any = None) -> httpx.Response:
            """The answer once the service answers something else than a 503 (at most 10 s)."""
            for _ in range(20):
                response = await http.request(method, f"/v1/collections/{COLLECTION}/{path}", json=body)
                if response.status_code != 503:
                    break
                await asyncio.sleep(0.5)
            return response

        async def by_id(doc_id: str) -> None:
            async with semaphore:
                got = await answered("GET", f"documents/{doc_id}")
            metadata = history.sent[doc_id][1]
            if got.status_code != 200 or got.json()["metadata"] != metadata:
                violations.append(
                    {"kind": "lost_by_id", "id": doc_id, "status": got.status_code, "body": got.text[:300]}
                )

        await asyncio.gather(*(by_id(doc_id) for doc_id in acknowledged))
        for start in range(0, len(acknowledged), 50):
            chunk = acknowledged[start : start + 50]
            body = {
                "documents": [{"id": f"probe-{d}", "text": history.sent[d][0]} for d in chunk],
                "insert": False,
            }
            answer = await answered("POST", "check/batch", body)
            if answer.status_code != 200:
                violations.append(
                    {"kind": "probe_failed", "status": answer.status_code, "body": answer.text[:300]}
                )
                continue
            for doc_id, result in zip(chunk, answer.json()["results"], strict=True):
                if doc_id not in [m["id"] for m in result["matches"]]:
                    violations.append(
                        {"kind": "lost_by_text", "id": doc_id, "matches": result["matches"][:5]}
                    )

        # Passages: a search of a group's text names every acknowledged member (each holds the text).
        groups: dict[str, list[str]] = {}
        for doc_id in acknowledged:
            groups.setdefault(doc_id.split("-")[0], []).append(doc_id)
        for group, members in sorted(groups.items()):
            answer = await answered(
                "POST", "passages", {"text": history.sent[members[0]][0], "limit": VARIANTS}
            )
            if answer.status_code != 200:
                violations.append(
                    {"kind": "passages_failed", "status": answer.status_code, "body": answer.text[:300]}
                )
                continue
            sources = answer.json()["sources"]
            holders = {s["id"] for s in sources} | {
                c["id"] for s in sources for span in s["spans"] for c in span["also_in"]
            }
            for doc_id in members:
                if doc_id not in holders:
                    violations.append({"kind": "lost_by_passage", "id": doc_id, "group": group})

        violations += await check_sites(answered, history)

    ids, found = await asyncio.to_thread(stored_contents, cluster.urls, COLLECTION)
    named: dict[int, list[str]] = {}
    for raw_id, ordinal in ids.items():
        named.setdefault(ordinal, []).append(raw_id.decode())
    for ordinal, names in named.items():
        if len(names) > 1:
            violations.append({"kind": "ordinal_named_twice", "ordinal": ordinal, "ids": names})
    for raw_id, ordinal in ids.items():
        holder = records.record_id(found.get(ordinal, b""))
        if holder != raw_id and raw_id.decode() in history.acknowledged:
            violations.append(
                {
                    "kind": "id_names_another_record",
                    "id": raw_id.decode(),
                    "ordinal": ordinal,
                    "record_id": holder.decode(errors="replace"),
                }
            )
    for doc_id in acknowledged:
        if doc_id.encode() not in ids:
            violations.append({"kind": "acknowledged_id_missing", "id": doc_id})
    return violations


def site_of(doc_id: str) -> str:
    """Member v of every group is a page of site ``s<v>.example`` (its ``url``)."""
    return f"s{doc_id.rsplit('-v', 1)[1]}.example"


async def check_sites(answered: Any, history: History) -> list[dict[str, Any]]:
    """The site counts (the collection has a site_field; a group's members are pages of four sites):
    every site's pages are the stored members of its variant, and its shared counts are what the
    acknowledged answers' matches imply (a match across two sites is an edge; every member of a group
    is on its own site). Exact when every member sent was answered; else the shared counts are not
    judged (an unanswered member may be stored, its matches unknown)."""
    violations: list[dict[str, Any]] = []
    stored = set(history.acknowledged)
    for doc_id in sorted(set(history.sent) - stored):  # sent, never acknowledged: stored or not
        got = await answered("GET", f"documents/{doc_id}")
        if got.status_code == 200:
            stored.add(doc_id)
    pages: Counter[str] = Counter(site_of(d) for d in stored)
    partners: dict[str, set[str]] = {d: set() for d in stored}
    for doc_id, bodies in history.acknowledged.items():
        for _, body in bodies:
            for match in body.get("matches", []):
                other = match["id"]
                if other in partners and site_of(other) != site_of(doc_id):
                    partners[doc_id].add(site_of(other))
                    partners[other].add(site_of(doc_id))
    shared: Counter[tuple[str, str]] = Counter(
        (site_of(d), other) for d, others in partners.items() for other in others
    )
    for v in range(VARIANTS):
        site = f"s{v}.example"
        answer = await answered("GET", f"sites/{site}")
        if answer.status_code != 200:
            violations.append(
                {"kind": "site_read_failed", "status": answer.status_code, "body": answer.text[:300]}
            )
            continue
        body = answer.json()
        if body["pages"] != pages[site]:
            violations.append(
                {"kind": "site_pages", "site": site, "counted": body["pages"], "stored": pages[site]}
            )
        got = {m["site"]: m["shared"] for m in body["mirrors"] if m["shared"]}
        history.sites[site] = (body["pages"], got)
        want = {other: n for (s, other), n in shared.items() if s == site}
        if not history.unanswered and got != want:
            violations.append({"kind": "site_shared", "site": site, "counted": got, "answered": want})
    return violations


# --- the run ---------------------------------------------------------------------------------------


def _schedule(rng: random.Random, kinds: Sequence[str]) -> Any:
    """Every kind once first (in a seeded order), then at random."""
    first = list(kinds)
    rng.shuffle(first)
    yield from first
    while True:
        yield rng.choice(list(kinds))


async def run(
    work: Path,
    *,
    seconds: float,
    seed: int,
    kinds: Sequence[str] = KINDS,
    services: int = 3,
    workers: int = 6,
    gap: float = 3.0,
    hold: float = 8.0,
    client_timeout: float = 2.0,
    store_timeout: float = 2.0,
) -> dict[str, Any]:
    """One run: the cluster and services started in ``work``, clients and the scheduler for
    ``seconds`` (every kind of ``kinds`` is injected at least once, even past ``seconds``), then every
    fault undone and the checker run. Returns the report; its ``violations`` must be empty."""
    rng = random.Random(seed)
    began = time.monotonic()
    cluster = LocalCluster(work / "cluster", nodes=3, replicas=1)
    cluster.start()
    processes: list[ServiceProcess] = []
    try:
        seeds = ",".join(url.removeprefix("redis://") for url in cluster.urls)
        env = {
            "NEARDUP_REDIS_URL": f"redis://{seeds}",
            "NEARDUP_REDIS_CLUSTER": "true",
            "NEARDUP_MIN_REPLICAS": "1",
            "NEARDUP_STORE_TIMEOUT": str(store_timeout),
        }
        processes = [ServiceProcess(n, work, env) for n in range(services)]
        await asyncio.gather(*(asyncio.to_thread(p.start) for p in processes))
        async with httpx.AsyncClient(base_url=processes[0].url, timeout=30.0) as http:
            made = await http.post(
                "/v1/collections",
                json={"name": COLLECTION, "threshold": 0.7, "passages": True, "site_field": "url"},
            )
            if made.status_code != 201:
                raise RuntimeError(f"creating the collection: {made.status_code} {made.text}")

        history = History()
        setup = time.monotonic() - began
        stop = asyncio.Event()
        faults = Faults(cluster, processes, rng, hold)
        faults.abandon = max(ABANDON_FLOOR, 20 * store_timeout)
        log: list[dict[str, Any]] = []
        errors: list[str] = []
        started = time.monotonic()
        clients = asyncio.create_task(
            _clients([p.url for p in processes], workers, seed, stop, history, client_timeout)
        )
        schedule = _schedule(rng, kinds)
        pending = set(kinds)
        while time.monotonic() - started < seconds or pending:
            await asyncio.sleep(rng.uniform(0.5, 1.5) * gap)
            kind = next(schedule)
            try:
                entry = await asyncio.to_thread(faults.run, kind)
            except Exception as error:  # the fault could not be injected: reported, not a violation
                errors.append(f"{kind}: {error!r}")
                continue
            entry["at_s"] = round(time.monotonic() - started, 2)
            log.append(entry)
            pending.discard(kind)
            if clients.done():
                break
        stop.set()
        await clients
        elapsed = time.monotonic() - started
        for p in processes:  # every service up again, none paused
            p.signal(signal.SIGCONT)
        await asyncio.gather(*(asyncio.to_thread(p.wait_ready) for p in processes))
        cluster.wait_ok(120)
        checking = time.monotonic()
        violations = check_history(history)
        violations += [{"kind": "bad_answer", "detail": b} for b in history.broken]
        violations += await check_store(processes[0].url, cluster, history)
        checked = time.monotonic() - checking
        return {
            "seed": seed,
            "seconds": round(elapsed, 1),
            "setup_s": round(setup, 1),
            "check_s": round(checked, 1),
            "services": services,
            "clients": workers * VARIANTS,
            "faults": dict(Counter(entry["kind"] for entry in log)),
            "fault_log": log,
            "fault_errors": errors,
            "groups": history.groups,
            "checks_sent": len(history.sent),
            "checks_acknowledged": len(history.acknowledged),
            "acknowledged_twice": sum(len(bodies) > 1 for bodies in history.acknowledged.values()),
            "attempts": dict(history.attempts),
            "unavailable_503": history.attempts["503"],
            "timeouts": history.attempts["timeout"],
            "unanswered": history.unanswered,
            "sites": history.sites,
            "violations": violations,
        }
    finally:
        for p in processes:
            p.stop()
        for node in cluster.nodes:  # a frozen node would not shut down
            if node.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGCONT)
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--services", type=int, default=3)
    parser.add_argument("--workers", type=int, default=6, help="groups in flight (4 checks each)")
    parser.add_argument("--gap", type=float, default=3.0, help="mean seconds between faults")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"fault kinds, comma-separated (also: {', '.join(LONG_KINDS)})",
    )
    parser.add_argument("--client-timeout", type=float, default=2.0, help="a client's read timeout")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS) - set(LONG_KINDS)
    if unknown:
        parser.error(f"unknown fault kinds: {sorted(unknown)}")
    with tempfile.TemporaryDirectory(prefix="neardup-faults-") as work:
        report = asyncio.run(
            run(
                Path(work),
                seconds=args.minutes * 60,
                seed=args.seed,
                kinds=kinds,
                services=args.services,
                workers=args.workers,
                gap=args.gap,
                client_timeout=args.client_timeout,
            )
        )
    text = json.dumps(report, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
