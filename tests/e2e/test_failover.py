"""A failover that loses writes, on a real cluster of 3 primaries and 3 replicas (append-only files,
``appendfsync always``) on loopback, a real ``neardup serve`` with ``NEARDUP_MIN_REPLICAS=1`` and 8
clients sending batches all along: the replica of the shard that holds the collection's state is frozen
(SIGSTOP) while its primary goes on writing, until the primary cuts it off (a 256 kB replica buffer
limit; as loopback socket buffers hold a few MB first, after 5 s a CLIENT KILL does the same); the
primary is SIGKILLed, the replica resumes and takes over (CLUSTER FAILOVER TAKEOVER), missing the
reservations of the last seconds, none of which a check went on with (a reservation waits for a
replica too); the old primary comes back as a replica. While the replica is frozen every batch is a
503 (nothing written after the freeze is confirmed by a replica), and none of those answers counts.
Afterwards every acknowledged document is there, under its own id with its own metadata, found by its
text and by a passage search (the collection keeps passages); its site counts are exactly what the
acknowledged answers say (the collection has a site_field: each client writes one site, and a quarter
of its documents are light variants of the other clients' at the same place, so sites share pages); no
ordinal is named by two ids; and first seen still wins (one original per group of light variants from
many clients)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from redis.crc import key_slot

from neardup.storage import keys
from neardup.testing import LocalCluster
from tests.e2e.conftest import Service, check_concurrently, the_original_of_each_group
from tests.e2e.test_concurrency import group_texts
from tests.storage.test_cluster import assert_every_id_names_its_own_record, stored_contents

pytestmark = pytest.mark.slow

CLIENTS = 8
BATCH = 40
GROUPS = 60
VARIANTS = 4
COLLECTION = "fo"
PAD = "p" * 2_000


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path / "cluster",
        nodes=3,
        replicas=1,
        # A replica more than 256 kB behind is cut off (Valkey counts a replica's buffer only beyond
        # the backlog it shares, hence the small backlog).
        extra_config={"client-output-buffer-limit": "replica 256kb 256kb 0", "repl-backlog-size": "64kb"},
    )
    cluster.start()
    try:
        yield cluster
    finally:
        for node in cluster.nodes:  # a frozen node would not shut down
            if node.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGCONT)
        cluster.stop()


def client_of(node: Any) -> redis.Redis:
    return redis.Redis(host=node.host, port=node.port, socket_timeout=5.0)


def words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(100_000)}" for _ in range(n))


def shared_text(batch: int, i: int, rng: random.Random) -> str:
    """The text every client writes at (batch, i) for i % 4 == 0, one word its own: near-duplicates
    across the clients' sites."""
    base = words(random.Random(f"shared-{batch}-{i}"), 60).split()
    base[rng.randrange(len(base))] = f"x{rng.randrange(100_000)}"
    return " ".join(base)


class Writers:
    """``CLIENTS`` clients sending batches of new documents until stopped, each client the pages of one
    site; a batch answered 503 is sent again until it is answered (as a client retries), so a batch ends
    acknowledged. Keeps what was acknowledged (a 200) with the matches each answer named, and counts
    503s (anything else fails the test)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.acknowledged: dict[str, tuple[str, dict[str, Any]]] = {}
        self.matched: dict[str, list[str]] = {}
        self.unavailable = 0
        self.stop = asyncio.Event()

    async def client(self, n: int) -> None:
        rng = random.Random(n)
        async with httpx.AsyncClient(base_url=self.url, timeout=60.0) as http:
            batch = 0
            while not self.stop.is_set():
                docs = [
                    {
                        "id": f"c{n}-{batch}-{i}",
                        "text": shared_text(batch, i, rng) if i % 4 == 0 else words(rng, 60),
                        "metadata": {"c": n, "b": batch, "i": i, "url": f"https://s{n}.example/{batch}/{i}"},
                    }
                    for i in range(BATCH)
                ]
                batch += 1
                while True:
                    response = await http.post(
                        f"/v1/collections/{COLLECTION}/check/batch", json={"documents": docs}
                    )
                    if response.status_code != 503:
                        break
                    assert "retry-after" in response.headers
                    self.unavailable += 1
                    await asyncio.sleep(0.05)
                assert response.status_code == 200, response.text
                for doc, result in zip(docs, response.json()["results"], strict=True):
                    self.acknowledged[doc["id"]] = (doc["text"], doc["metadata"])
                    self.matched[doc["id"]] = [m["id"] for m in result["matches"]]

    async def run(self) -> None:
        await asyncio.gather(*(self.client(n) for n in range(CLIENTS)))


def site_counts_of(writers: Writers) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Pages per site and shared(site, other), from the acknowledged answers alone: a page counts, and
    a match on another site makes an edge (every document here stays, and the later of two documents
    finds the earlier one)."""
    site = {d: f"s{m['c']}.example" for d, (_, m) in writers.acknowledged.items()}
    pages: dict[str, int] = {}
    for name in site.values():
        pages[name] = pages.get(name, 0) + 1
    partners: dict[str, set[str]] = {d: set() for d in site}
    for d, matched in writers.matched.items():
        for m in matched:
            if m in site and site[m] != site[d]:
                partners[d].add(site[m])
                partners[m].add(site[d])
    shared: dict[tuple[str, str], int] = {}
    for d, others in partners.items():
        for other in others:
            shared[(site[d], other)] = shared.get((site[d], other), 0) + 1
    return pages, shared


