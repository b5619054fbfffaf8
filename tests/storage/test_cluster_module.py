"""The cluster's band buckets through neardup's module (ND.BUCKETS, ND.BUCKETSGET: native/valkey/buckets.cpp)
where the nodes have it, and through the Lua loops where they do not: the same workload on a real
3-node cluster with the module and on one without gives the same answers and byte-identical data;
bad arguments get an error and leave the data alone; nodes whose module is another build's are served
through the Lua loops."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from neardup.domain import CollectionParams, Document, Index, StoreUnavailable
from neardup.storage import ClusterStore, keys, scripts
from neardup.storage.embedded import EmbeddedValkey
from neardup.testing import LocalCluster
from tests.domain.test_index import text, variant
from tests.storage.test_valkey_module import run_workload

pytestmark = pytest.mark.anyio


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    with_module = LocalCluster(tmp_path / "module")
    lua_only = LocalCluster(tmp_path / "lua", module=False)
    try:
        with_module.start()
        lua_only.start()
        yield with_module, lua_only
    finally:
        with_module.stop()
        lua_only.stop()


@pytest.fixture
async def stores(
    clusters: tuple[LocalCluster, LocalCluster],
) -> AsyncIterator[tuple[ClusterStore, ClusterStore]]:
    a, b = ClusterStore.from_url(clusters[0].url), ClusterStore.from_url(clusters[1].url)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


def dump(cluster: LocalCluster) -> dict[bytes, dict[bytes, bytes]]:
    """Every hash of every node; records without their insertion time and the state without the time
    of its last sweep (each cluster has its own clock)."""
    out: dict[bytes, dict[bytes, bytes]] = {}
    for url in cluster.urls:
        client = redis.Redis.from_url(url)
        try:
            out.update({key: client.hgetall(key) for key in client.scan_iter(count=1000)})
        finally:
            client.close()
    for key, fields in out.items():
        if b":d:" in key:
            out[key] = {f: value[value.index(b":") :] for f, value in fields.items()}
        fields.pop(b"swept", None)
        fields.pop(b"clock", None)  # the collection's clock: each server's own
        fields.pop(b"tick", None)
    return out


def calls(cluster: LocalCluster, command: str) -> int:
    total = 0
    for url in cluster.urls:
        client = redis.Redis.from_url(url)
        try:
            total += int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))
        finally:
            client.close()
    return total


@pytest.mark.parametrize("families, target", [(keys.CLUSTER_BAND_FAMILIES, keys.CLUSTER_BAND_TARGET), (2, 4)])
async def test_module_and_lua_bucket_loops_write_the_same_data_and_answer_the_same(
    clusters: tuple[LocalCluster, LocalCluster],
    stores: tuple[ClusterStore, ClusterStore],
    families: int,
    target: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (2, 4): two band and two id families that split their groups in most calls, in both paths
    monkeypatch.setattr(keys, "CLUSTER_BAND_FAMILIES", families)
    monkeypatch.setattr(keys, "CLUSTER_BAND_TARGET", target)
    monkeypatch.setattr(keys, "CLUSTER_ID_FAMILIES", min(families, keys.CLUSTER_ID_FAMILIES))
    monkeypatch.setattr(keys, "CLUSTER_ID_TARGET", target if families == 2 else keys.CLUSTER_ID_TARGET)
    with_module, lua_only = stores
    replies_module = await run_workload(with_module, seed=4)  # type: ignore[arg-type]
    replies_lua = await run_workload(lua_only, seed=4)  # type: ignore[arg-type]
    assert [r.ordinals for r in replies_module] == [r.ordinals for r in replies_lua]
    assert [r.candidates for r in replies_module] == [r.candidates for r in replies_lua]
    assert any(any(c) for r in replies_module for c in r.candidates)  # the near-copies were found
    a, b = dump(clusters[0]), dump(clusters[1])
    assert a == b and any(b":b:" in key for key in a)
    shapes = [fields for key, fields in a.items() if b":b:{" in key and key.endswith(b"}")]
    assert 0 < len(shapes) <= families  # the shape (L, S, N) of each family written
    if families == 2:  # both families split their groups many times
        assert len(shapes) == 2 and min(int(shape[b"L"]) for shape in shapes) >= 5
    assert calls(clusters[0], "nd.buckets") > 0 and calls(clusters[0], "nd.bucketsget") > 0
    assert calls(clusters[1], "nd.buckets") == 0 and calls(clusters[1], "nd.bucketsget") == 0


def test_bad_bucket_arguments_get_an_error_and_leave_the_data_alone(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path / "data")
    server.start()
    client = redis.Redis.from_url(server.url)
    try:
        field = (7).to_bytes(8, "little")
        record = (0).to_bytes(4, "big") + field
        shape = [1, 0, 64]  # one family, starting at level 0, 64 fields per group
        ok = ["1", "p:", 2, *shape, record + (1).to_bytes(5, "big"), b"", 8]
        cases = [
            ("wrong number", ok[:-1]),
            ("wrong number", [*ok[:2], 5, *ok[2:]]),  # an ordinal width
            ("protocol version", ["2", *ok[1:]]),
            ("cap must be", [*ok[:2], 0, *ok[3:]]),
            ("power of two", [*ok[:3], 3, *ok[4:]]),
            ("level out of range", [*ok[:4], 33, *ok[5:]]),
            ("target must be", [*ok[:5], 0, *ok[6:]]),
            ("out of range", [*ok[:6], (1).to_bytes(4, "big") + field + (1).to_bytes(5, "big"), b"", 8]),
            ("9 \\+ width bytes", [*ok[:6], record + b"\0\0\0\1", b"", 8]),  # a 4-byte ordinal
            ("width must be", [*ok[:8], 3]),
            ("9 \\+ width bytes", [*ok[:8], 4]),  # 8-byte keys read as 4-byte ones
        ]
        for message, args in cases:
            with pytest.raises(redis.ResponseError, match=message):
                client.execute_command("ND.BUCKETS", *args)
        with pytest.raises(redis.ResponseError, match="4 \\+ width bytes"):
            client.execute_command("ND.BUCKETSGET", "1", "p:", 1, 0, record[:-1], 8)
        with pytest.raises(redis.ResponseError, match="width must be"):
            client.execute_command("ND.BUCKETSGET", "1", "p:", 1, 0, record, 9)
        with pytest.raises(redis.ResponseError, match="power of two"):
            client.execute_command("ND.BUCKETSGET", "1", "p:", 6, 0, record, 8)
        client.set("p:0}0", "not a hash")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("ND.BUCKETS", *ok)
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("ND.BUCKETSGET", "1", "p:", 1, 0, record, 8)
        assert client.dbsize() == 1 and client.get("p:0}0") == b"not a hash"
        client.delete("p:0}0")
        # Appends: created once, never twice, at most cap (2); removals; reads.
        assert client.execute_command("ND.BUCKETS", *ok) == 1
        assert client.execute_command("ND.BUCKETS", *ok) == 0  # a retry appends nothing
        more = b"".join(record + o.to_bytes(5, "big") for o in (2, 3))
        assert client.execute_command("ND.BUCKETS", "1", "p:", 2, *shape, more, b"", 8) == 0
        assert (
            client.execute_command("ND.BUCKETSGET", "1", "p:", 1, 0, record + record, 8)
            == [(1).to_bytes(5, "big") + (2).to_bytes(5, "big")] * 2
        )
        assert client.hgetall("p:0}") == {b"L": b"0", b"S": b"0", b"N": b"1"}  # the family's shape
        gone = record + (1).to_bytes(5, "big") + record + (2).to_bytes(5, "big")
        assert client.execute_command("ND.BUCKETS", "1", "p:", 2, *shape, b"", gone, 8) == 0
        assert client.execute_command("ND.BUCKETSGET", "1", "p:", 1, 0, record, 8) == [b""]
        # the emptied field and its group are gone; the family's shape says it holds no field
        assert client.keys() == [b"p:0}"] and client.hget("p:0}", "N") == b"0"
    finally:
        client.close()
        server.stop()


async def test_a_node_that_lost_the_module_is_a_503_once_then_served_through_lua(tmp_path: Path) -> None:
    # As after a node restarted without the module since the service asked it: its first call fails
    # before writing anything (StoreDown, a 503); the service asks the node again and uses Lua.
    with LocalCluster(tmp_path / "lost", module=False) as cluster:
        store = ClusterStore.from_url(cluster.url)
        try:
            index = Index(store)
            await index.create_collection(CollectionParams.create("c", threshold=0.7))
            primaries = [node.name for node in store.client.get_primaries()]
            for name in primaries:
                store._routing._modules[name] = True  # what it was told before the restart
                with redis.Redis.from_url(f"redis://{name}") as node:
                    node.config_resetstat()
            with pytest.raises(StoreUnavailable):
                await index.check("c", [Document("a", text(1))])
            [a] = await index.check("c", [Document("a", text(1))])
            [b] = await index.check("c", [Document("b", variant(text(1), 1))])
            assert a.inserted and b.duplicate_of == "a"
            # Every node the checks ran scripts on was asked again; one they never reached (the
            # collection's random generation decides where its keys fall) still holds the old answer.
            touched = []
            for name in primaries:
                with redis.Redis.from_url(f"redis://{name}") as node:
                    stats = node.info("commandstats")
                if any(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "eval")):
                    touched.append(name)
            assert touched and not any(store._routing._modules.get(name) for name in touched), (
                touched,
                store._routing._modules,
            )
        finally:
            await store.close()


async def test_nodes_with_a_module_of_another_version_are_served_through_lua(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nodes whose module is another build's (it reports another version than this release's), played
    # by building this release for another version: the service sends them no module command.
    built = scripts.MODULE_VERSION
    monkeypatch.setattr(scripts, "MODULE_VERSION", built + 1)
    with LocalCluster(tmp_path / "other") as cluster:
        for url in cluster.urls:
            with redis.Redis.from_url(url) as node:
                assert {m[b"name"]: m[b"ver"] for m in node.module_list()}[b"neardup"] == built
        store = ClusterStore.from_url(cluster.url)
        try:
            index = Index(store)
            await index.create_collection(CollectionParams.create("c", threshold=0.7))
            [a] = await index.check("c", [Document("a", text(1))])
            [b] = await index.check("c", [Document("b", variant(text(1), 1))])
            assert a.inserted and b.duplicate_of == "a"
            assert store._routing._modules and not any(store._routing._modules.values())
            assert calls(cluster, "nd.buckets") == 0 and calls(cluster, "nd.bucketsget") == 0
        finally:
            await store.close()


async def test_module_and_lua_write_the_same_passage_families(
    clusters: tuple[LocalCluster, LocalCluster],
    stores: tuple[ClusterStore, ClusterStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Postings go through the band records' code (ND.BUCKETS, or the Lua loops): the same stream with
    passages on, through replacements and deletes, with two passage families that split their groups
    often, leaves the same bytes on both clusters and gets the same passage answers."""
    monkeypatch.setattr(keys, "CLUSTER_PASSAGE_FAMILIES", 2)
    monkeypatch.setattr(keys, "CLUSTER_BAND_TARGET", 4)
    # one generation on both clusters, so that their key names can be compared
    monkeypatch.setattr("neardup.domain.index.secrets.token_hex", lambda n: "a" * (2 * n))
    answers = []
    for store in stores:
        index = Index(store)
        await index.create_collection(CollectionParams.create("p", passages=True))
        base = [text(i, 300) for i in range(20)]
        await index.check("p", [Document(f"d{i}", t) for i, t in enumerate(base)])
        await index.check("p", [Document(f"v{i}", variant(t, i)) for i, t in enumerate(base[:10])])
        await index.put("p", Document("d3", text(99, 300)))
        await index.delete_document("p", "d4")
        answers.append([await index.passages("p", base[i] + " " + base[i + 1]) for i in range(0, 20, 2)])
    assert answers[0] == answers[1]
    assert sum(len(a.sources) for a in answers[0]) >= 20
    a, b = dump(clusters[0]), dump(clusters[1])
    assert a == b
    shapes = [fields for key, fields in a.items() if b":f:{" in key and key.endswith(b"}")]
    assert len(shapes) == 2 and min(int(shape[b"L"]) for shape in shapes) >= 4  # split many times
    assert calls(clusters[0], "nd.buckets") > 0 and calls(clusters[1], "nd.buckets") == 0


