"""neardup's Valkey module, its site steps against real servers: ND.LINK (native/valkey/sites.cpp) checks
its arguments, writes nothing on an error and keeps the shared counts as _common.lua's shared_add does;
ND.BANDS counts a page of a site as add_site_page does; links replay from the append-only file; a
module of another version than this release's gets the Lua site steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from neardup.storage import RedisStore, keys, scripts
from neardup.storage.embedded import EmbeddedValkey
from neardup.storage.errors import SITE_IDS_EXHAUSTED_MESSAGE
from tests.storage.test_valkey_module import dump

pytestmark = pytest.mark.anyio


def link_args(pairs: list[tuple[int, int]], **change: object) -> list[object]:
    """ND.LINK's arguments on the keys e:<n> (entries), x:<site> (shared) and d:<n> (records)."""
    args: dict[str, object] = {
        "version": "1", "edges": "e:", "shared": "x:", "records": "d:", "edge_group": 32,
        "record_group": 120, "floor": 0, "cutoff": -1, "max_partners": 16, "max_others": 256,
        "pairs": b"".join(x.to_bytes(8, "big") + y.to_bytes(8, "big") for x, y in pairs),
    } | change  # fmt: skip
    return list(args.values())


def record(site: int, n: int) -> bytes:
    """One other site's shared count: its id, then the count, 4 bytes big-endian each."""
    return site.to_bytes(4, "big") + n.to_bytes(4, "big")


def test_nd_link_checks_its_arguments_and_records_an_edge(
    servers: tuple[EmbeddedValkey, EmbeddedValkey],
) -> None:
    client = redis.Redis.from_url(servers[0].url)
    try:
        modules = {m[b"name"]: m[b"ver"] for m in client.module_list()}
        assert modules[b"neardup"] == scripts.MODULE_VERSION
        cases = [
            ("wrong number", link_args([(1, 2)])[:-1]),
            ("wrong number", [*link_args([(1, 2)])[:4], 5, *link_args([(1, 2)])[4:]]),  # an ordinal width
            ("protocol version", link_args([(1, 2)], version="2")),
            ("out of range", link_args([(1, 2)], edge_group=0)),
            ("out of range", link_args([(1, 2)], cutoff=-2)),
            ("out of range", link_args([(1, 2)], floor=-1)),
            ("16 bytes", [*link_args([])[:-1], b"\0" * 15]),
        ]
        for message, args in cases:
            with pytest.raises(redis.ResponseError, match=message):
                client.execute_command("ND.LINK", *args)
        assert client.dbsize() == 0
        # Documents 1 (site 7) and 2 (site 9): one edge, on both entries, each site counting a page.
        client.hset("e:0", mapping={"1": (7).to_bytes(4, "big"), "2": (9).to_bytes(4, "big")})
        assert client.execute_command("ND.LINK", *link_args([(1, 2), (1, 2), (2, 1)])) == [1, 0]
        assert client.hgetall("e:0") == {
            b"1": (7).to_bytes(4, "big") + (2).to_bytes(5, "big") + (9).to_bytes(4, "big"),
            b"2": (9).to_bytes(4, "big") + (1).to_bytes(5, "big") + (7).to_bytes(4, "big"),
        }
        assert client.get("x:7") == record(9, 1) and client.get("x:9") == record(7, 1)
        # Retention: a record older than the cutoff is gone, so its edges are not recorded.
        client.hset("e:0", "3", (11).to_bytes(4, "big"))
        client.hset("d:0", mapping={"1": b"5000:1:a", "3": b"100:1:c"})
        assert client.execute_command("ND.LINK", *link_args([(1, 3)], cutoff=1000)) == [0, 0]
        assert client.get("x:7") == record(9, 1) and not client.exists("x:11")
        client.hset("x:11", "7", "1")  # shared counts of another type than a string
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("ND.LINK", *link_args([(1, 3)]))
        assert client.ping()
    finally:
        client.flushall()
        client.close()


