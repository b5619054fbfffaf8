"""The link journal under other processes, for real: a site read answers in a bounded number of calls
while three writer processes check steadily, with counts exact as of its start; and a collection nobody
reads keeps its journal bounded while the processes that write entries die holding them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from neardup.domain import CollectionParams, Document, DocumentNotFound, Index
from neardup.storage import RedisStore
from tests.domain.test_index import text, variant
from tests.domain.test_sites import SITES, THRESHOLD, Recount, page, replay, stored_edges_agree

pytestmark = pytest.mark.anyio

#: A service process checking steadily into one collection: batches of two pages of two sites of its
#: own, the second a near-copy of the first (so every batch writes a journal entry and links a pair),
#: as fast as the store takes them, until it is killed. Its texts share no word with the tests' pages.
WRITER = """
import asyncio, random, sys
from neardup.domain import Document, Index
from neardup.storage import RedisStore

async def main(url, name, me):
    store = RedisStore.from_url(url, timeout=30.0)
    index = Index(store, journal_sweep=3600)
    rng = random.Random(me)
    step = 0
    while True:
        words = [f"{me}q{rng.randrange(5000)}" for _ in range(120)]
        copy = words[:-3] + ["edited"] + words[-2:]
        await index.check(name, [
            Document(f"{me}/x{step}", " ".join(words), {"url": f"https://{me}-x.example/{step}"}),
            Document(f"{me}/y{step}", " ".join(copy), {"url": f"https://{me}-y.example/{step}"}),
        ])
        step += 1
        if step == 3:
            print("ready", flush=True)

asyncio.run(main(*sys.argv[1:]))
"""

#: A service process that checks the documents it is given (one JSON list of [id, text, url] per line),
#: each as the only check of a process of its own (a fresh Index that never settles: what a process
#: killed after its answer holds), says "checked", and waits to be killed.
DYING = """
import asyncio, json, sys
from neardup.domain import Document, Index
from neardup.storage import RedisStore

async def main(url, name):
    store = RedisStore.from_url(url, timeout=30.0)
    for doc_id, body, link in json.loads(sys.stdin.readline()):
        index = Index(store, settle_delay=3600, journal_sweep=3600)
        await index.check(name, [Document(doc_id, body, {"url": link})])
    print("checked", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(*sys.argv[1:]))
"""


@contextlib.contextmanager
def processes(*commands: list[str]) -> Iterator[list[subprocess.Popen[str]]]:
    """The commands as child processes (stdin and stdout piped), SIGKILLed on the way out."""
    started: list[subprocess.Popen[str]] = []
    try:
        for command in commands:
            started.append(
                subprocess.Popen(
                    [sys.executable, "-c", *command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
            )
        yield started
    finally:
        for proc in started:
            proc.kill()
            proc.communicate()  # reaped, its pipes closed


async def line_of(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    assert proc.stdout is not None
    return (await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)).strip()


def forget(index: Index) -> None:
    """What a SIGKILL leaves of a process's memory: nothing (its held entries stay in the journal)."""
    for queue in index._pending._queues.values():
        index._pending._cancel(queue)
    index._pending._queues.clear()


async def expected(
    index: Index, name: str, recount: Recount
) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    live = set()
    for doc_id in list(recount.version):
        with contextlib.suppress(DocumentNotFound):
            await index.get_document(name, doc_id)
            live.add(doc_id)
    return recount.counts(live)


async def test_a_site_read_is_bounded_while_three_processes_write(redis_url: str) -> None:
    """A stream checked by processes that each died holding their last journal entry (~170 entries,
    so that settling them takes three rounds), then three writer processes checking steadily into the
    same collection: each site read answers in at most E // 64 + 1 journal rounds (E: the entries at its
    start) while they keep writing, with every count of the stream's sites exact (a recount from the
    checks' own answers)."""
    name = "busy"
    store = RedisStore.from_url(redis_url, timeout=30.0)
    client = redis.Redis.from_url(redis_url)
    try:
        reader = Index(store, journal_sweep=3600)
        await reader.create_collection(CollectionParams.create(name, threshold=THRESHOLD, site_field="url"))
        k = (await reader.registry.get(name)).keys
        with processes(*([WRITER, redis_url, name, f"w{p}"] for p in range(3))) as writers:
            for writer in writers:
                assert await line_of(writer) == "ready"
            # each step checked by a process of its own, which died holding its journal entry
            recount, rng = Recount(), random.Random(23)
            for _ in range(200):
                gone = Index(store, settle_delay=3600, journal_sweep=3600)
                await replay(gone, name, recount, rng, 1)
                forget(gone)
            rounds: list[int] = []
            link_journal = store.link_journal

            async def counted(*args: Any, **kwargs: Any) -> Any:
                rounds.append(1)
                return await link_journal(*args, **kwargs)

            store.link_journal = counted  # type: ignore[method-assign]
            reads: list[Any] = []
            seq = int(client.hget(k.state, "seq") or 0)
            for read in [
                *(lambda s=s: reader.site(name, s) for s in SITES),
                lambda: reader.mirrors(name, min_share=0.0, min_pages=1, limit=10_000),
                lambda: reader.settle_links(name),
            ]:
                # E: the entries now, and those the writers may add before the read's first call (each
                # holds its newest entry until its next check, and may have one more in flight)
                held = client.hlen(k.link_journal)
                rounds.clear()
                reads.append(await asyncio.wait_for(read(), 60))
                assert len(rounds) <= (held + 2 * len(writers)) // 64 + 1, (len(rounds), held)
                assert all(writer.poll() is None for writer in writers)  # writing still
            assert int(client.hget(k.state, "seq") or 0) > seq  # the writers wrote on meanwhile
            store.link_journal = link_journal  # type: ignore[method-assign]
        pages, shared = await expected(reader, name, recount)
        assert len(shared) >= 4  # the stream makes real cross-site matches
        for site, answer in zip(SITES, reads, strict=False):
            assert answer.pages == pages.get(site, 0), site
            assert {(site, m.site): m.shared for m in answer.mirrors if m.shared} == {
                pair: n for pair, n in shared.items() if pair[0] == site
            }, site
        pairs = {}
        for p in reads[len(SITES)]:
            if p.site in SITES and p.other in SITES:
                pairs.update({(p.site, p.other): p.shared, (p.other, p.site): p.other_shared})
        assert {pair: n for pair, n in pairs.items() if n} == shared
        assert await stored_edges_agree(store, reader, name)
    finally:
        client.close()
        await store.close()


