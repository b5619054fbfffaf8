"""Resharding under a running store, on a real 3-node cluster with neardup's module loaded: hash slots
are moved from one node to another the way operators do it (CLUSTER SETSLOT IMPORTING / MIGRATING,
MIGRATE of each slot's keys, SETSLOT NODE on every primary) while checks run, and the store keeps the
slot map it learned before. The module's bucket commands carry their group keys in their arguments, so
the server cannot route them: they ask the server's routing themselves (native/valkey/buckets.cpp), and
the store, told "non local key", learns the map again and sends them where the slots live. Afterwards
no node holds a key in a slot it does not serve, and every acknowledged document is found by its id, by
its text and by a passage search (the passage index's families move with their slots too), and counted
by its site (the collection's state slot, with its site keys, moves while checks run); the same with
nodes that run the Lua loops instead of the module."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from neardup.domain import CollectionParams, Document, Index, StoreUnavailable
from neardup.domain.models import CheckResult
from neardup.storage import ClusterStore, keys
from neardup.testing import LocalCluster
from tests.domain.test_index import text, variant

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


#: The collection: its state slot (15) is among the first 200 slots, which move while checks run, so
#: its site keys (a site_field: on the state's slot, docs/design.md "Sites on a cluster") move with them.
NAME = "c113"


def site(name: str, n: int) -> dict[str, str]:
    return {"url": f"https://{name}.example/{n}"}


def node_id(client: redis.Redis) -> str:
    raw = client.execute_command("CLUSTER", "MYID")  # type: ignore[no-untyped-call]
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def move_slots(urls: Sequence[str], source: int, target: int, slots: Sequence[int]) -> int:
    """Move ``slots`` from node ``source`` to node ``target`` (indexes into ``urls``, the primaries) as
    redis-cli --cluster reshard does, slot by slot; returns how many keys were migrated."""
    clients = [redis.Redis.from_url(url, socket_timeout=10.0) for url in urls]
    src, dst = clients[source], clients[target]
    src_id, dst_id = node_id(src), node_id(dst)
    host, port = dst.connection_pool.connection_kwargs["host"], dst.connection_pool.connection_kwargs["port"]
    migrated = 0
    try:
        for slot in slots:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)  # type: ignore[no-untyped-call]
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)  # type: ignore[no-untyped-call]
            while True:
                names = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)  # type: ignore[no-untyped-call]
                if not names:
                    break
                src.execute_command("MIGRATE", host, port, "", 0, 10_000, "KEYS", *names)  # type: ignore[no-untyped-call]
                migrated += len(names)
            for client in (dst, src, *(c for i, c in enumerate(clients) if i not in (source, target))):
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)  # type: ignore[no-untyped-call]
    finally:
        for client in clients:
            client.close()
    return migrated


def keys_out_of_place(urls: Sequence[str]) -> dict[str, list[bytes]]:
    """Per node, the keys it holds in slots it does not serve (by its own view of the slots)."""
    out: dict[str, list[bytes]] = {}
    for url in urls:
        with redis.Redis.from_url(url) as client:
            served: set[int] = set()
            myself = node_id(client)
            for first, last, *nodes in client.execute_command("CLUSTER", "SLOTS"):
                owner = nodes[0][2]
                if (owner.decode() if isinstance(owner, bytes) else owner) == myself:
                    served.update(range(first, last + 1))
            wrong = [
                name
                for name in client.scan_iter(count=1000)
                if int(client.execute_command("CLUSTER", "KEYSLOT", name)) not in served
            ]
            if wrong:
                out[url] = wrong
    return out


async def check_until_answered(index: Index, docs: list[Document], tries: int = 20) -> list[CheckResult]:
    """A client's retries: a 503 (a slot mid-migration, refused until it settles) is sent again."""
    for _ in range(tries - 1):
        try:
            return await index.check(NAME, docs)
        except StoreUnavailable:
            await asyncio.sleep(0.1)
    return await index.check(NAME, docs)