async def until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.1)


def test_a_failover_that_loses_writes_loses_nothing_acknowledged_with_min_replicas_1(
    replicated: LocalCluster, tmp_path: Path
) -> None:
    seeds = ",".join(f"{n.host}:{n.port}" for n in replicated.nodes[1:])
    service = Service(
        tmp_path / "svc",
        env={
            "NEARDUP_REDIS_URL": f"{replicated.url},{seeds}",
            "NEARDUP_REDIS_CLUSTER": "true",
            "NEARDUP_MIN_REPLICAS": "1",
            "NEARDUP_STORE_TIMEOUT": "1",
        },
    ).start()
    try:
        with httpx.Client(base_url=service.url, timeout=30.0) as http:
            made = http.post(
                "/v1/collections",
                json={"name": COLLECTION, "threshold": 0.7, "passages": True, "site_field": "url"},
            )
            assert made.status_code == 201, made.text
        # The shard of the collection's state (slots were given out in equal ranges, node j's replica
        # is node 3 + j).
        j = min(key_slot(keys.state(COLLECTION).encode()) // (16384 // 3), 2)
        primary, replica = replicated.nodes[j], replicated.nodes[3 + j]
        assert primary.pid is not None and replica.pid is not None
        evidence: dict[str, int] = {}

        async def scenario() -> Writers:
            writers = Writers(service.url)
            running = asyncio.create_task(writers.run())
            await until(lambda: len(writers.acknowledged) >= 400, 30, "400 documents acknowledged")
            before_freeze = len(writers.acknowledged)
            with client_of(primary) as watch:
                offset_at_freeze = watch.info("replication")["master_repl_offset"]
            os.kill(replica.pid, signal.SIGSTOP)
            with client_of(primary) as watch:
                # The primary keeps writing (reservations, the batches' writes) and cuts the replica
                # off once its buffer passes 256 kB. On loopback the kernel's socket buffers take a few
                # MB before Valkey's own buffer grows, which takes longer than this test should: after
                # 5 s the primary drops the replica's link itself, as the limit would.
                await asyncio.sleep(5)
                if watch.info("replication")["connected_slaves"]:
                    watch.execute_command("CLIENT", "KILL", "TYPE", "replica")
                await until(
                    lambda: watch.info("replication")["connected_slaves"] == 0, 10, "the replica cut off"
                )
                assert watch.info("replication")["master_repl_offset"] > offset_at_freeze

                # What the new primary will miss for sure: reservations made after the cut (those made
                # while the replica was frozen may still sit in its socket buffer). The clients keep
                # reserving, a batch at a time, and keep getting 503s.
                def seq() -> int:
                    return int(watch.hget(keys.state(COLLECTION), "seq"))

                seq_at_cut, unavailable_at_cut = seq(), writers.unavailable
                await until(
                    lambda: seq() >= seq_at_cut + BATCH and writers.unavailable > unavailable_at_cut,
                    30,
                    "a batch reserved and refused after the cut",
                )
            # Nothing written since the freeze was confirmed by a replica of that shard: all 503s.
            assert len(writers.acknowledged) - before_freeze <= CLIENTS * BATCH  # batches already past it
            assert writers.unavailable > 0
            with client_of(primary) as watch:
                evidence["seq_before"] = int(watch.hget(keys.state(COLLECTION), "seq"))
            primary.kill()
            os.kill(replica.pid, signal.SIGCONT)
            with client_of(replica) as promoted:
                promoted.execute_command("READONLY")
                state = promoted.hmget(keys.state(COLLECTION), ["seq", "gen"])
                evidence["seq"] = int(state[0])
                _, found = stored_contents(
                    [u for u in replicated.urls if u != primary.url.removesuffix("/0")],
                    COLLECTION,
                    state[1].decode(),
                )
                evidence["max_ordinal"] = max(found)
                promoted.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
                await until(lambda: promoted.info("replication")["role"] == "master", 30, "the takeover")
            primary.start()  # back as a replica of the new primary (its own writes are discarded)
            await asyncio.to_thread(replicated.wait_ok, 60)
            recovered = len(writers.acknowledged)
            await until(
                lambda: len(writers.acknowledged) >= recovered + 400, 60, "400 more after the failover"
            )
            writers.stop.set()
            await running
            return writers

        writers = asyncio.run(scenario())
        # The fault was real: the new primary had missed reservations; but no shard held a document
        # written under any of them.
        assert evidence["seq_before"] > evidence["seq"] >= evidence["max_ordinal"], evidence

        ids, found = stored_contents(replicated.urls, COLLECTION)
        assert_every_id_names_its_own_record(ids, found)
        acknowledged = writers.acknowledged
        assert all(doc_id.encode() in ids for doc_id in acknowledged)
        with httpx.Client(base_url=service.url, timeout=30.0) as http:
            for doc_id, (_, metadata) in acknowledged.items():
                got = http.get(f"/v1/collections/{COLLECTION}/documents/{doc_id}")
                assert got.status_code == 200 and got.json()["metadata"] == metadata, (doc_id, got.text)
            probes = list(acknowledged.items())
            for start in range(0, len(probes), 200):
                chunk = probes[start : start + 200]
                answer = http.post(
                    f"/v1/collections/{COLLECTION}/check/batch",
                    json={
                        "documents": [{"id": f"probe-{d}", "text": t} for d, (t, _) in chunk],
                        "insert": False,
                    },
                )
                assert answer.status_code == 200, answer.text
                for (doc_id, _), result in zip(chunk, answer.json()["results"], strict=True):
                    assert doc_id in [m["id"] for m in result["matches"]], doc_id

            # Every acknowledged document's passages: a text made of 40 of them names those 40 (of the
            # documents no other client wrote a variant of).
            own = [(d, tm) for d, tm in probes if tm[1]["i"] % 4]
            for start in range(0, len(own), 40):
                chunk = own[start : start + 40]
                essay = "\n\n".join(t for _, (t, _) in chunk)
                found_in = http.post(
                    f"/v1/collections/{COLLECTION}/passages", json={"text": essay, "limit": 40}
                )
                assert found_in.status_code == 200, found_in.text
                assert {s["id"] for s in found_in.json()["sources"]} == {d for d, _ in chunk}

            # Every site's counts are what the acknowledged answers say: nothing acknowledged is lost
            # from them, and nothing else is in them (a site read first settles the link journal).
            pages, shared = site_counts_of(writers)
            assert len(shared) > CLIENTS, "the clients' sites share pages"
            for name, n in pages.items():
                answer = http.get(f"/v1/collections/{COLLECTION}/sites/{name}")
                assert answer.status_code == 200, answer.text
                assert answer.json()["pages"] == n, (name, answer.json()["pages"], n)
                got = {(name, m["site"]): m["shared"] for m in answer.json()["mirrors"] if m["shared"]}
                assert got == {pair: k for pair, k in shared.items() if pair[0] == name}, name

            # First seen still wins on the replicated cluster, after the failover.
            assert http.post("/v1/collections", json={"name": "fo-race"}).status_code == 201
        rng = random.Random(11)
        vocabulary = [f"v{rng.randrange(10**6)}" for _ in range(20_000)]
        jobs = [
            (f"g{group}-v{variant}", text)
            for group in range(GROUPS)
            for variant, text in enumerate(group_texts(rng, vocabulary))
        ]
        random.Random().shuffle(jobs)
        results = check_concurrently([service.url], "fo-race", jobs, 16)
        the_original_of_each_group(results, GROUPS, VARIANTS)
    finally:
        service.stop()
