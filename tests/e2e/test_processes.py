"""Many service processes in front of one store: ``neardup serve --workers 2`` and separate processes
on different ports give the same answers as one process, and first seen wins across processes (32
clients split between two services race on groups of near-duplicates)."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from neardup.storage import EmbeddedValkey
from tests.e2e.conftest import Service
from tests.e2e.test_concurrency import group_texts


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Service]]:
    """One single process, one with two workers, one more single process: all on one store, started
    once for the module (the tests use collections of their own)."""
    base = tmp_path_factory.mktemp("processes")
    store = EmbeddedValkey(base / "store")
    started: list[Service] = []
    try:
        env = {"NEARDUP_REDIS_URL": store.start()}
        for name, args in (("one", ()), ("two-workers", ("--workers", "2")), ("other", ())):
            started.append(Service(base / name, *args, env=env))
        with ThreadPoolExecutor(len(started)) as pool:  # in parallel: each takes a second or more
            list(pool.map(Service.start, started))
        yield started
    finally:
        for service in started:
            service.stop()
        store.stop()


def sequence(seed: int) -> list[dict[str, Any]]:
    """Checks in a fixed order: groups of light variants interleaved with unrelated texts."""
    rng = random.Random(seed)
    vocabulary = [f"w{n}" for n in range(5_000)]
    documents = []
    for group in range(12):
        for variant, text in enumerate(group_texts(rng, vocabulary)):
            documents.append({"id": f"g{group}-v{variant}", "text": text, "metadata": {"g": group}})
    rng.shuffle(documents)
    return documents


def answers(results: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (r["id"], r["duplicate"], r["duplicate_of"], [(m["id"], m["similarity"]) for m in r["matches"]])
        for r in results
    ]


def test_workers_and_separate_processes_answer_like_one_process(services: list[Service]) -> None:
    one = services[0]
    documents = sequence(7)
    clients = [httpx.Client(base_url=s.url, timeout=10.0) for s in services]
    try:
        for collection in ("alone", "spread"):
            assert clients[0].post("/v1/collections", json={"name": collection}).status_code == 201
        alone = [clients[0].post("/v1/collections/alone/check", json=doc).json() for doc in documents]
        # Round robin over the three services; the two-worker one gets new connections, so both of
        # its workers answer some.
        rotation = itertools.cycle(range(len(services)))
        spread = []
        for doc in documents:
            index = next(rotation)
            if index == 1:
                with httpx.Client(base_url=services[1].url, timeout=10.0) as fresh:
                    spread.append(fresh.post("/v1/collections/spread/check", json=doc).json())
            else:
                spread.append(clients[index].post("/v1/collections/spread/check", json=doc).json())
        assert answers(spread) == answers(alone)
        assert sum(not r["duplicate"] for r in alone) == 12  # one original per group

        # Reads agree too, whichever process answers.
        for doc in documents[:8]:
            found = [
                c.post("/v1/collections/spread/query", json={"text": doc["text"]}).json() for c in clients
            ]
            assert found[0] == found[1] == found[2]
            assert [m["id"] for m in found[0]["matches"]] == [
                m["id"]
                for m in clients[0]
                .post("/v1/collections/alone/query", json={"text": doc["text"]})
                .json()["matches"]
            ]
        listed = [c.get("/v1/collections/spread").json()["documents"] for c in clients]
        assert listed == [len(documents)] * 3
    finally:
        for client in clients:
            client.close()
    assert one.process is not None and one.process.poll() is None


GROUPS = 150
VARIANTS = 4
CLIENTS = 32


def test_first_seen_wins_across_processes(services: list[Service]) -> None:
    urls = [services[1].url, services[2].url]  # the two-worker service and another process
    rng = random.Random(20240612)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(20_000)]
    jobs = [
        (f"g{group}-v{variant}", text)
        for group in range(GROUPS)
        for variant, text in enumerate(group_texts(rng, vocabulary))
    ]
    random.Random().shuffle(jobs)  # a new order every run: the guarantee must hold for any of them
    with httpx.Client(base_url=urls[0], timeout=10.0) as http:
        assert http.post("/v1/collections", json={"name": "race"}).status_code == 201

    results: dict[str, dict[str, Any]] = {}
    served_by: dict[str, int] = {url: 0 for url in urls}

    async def client(number: int, queue: asyncio.Queue[tuple[str, str]]) -> None:
        url = urls[number % len(urls)]  # clients split between the processes
        async with httpx.AsyncClient(base_url=url, timeout=30.0) as http:
            while True:
                try:
                    doc_id, text = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                response = await http.post("/v1/collections/race/check", json={"id": doc_id, "text": text})
                assert response.status_code == 200, response.text
                results[doc_id] = response.json()
                served_by[url] += 1

    async def run() -> None:
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        for job in jobs:
            queue.put_nowait(job)
        await asyncio.gather(*(client(n, queue) for n in range(CLIENTS)))

    asyncio.run(run())
    assert len(results) == GROUPS * VARIANTS
    assert all(count > GROUPS for count in served_by.values()), served_by

    for group in range(GROUPS):
        members = [f"g{group}-v{variant}" for variant in range(VARIANTS)]
        originals = [m for m in members if not results[m]["duplicate"]]
        assert len(originals) == 1, {m: results[m] for m in members}
        [original] = originals
        for member in members:
            if member != original:
                assert results[member]["duplicate_of"] == original, (member, results[member])