def test_nd_link_keeps_shared_counts_as_shared_add(
    servers: tuple[EmbeddedValkey, EmbeddedValkey],
) -> None:
    """A site's shared counts, byte for byte: per other site 8 bytes, its id then its count (4 bytes
    big-endian each), in the order first counted; a bound that refuses a new site writes nothing."""
    entries = {"1": 7, "2": 7, "3": 9, "4": 11, "5": 13}  # documents 1, 2 of site 7; 3 of 9; 4 of 11; 5 of 13
    client = redis.Redis.from_url(servers[0].url)
    try:
        client.hset("e:0", mapping={o: s.to_bytes(4, "big") for o, s in entries.items()})
        assert client.execute_command("ND.LINK", *link_args([(3, 1), (3, 2), (1, 4)])) == [3, 0]
        assert client.get("x:7") == record(9, 2) + record(11, 1)
        assert client.get("x:9") == record(7, 1) and client.get("x:11") == record(7, 1)
        # At most 2 other sites: 5 (site 13) would be site 7's third, so its edge is refused.
        assert client.execute_command("ND.LINK", *link_args([(5, 2)], max_others=2)) == [0, 1]
        assert client.get("x:7") == record(9, 2) + record(11, 1) and not client.exists("x:13")
    finally:
        client.flushall()
        client.close()


async def test_nd_link_replays_from_the_append_only_file(tmp_path: Path) -> None:
    """Links replay from the append-only file: each check links the pairs the service verified for the
    one before in its own script (ND.LINK), a site read the rest (link.lua's ND.LINK). The documents
    are of two lengths: sparse sketches (~200 shingles) and dense ones (~600)."""
    from neardup.domain import CollectionParams, Document, Index

    server = EmbeddedValkey(tmp_path / "data")
    server.start()
    store = RedisStore.from_url(server.url)
    try:
        index = Index(store)
        params = CollectionParams.create("m", threshold=0.7, site_field="url")
        await index.create_collection(params)
        words = [f"w{i}" for i in range(1000)]
        for site in range(4):
            docs = [
                Document(
                    f"{site}/{k}",
                    " ".join(words[k * 20 : k * 20 + (600 if k % 2 else 200)]) + f" s{site}",
                    {"url": f"https://s{site}.example/{k}"},
                )
                for k in range(8)
            ]
            await index.check("m", docs)
        assert (await index.site("m", "s0.example")).mirrors
        before = dump(server.url)
        aof = b"".join(p.read_bytes() for p in (server.data_dir / "appendonlydir").glob("*.incr.aof"))
        stats = await store.client.info("commandstats")
        assert stats["cmdstat_nd.link"]["calls"] >= 3 and b"nd.link" in aof.lower()
        server.stop()
        server.start()
        assert dump(server.url) == before
    finally:
        await store.close()
        server.stop()


async def test_a_module_of_another_version_gets_the_lua_site_steps(
    servers: tuple[EmbeddedValkey, EmbeddedValkey], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server running another build's module (it reports another version than this release's),
    # played by building this release for another version: no command of the module is sent, the
    # pages are counted and the links made in Lua, and they read as the module's would.
    from neardup.domain import CollectionParams, Document, Index

    monkeypatch.setattr(scripts, "MODULE_VERSION", scripts.MODULE_VERSION + 1)
    store = RedisStore.from_url(servers[0].url)
    try:
        index = Index(store)
        await index.create_collection(CollectionParams.create("old", threshold=0.7, site_field="url"))
        body = " ".join(f"w{i}" for i in range(200))
        await index.check("old", [Document("a", body, {"url": "https://a.example/1"})])
        await index.check("old", [Document("b", body + " x", {"url": "https://b.example/1"})])
        assert [m.site for m in (await index.site("old", "a.example")).mirrors] == ["b.example"]
        stats = await store.client.info("commandstats")
        assert not [c for c in stats if c.startswith("cmdstat_nd.")]
        assert stats["cmdstat_hsetnx"]["calls"] > 0
    finally:
        await store.close()