@pytest.mark.parametrize("server", ["redis_url", "lua_redis_url"])
async def test_a_journal_nobody_reads_stays_bounded_while_processes_die(
    server: str, request: pytest.FixtureRequest
) -> None:
    """Four processes in turn each check eight copies of a.example's pages (each check the only one of
    a process that dies holding its entry: eight entries left per death) while a service process keeps
    checking pages of its own; nobody reads the sites. The journal stays bounded (the survivor's sweeps
    settle what the dead left), and no link is lost (a read at the end counts every copy). On a server
    with neardup's module and on one without."""
    redis_url = request.getfixturevalue(server)
    name = "unread"
    store = RedisStore.from_url(redis_url, timeout=30.0)
    client = redis.Redis.from_url(redis_url)
    try:
        # sweeps as often as it can (every entry it writes, one sweep at a time), to make the test quick
        survivor = Index(store, journal_sweep=0.0)
        await survivor.create_collection(CollectionParams.create(name, threshold=THRESHOLD, site_field="url"))
        k = (await survivor.registry.get(name)).keys
        await survivor.check(
            name, [Document(f"a{j}", text(600 + j), page("a.example", str(j))) for j in range(8)]
        )
        step, peaks = 0, []
        for death in range(4):
            copies = [
                [f"d{death}/{j}", variant(text(600 + j), death + 1), f"https://d{death}.example/{j}"]
                for j in range(8)
            ]
            with processes([DYING, redis_url, name]) as [dying]:
                assert dying.stdin is not None
                dying.stdin.write(json.dumps(copies) + "\n")
                dying.stdin.flush()
                assert await line_of(dying) == "checked"
            peaks.append(client.hlen(k.link_journal))
            assert peaks[-1] >= 8  # the dead process's entries
            # the survivor checks on (a page and a near-copy on two sites of its own each time)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while client.hlen(k.link_journal) > 2 and loop.time() < deadline:
                step += 1
                body = text(900 + step)
                await survivor.check(
                    name,
                    [
                        Document(f"c{step}", body, page("c.example", str(step))),
                        Document(f"e{step}", variant(body, 1), page("e.example", str(step))),
                    ],
                )
                await asyncio.sleep(0.02)
            # what is left: at most the survivor's own newest entry or two (the dead ones' are settled)
            assert client.hlen(k.link_journal) <= 2, client.hlen(k.link_journal)
        assert max(peaks) <= 8 + 2, peaks  # it never held more than one death's entries
        await survivor.close()
        a = await Index(store).site(name, "a.example")
        assert sorted((m.site, m.shared, m.other_shared) for m in a.mirrors) == [
            (f"d{death}.example", 8, 8) for death in range(4)
        ]
    finally:
        client.close()
        await store.close()


async def test_processes_that_restart_faster_than_the_sweep_interval_still_sweep(redis_url: str) -> None:
    """A crash loop: each process checks cross-site copies for ~1.5 s (far less than the 10 s sweep
    interval) and is killed holding its newest entries. Each next process's first sweep, FIRST_SWEEP
    after its first entry, settles what the dead one left: the journal does not grow life after life,
    and a read at the end counts every copy."""
    name = "crashloop"
    store = RedisStore.from_url(redis_url, timeout=30.0)
    client = redis.Redis.from_url(redis_url)
    try:
        await Index(store).create_collection(
            CollectionParams.create(name, threshold=THRESHOLD, site_field="url")
        )
        k = (await Index(store).registry.get(name)).keys
        left: set[bytes] = set()
        step = 0
        for life in range(3):
            index = Index(store, settle_delay=3600)  # the default sweep interval; its own entries held
            started = asyncio.get_running_loop().time()
            while asyncio.get_running_loop().time() - started < 1.5:
                step += 1
                body = text(1200 + step)
                await index.check(
                    name,
                    [
                        Document(f"c{step}", body, page("c.example", str(step))),
                        Document(f"e{step}", variant(body, 1), page("e.example", str(step))),
                    ],
                )
                await asyncio.sleep(0.05)
            await asyncio.gather(*index._pending._sweeps)
            now = set(client.hkeys(k.link_journal))
            assert not now & left, (life, len(now & left))  # the dead one's entries were settled
            left = now
            assert left  # this one dies holding entries of its own
            forget(index)  # killed
        c = await Index(store).site(name, "c.example")
        assert [(m.site, m.shared) for m in c.mirrors] == [("e.example", step)]
    finally:
        client.close()
        await store.close()