def test_commands_of_one_servers_layout_are_refused_on_a_cluster_node(
    cluster_url: str, valkey_cluster: LocalCluster
) -> None:
    """ND.BANDS, ND.PASSAGES and ND.POSTINGS name keys they do not declare and check no slot: a cluster
    node refuses them before reading or writing anything."""
    client = redis.Redis.from_url(valkey_cluster.urls[0])
    try:
        for command in ("ND.BANDS", "ND.PASSAGES", "ND.POSTINGS"):
            with pytest.raises(redis.ResponseError, match="runs on a standalone server only"):
                client.execute_command(command, "1", "nd:c:g:b:", "0")
        assert client.dbsize() == 0
    finally:
        client.close()


def test_nd_link_on_a_cluster_node_asks_about_every_key_first(
    cluster_url: str, valkey_cluster: LocalCluster
) -> None:
    """ND.LINK names its keys in its arguments: on a cluster node it asks the server's routing about
    every key it may touch before it writes (a key of another node's slot: "non local key", nothing
    written), and takes no cutoff (the records are on other slots)."""
    client = redis.Redis.from_url(valkey_cluster.urls[0])
    try:
        mine = set()
        myself = client.execute_command("CLUSTER", "MYID")
        myself = myself.decode() if isinstance(myself, bytes) else myself
        for first, last, *nodes in client.execute_command("CLUSTER", "SLOTS"):
            owner = nodes[0][2]
            if (owner.decode() if isinstance(owner, bytes) else owner) == myself:
                mine.update(range(first, last + 1))
        other = next(str(n) for n in range(10_000) if key_slot(str(n).encode()) not in mine)
        here = next(str(n) for n in range(10_000) if key_slot(str(n).encode()) in mine)
        pairs = (1).to_bytes(8, "big") + (2).to_bytes(8, "big")

        def link(tag: str, cutoff: str) -> Any:
            base = f"nd:probe:g:{{{tag}}}:"
            return client.execute_command(
                "ND.LINK", "1", base + "e:", base + "x:", base + "d:", 32, 120, "0", cutoff, 16, 256, pairs
            )

        with pytest.raises(redis.ResponseError, match="non local key"):
            link(other, "-1")
        with pytest.raises(redis.ResponseError, match="takes no cutoff"):
            link(here, "0")
        assert link(here, "-1") == [0, 0]  # served here: no entries, nothing to link
        assert client.dbsize() == 0
    finally:
        client.close()