def test_nd_bands_counts_a_page_as_add_site_page(
    servers: tuple[EmbeddedValkey, EmbeddedValkey],
) -> None:
    """ND.BANDS counts the document's page of a site (the site keys and the entry named from a key base
    and the ordinal, as check.lua sends them) as _common.lua's add_site_page does: a new name interned
    with the id on top of the free stack (sf, the state's sfree), else the next id of the state's sseq,
    the page counted, the entry written; a known name keeps its id. The same pages through ND.BANDS with
    no site and the Lua function store the same bytes (band groups included); an empty name counts
    nothing (check.lua's readiness call, in read mode, writes nothing); a site key of another type, or a
    new name when sseq is at the last id and no id is free, is refused with nothing written."""
    site_keys = ["st", "sn", "si", "sp", "sf"]
    pages = [("a.example", 5), ("b.example", 6), ("a.example", 40), ("c.example", 41), ("b.example", 70)]
    add_site_page = """
local id = redis.call('HGET', KEYS[2], ARGV[2])
if id then id = tonumber(id) else
  local v = redis.call('HMGET', KEYS[1], 'sseq', 'sfree')
  local free = tonumber(v[2]) or 0
  if free > 0 then
    id = tonumber(redis.call('HGET', KEYS[5], free))
    redis.call('HDEL', KEYS[5], free)
    redis.call('HSET', KEYS[1], 'sfree', free - 1)
  else
    id = tonumber(v[1]) + 1
    redis.call('HSET', KEYS[1], 'sseq', id)
  end
  redis.call('HSET', KEYS[2], ARGV[2], id)
  redis.call('HSET', KEYS[3], id, ARGV[2])
end
redis.call('HINCRBY', KEYS[4], id, 1)
local ord = tonumber(ARGV[1])
redis.call('HSET', 'e:' .. math.floor(ord / 32), ord % 32, struct.pack('>I4', id))
"""

    def bands(ordinal: int, mode: str = "insert") -> list[object]:
        field = (ordinal % 3).to_bytes(8, "little")
        o5 = ordinal.to_bytes(5, "big") if mode != "read" else b""
        return ["1", "p:", 0, 0, 0, 16, mode, o5, field, 256, 0, 256]

    client = redis.Redis.from_url(servers[0].url)
    try:
        dumps, replies = [], []
        for path in ("module", "lua"):
            client.flushall()
            client.hset("st", mapping={"seq": 3, "sseq": 7, "sfree": 2})  # ids 3 and 4 were freed
            client.hset("sf", mapping={"1": 3, "2": 4})
            got = []
            for name, ordinal in pages:
                if path == "module":  # the key base is "": sn, si, sp, e:<n>
                    got.append(client.execute_command("ND.BANDS", *bands(ordinal), "st", "", 32, name))
                else:
                    got.append(client.execute_command("ND.BANDS", *bands(ordinal), "", "", "", ""))
                    client.eval(add_site_page, 5, *site_keys, ordinal, name)
            replies.append(got)
            dumps.append(dump(servers[0].url))
        assert replies[0] == replies[1]
        assert dumps[0] == dumps[1]
        assert client.hgetall("sn") == {b"a.example": b"4", b"b.example": b"3", b"c.example": b"8"}
        assert client.hgetall("sp") == {b"4": b"2", b"3": b"2", b"8": b"1"}
        assert client.hmget("st", "sseq", "sfree") == [b"8", b"0"] and not client.exists("sf")
        before = dump(servers[0].url)
        client.execute_command("ND.BANDS", *bands(0, "read"), "", "", "", "")  # the readiness call
        client.execute_command("ND.BANDS", *bands(0, "read"), "st", "", 32, "d.example")  # read: no page
        assert dump(servers[0].url) == before
        client.execute_command("ND.BANDS", *bands(91), "st", "", 32, "")  # no site: bands only
        assert client.hget("e:2", "27") is None
        assert client.hgetall("sp") == {b"4": b"2", b"3": b"2", b"8": b"1"}
        before = dump(servers[0].url)
        client.set("wrong", "x")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):  # the state, for a new site
            client.execute_command("ND.BANDS", *bands(95), "wrong", "", 32, "d.example")
        client.hset("wrongsn", "x", "1")
        client.set("wrongsp", "x")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):  # "wrong" + "sn" is a hash, + "sp" not
            client.execute_command("ND.BANDS", *bands(95), "st", "wrong", 32, "d.example")
        client.delete("wrongsp")
        client.set("wronge:2", "x")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):  # the entry's group
            client.execute_command("ND.BANDS", *bands(95), "st", "wrong", 32, "d.example")
        client.delete("wronge:2")
        client.set("wrongsf", "x")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):  # the free stack, for a new site
            client.execute_command("ND.BANDS", *bands(95), "st", "wrong", 32, "d.example")
        client.delete("wrongsn", "wrongsf", "wrong")
        assert dump(servers[0].url) == before
        # the last id issued and none free: a new name is refused (check.lua refuses it first), a known
        # one is counted
        client.hset("st", "sseq", keys.MAX_SITE_ID)
        before = dump(servers[0].url)
        with pytest.raises(redis.ResponseError, match=SITE_IDS_EXHAUSTED_MESSAGE):
            client.execute_command("ND.BANDS", *bands(95), "st", "", 32, "d.example")
        assert dump(servers[0].url) == before
        client.execute_command("ND.BANDS", *bands(95), "st", "", 32, "c.example")
        assert client.hget("sp", "8") == b"2" and client.hget("e:2", "31") == (8).to_bytes(4, "big")
    finally:
        client.flushall()
        client.close()