@pytest.mark.parametrize("module", [True, False], ids=["module", "lua"])
async def test_checks_during_and_after_a_reshard_write_only_where_the_slots_live(
    tmp_path: Path, module: bool
) -> None:
    # The same with the Lua loops (nodes without the module): both paths are refused the same keys.
    with LocalCluster(tmp_path / "cluster", module=module) as cluster:
        urls = cluster.urls
        store = ClusterStore.from_url(cluster.url)
        fresh = None
        try:
            index = Index(store)
            await index.create_collection(
                CollectionParams.create(NAME, threshold=0.7, passages=True, site_field="url")
            )
            acknowledged: dict[str, str] = {}
            for i in range(30):
                doc = Document(f"a{i}", text(i), site("a", i))
                [result] = await check_until_answered(index, [doc])
                assert result.inserted
                acknowledged[doc.id] = doc.text
            assert store._routing._modules and all(v == module for v in store._routing._modules.values())

            # 200 slots of the first node move to the second while checks go on.
            moving = list(range(0, 200))
            done = threading.Event()
            moved: list[int] = []

            def reshard() -> None:
                try:
                    moved.append(move_slots(urls, 0, 1, moving))
                finally:
                    done.set()

            resharding = threading.Thread(target=reshard)
            resharding.start()
            i = 30
            while not done.is_set():
                doc = Document(f"a{i}", text(i), site("a", i))
                [result] = await check_until_answered(index, [doc])
                assert result.inserted
                acknowledged[doc.id] = doc.text
                i += 1
            resharding.join()
            assert moved and moved[0] > 0  # band groups of the first documents were moved

            # After it: the same store (its slot map as it learned it), new documents one by one, then
            # in batches (a node's share of a batch is past SlotRouting.kAskEach group keys: the module
            # reads its slot table), and near-copies of the first ones.
            for j in range(i, i + 60):
                doc = Document(f"a{j}", text(j), site("a", j))
                [result] = await check_until_answered(index, [doc])
                assert result.inserted
                acknowledged[doc.id] = doc.text
            # Another 200 slots move, to the third node, with no check running: the store's next
            # calls all start from a map that is wrong for them.
            assert move_slots(urls, 0, 2, list(range(200, 400))) > 0
            for j in range(i + 60, i + 160, 20):
                docs = [Document(f"a{m}", text(m), site("a", m)) for m in range(j, j + 20)]
                assert all(r.inserted for r in await check_until_answered(index, docs))
                acknowledged.update((doc.id, doc.text) for doc in docs)
            nears = [Document(f"b{j}", variant(text(j), j), site("b", j)) for j in range(20)]
            assert [r.duplicate_of for r in await check_until_answered(index, nears)] == [
                f"a{j}" for j in range(20)
            ]

            assert keys_out_of_place(urls) == {}
            assert key_slot(keys.state(NAME).encode()) == 15  # among the slots that moved

            # The sites: every page counted, and b's 20 near-copies shared with a.
            a, b = await index.site(NAME, "a.example"), await index.site(NAME, "b.example")
            assert a.pages == len(acknowledged) and b.pages == 20
            assert [(m.site, m.shared, m.other_shared) for m in b.mirrors] == [("a.example", 20, 20)]

            # Every acknowledged document, by id and by text, through a store that learns the map anew.
            fresh = ClusterStore.from_url(cluster.url)
            reader = Index(fresh)
            for doc_id, doc_text in acknowledged.items():
                assert (await reader.get_document(NAME, doc_id)).id == doc_id
                matches = await reader.query(NAME, doc_text, limit=5)
                assert doc_id in [m.id for m in matches], doc_id
                found = await reader.passages(NAME, doc_text)
                holders = {s.id for s in found.sources} | {
                    c.id for s in found.sources for p in s.spans for c in p.also_in
                }
                assert doc_id in holders, doc_id
        finally:
            await store.close()
            if fresh is not None:
                await fresh.close()