async def test_module_and_lua_link_the_same_sites(
    clusters: tuple[LocalCluster, LocalCluster],
    stores: tuple[ClusterStore, ClusterStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The site steps' link loop is ND.LINK where the state's node has the module, the Lua loop
    elsewhere: the same stream with a site_field (a site copied by three others, a replacement, a
    delete) leaves the same site keys on both clusters and gets the same counts."""
    monkeypatch.setattr("neardup.domain.index.secrets.token_hex", lambda n: "a" * (2 * n))
    answers = []
    for store in stores:
        index = Index(store)
        await index.create_collection(CollectionParams.create("s", threshold=0.7, site_field="url"))
        base = [text(i, 200) for i in range(12)]
        await index.check(
            "s", [Document(f"a{i}", t, {"url": f"https://a.example/{i}"}) for i, t in enumerate(base)]
        )
        for site in "bcd":
            copies = [
                Document(f"{site}{i}", variant(t, i), {"url": f"https://{site}.example/{i}"})
                for i, t in enumerate(base[:8])
            ]
            await index.check("s", copies)
        await index.put("s", Document("a3", text(99, 200), {"url": "https://a.example/3"}))
        await index.delete_document("s", "b4")
        answers.append([await index.site("s", f"{x}.example") for x in "abcd"])
    assert answers[0] == answers[1]
    # b: 7 pages left (b4 deleted), all copied on c and d, and 6 of them from a (a3 replaced)
    assert sorted(m.shared for m in answers[0][1].mirrors) == [6, 7, 7]
    a, b = site_keys(clusters[0]), site_keys(clusters[1])
    assert a == b and len(a) > 5
    assert calls(clusters[0], "nd.link") > 0 and calls(clusters[1], "nd.link") == 0


def site_keys(cluster: LocalCluster) -> dict[bytes, Any]:
    """Every site key (on the state's slot: ``nd:<c>:<gen>:{<c>}:...``) of every node, as stored."""
    out: dict[bytes, Any] = {}
    for url in cluster.urls:
        client = redis.Redis.from_url(url)
        try:
            for key in client.scan_iter(match="nd:*:{*}:*", count=1000):
                kind = client.type(key)
                out[key] = client.get(key) if kind == b"string" else client.hgetall(key)
        finally:
            client.close()
    return out
