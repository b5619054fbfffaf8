"""neardup's Valkey module (ND.BANDS, native/valkey/bands.cpp) against real servers: the embedded server
loads it and the store uses it; it writes exactly what the Lua band step writes (the same workload on a
server with and one without the module ends in identical keyspaces); its commands replay from the
append-only file after a restart; bad arguments get an error, never a crash."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import redis

from neardup.storage import RedisStore, scripts
from neardup.storage.embedded import EmbeddedValkey, find_free_port, valkey_module
from neardup.storage.errors import StoreDown
from neardup.storage.keys import CollectionKeys
from neardup.storage.store import CheckBatch, CheckReply, Mode, NeedOldBands

pytestmark = pytest.mark.anyio

BANDS, PERM = 16, 128


def test_the_module_is_installed_with_the_package() -> None:
    path = valkey_module()
    assert path is not None and path.name == "neardup_valkey.so" and path.stat().st_size > 0


def test_a_module_file_installed_without_the_execute_bit_is_loaded_from_a_copy(tmp_path: Path) -> None:
    # pip installs the wheel's files without it, and valkey-server refuses to load such a module.
    source = valkey_module()
    assert source is not None
    plain = tmp_path / "installed" / source.name
    plain.parent.mkdir()
    plain.write_bytes(source.read_bytes())
    plain.chmod(0o644)
    server = EmbeddedValkey(tmp_path / "data")
    server.module = plain
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        assert any(m[b"name"] == b"neardup" for m in client.module_list())
        client.close()
        assert (tmp_path / "data" / source.name).stat().st_mode & 0o111
    finally:
        server.stop()


def dump(url: str) -> dict[bytes, dict[bytes, bytes]]:
    """Every hash of the server, and every string as {b"": value} (a site's packed shared counts);
    records without their insertion time (each server stamps its own clock's, so two servers never
    agree on it)."""
    client = redis.Redis.from_url(url)
    try:
        out = {
            key: client.hgetall(key) if client.type(key) == b"hash" else {b"": client.get(key)}
            for key in client.scan_iter(count=1000)
        }
    finally:
        client.close()
    for key, fields in out.items():
        if b":d:" in key:
            out[key] = {f: value[value.index(b":") :] for f, value in fields.items()}
        fields.pop(b"clock", None)  # a state's: the collection's clock is each server's own
        fields.pop(b"tick", None)
    return out


class Workload:
    """Random documents, a third of them near-copies (half their bands taken from an earlier one),
    some ids checked again (replacements), in put, insert and read batches."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.sent: dict[str, tuple[bytes, int]] = {}  # id -> (its band keys, its ordinal)
        self.bands: list[np.ndarray] = []

    def documents(self, n: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        sigs = self.rng.integers(0, 2**32 - 2, size=(n, PERM), dtype=np.uint32)
        bands = self.rng.integers(1, 2**64 - 1, size=(n, BANDS), dtype=np.uint64)
        for row in range(n):
            if self.bands and self.rng.random() < 1 / 3:
                earlier = self.bands[int(self.rng.integers(len(self.bands)))]
                bands[row, : BANDS // 2] = earlier[: BANDS // 2]
            self.bands.append(bands[row].copy())
        ids = [
            f"d{int(self.rng.integers(len(self.sent)))}" if self.sent and self.rng.random() < 0.1
            else f"d{len(self.sent) + row}"
            for row in range(n)
        ]  # fmt: skip
        return ids, sigs, bands


async def check(
    store: RedisStore, k: CollectionKeys, w: Workload, mode: Mode, ids: list[str], sigs: np.ndarray,
    bands: np.ndarray,
) -> CheckReply:  # fmt: skip
    old: dict[int, bytes] = {}
    expected: dict[int, bytes] = {}
    while True:
        batch = CheckBatch(
            bands=BANDS,
            band_keys=bands.astype("<u8").tobytes(),
            signatures=sigs.astype("<u4").tobytes(),
            empties=b"0" * len(ids),
            ids=[i.encode() for i in ids],
            records=[b"0:%d:%s" % (len(i), i.encode()) for i in ids],
            expected=[expected.get(j, b"") for j in range(len(ids))],
            old_bands=[old.get(j, b"") for j in range(len(ids))],
        )
        reply = await store.check(k, mode, batch, max_candidates=256)
        if isinstance(reply, CheckReply):
            return reply
        assert isinstance(reply, NeedOldBands)
        for j, (ordinal, _signature) in reply.stored.items():
            old[j], expected[j] = w.sent[ids[j]][0], b"%d" % ordinal


async def run_workload(store: RedisStore, seed: int) -> list[CheckReply]:
    assert await store.create_collection("c", b"{}", "g") is None
    k = CollectionKeys("c", "g")
    w = Workload(seed)
    replies = []
    for step, mode in enumerate(["put", "insert", "insert", "read", "insert", "put", "insert", "read"] * 2):
        ids, sigs, bands = w.documents(150)
        reply = await check(store, k, w, mode, ids, sigs, bands)
        replies.append(reply)
        if mode != "read":
            for j, i in enumerate(ids):
                w.sent[i] = (bands[j].astype("<u8").tobytes(), reply.ordinals[j])
        assert reply.ordinals, step
    return replies


async def test_the_embedded_server_loads_the_module_and_the_store_uses_it(
    stores: tuple[RedisStore, RedisStore],
) -> None:
    with_module, lua_only = stores
    await run_workload(with_module, seed=1)
    await run_workload(lua_only, seed=1)
    assert with_module._scripts.uses_module is True
    assert lua_only._scripts.uses_module is False
    stats_with = await with_module.client.info("commandstats")
    stats_lua = await lua_only.client.info("commandstats")
    assert stats_with["cmdstat_nd.bands"]["calls"] >= 2400  # one per document of the 16 batches
    assert "cmdstat_hsetnx" not in stats_with
    assert "cmdstat_nd.bands" not in stats_lua and stats_lua["cmdstat_hsetnx"]["calls"] > 0


async def test_module_and_lua_band_steps_write_the_same_data_and_answer_the_same(
    servers: tuple[EmbeddedValkey, EmbeddedValkey], stores: tuple[RedisStore, RedisStore]
) -> None:
    with_module, lua_only = stores
    replies_module = await run_workload(with_module, seed=2)
    replies_lua = await run_workload(lua_only, seed=2)
    assert [r.ordinals for r in replies_module] == [r.ordinals for r in replies_lua]
    assert [r.candidates for r in replies_module] == [r.candidates for r in replies_lua]
    assert any(any(c) for r in replies_module for c in r.candidates)  # the near-copies were found
    a, b = dump(servers[0].url), dump(servers[1].url)
    assert a == b
    state = {f.decode(): v for f, v in a[b"nd:{c}:state"].items()}
    assert int(state["bL"]) >= 6  # the band table split many times along the way (one group at first)


async def test_the_module_commands_replay_from_the_append_only_file(
    servers: tuple[EmbeddedValkey, EmbeddedValkey], stores: tuple[RedisStore, RedisStore]
) -> None:
    server = servers[0]
    await run_workload(stores[0], seed=3)
    before = dump(server.url)
    aof = b"".join(p.read_bytes() for p in (server.data_dir / "appendonlydir").glob("*.incr.aof"))
    assert b"nd.bands" in aof.lower()
    server.stop()
    server.start()
    assert dump(server.url) == before


#: ND.BANDS's site arguments for a document of no site (state, site key base, edge group, name).
NO_PAGE = ["", "", "", ""]


def o5(ordinal: int) -> bytes:
    return ordinal.to_bytes(5, "big")


def test_bad_arguments_get_an_error_and_leave_the_data_alone(
    servers: tuple[EmbeddedValkey, EmbeddedValkey],
) -> None:
    client = redis.Redis.from_url(servers[0].url)
    try:
        field = (7).to_bytes(8, "little")
        tail = [2, 0, 256]  # cap, floor, limit
        ok = ["1", "p:", 0, 0, 0, 16, "insert", o5(1), field, *tail, *NO_PAGE]
        cases = [
            ("wrong number", ok[:-1]),
            ("wrong number", [*ok, ""]),
            ("protocol version", ["2", *ok[1:]]),
            ("protocol version", ["5", *ok[1:]]),
            ("edge group is out of range", [*ok[:12], "st", "s:", 0, "a.example"]),
            ("out of range", ["1", "p:", 0, 1, 0, 16, "insert", o5(1), field, *tail, *NO_PAGE]),  # S >= 2^L
            ("out of range", ["1", "p:", 99, 0, 0, 16, "insert", o5(1), field, *tail, *NO_PAGE]),
            ("cap, floor or limit out of range", [*ok[:9], 0, 0, 256, *NO_PAGE]),
            ("cap, floor or limit out of range", [*ok[:9], 2, -1, 256, *NO_PAGE]),
            ("cap, floor or limit out of range", [*ok[:9], 2, 0, 0, *NO_PAGE]),
            ("mode must be", [*ok[:6], "upsert", *ok[7:]]),
            ("ordinal is 5 bytes", [*ok[:7], b"\0\0\0\1", *ok[8:]]),  # a 4-byte ordinal
            ("8 bytes", [*ok[:8], field[:5], *ok[9:]]),
        ]
        for message, args in cases:
            with pytest.raises(redis.ResponseError, match=message):
                client.execute_command("ND.BANDS", *args)
        client.set("p:0", "not a hash")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("ND.BANDS", *ok)
        assert client.dbsize() == 1 and client.get("p:0") == b"not a hash"
        client.delete("p:0")
        assert client.execute_command("ND.BANDS", *ok) == [0, 0, 1, b"", b""]
        again = ["1", "p:", 0, 0, 1, 16, "insert", o5(2), field, *tail, *NO_PAGE]  # N is 1 now
        assert client.execute_command("ND.BANDS", *again) == [0, 0, 1, o5(1), b"\0\1"]
        # The bucket holds its cap of 2: a third ordinal is told what is there, and not appended.
        third = ["1", "p:", 0, 0, 1, 16, "insert", o5(3), field + field, *tail, *NO_PAGE]  # one key twice
        assert client.execute_command("ND.BANDS", *third) == [0, 0, 1, o5(1) + o5(2), b"\0\2\0\2"]
        assert client.hgetall("p:0") == {field: o5(1) + o5(2)}
        # floor and limit: ordinal 1 is evicted; of two candidates one is kept: the one two buckets
        # hold (ordinal 9, in a second bucket too) before the smaller one only one holds.
        other = (8).to_bytes(8, "little")
        client.hset("p:0", other, o5(9))
        client.hset("p:0", field, o5(1) + o5(2) + o5(9))
        read = ["1", "p:", 0, 0, 2, 16, "read", b"", field + other, 8, 1, 1, *NO_PAGE]
        assert client.execute_command("ND.BANDS", *read) == [0, 0, 2, o5(9), b"\0\2"]
        read[11] = 5
        assert client.execute_command("ND.BANDS", *read) == [0, 0, 2, o5(2) + o5(9), b"\0\1\0\2"]
        # Ordinals past 2^32, floors past 2^32 too.
        big = [o5(2**32 + i) for i in range(3)]
        wide = ["1", "w:", 0, 0, 0, 16, "insert", big[0], field, *tail, *NO_PAGE]
        assert client.execute_command("ND.BANDS", *wide) == [0, 0, 1, b"", b""]
        wide[4], wide[7] = 1, big[1]
        assert client.execute_command("ND.BANDS", *wide) == [0, 0, 1, big[0], b"\0\1"]
        wide[7] = big[2]
        assert client.execute_command("ND.BANDS", *wide) == [0, 0, 1, big[0] + big[1], b"\0\1\0\1"]
        assert client.hgetall("w:0") == {field: big[0] + big[1]}  # cap 2
        read5 = ["1", "w:", 0, 0, 1, 16, "read", b"", field, 8, 2**32, 8, *NO_PAGE]  # floor: 2^32 is evicted
        assert client.execute_command("ND.BANDS", *read5) == [0, 0, 1, big[1], b"\0\1"]
        assert client.ping()
    finally:
        client.close()


def test_the_store_uses_the_module_only_when_it_is_this_release_s() -> None:
    assert scripts.uses_module(scripts.MODULE_VERSION)
    assert not scripts.uses_module(0)  # none loaded
    assert not scripts.uses_module(scripts.MODULE_VERSION + 1)  # a later release's
    assert not scripts.uses_module(scripts.MODULE_VERSION - 1)  # an earlier one's


async def test_a_module_of_another_version_is_served_through_the_lua_steps(
    servers: tuple[EmbeddedValkey, EmbeddedValkey], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server whose module is another build's (it reports another version than this release's): no
    # command of it is sent, every step takes Lua and writes what the module would have. Played by
    # building this release for another version, since a module of another version is not at hand.
    with_module, lua_only = servers
    client = redis.Redis.from_url(with_module.url)
    try:
        assert {m[b"name"]: m[b"ver"] for m in client.module_list()}[b"neardup"] == scripts.MODULE_VERSION
    finally:
        client.close()
    monkeypatch.setattr(scripts, "MODULE_VERSION", scripts.MODULE_VERSION + 1)
    other = RedisStore.from_url(with_module.url)
    lua = RedisStore.from_url(lua_only.url)
    try:
        replies = await run_workload(other, seed=9)
        assert other._scripts.uses_module is False
        stats = await other.client.info("commandstats")
        assert not [c for c in stats if c.startswith("cmdstat_nd.")] and stats["cmdstat_hsetnx"]["calls"] > 0
        assert [r.candidates for r in replies] == [r.candidates for r in await run_workload(lua, seed=9)]
        assert dump(with_module.url) == dump(lua_only.url)
    finally:
        await other.close()
        await lua.close()


async def test_a_server_restarted_without_the_module_is_used_through_the_lua_band_step(
    tmp_path: Path,
) -> None:
    # An external server that loaded the module and comes back without it: one call gets a 503
    # (StoreDown), then the store chooses the Lua band step by itself.
    port = find_free_port()
    first = EmbeddedValkey(tmp_path / "a", port=port)
    first.start()
    store = RedisStore.from_url(first.url)
    try:
        assert (await run_workload(store, seed=4))[-1].ordinals
        assert store._scripts.uses_module is True
        first.stop()
        second = EmbeddedValkey(tmp_path / "b", port=port, module=False)
        second.start()
        try:
            errors: list[str] = []
            for _ in range(5):  # pooled connections to the old server fail first, as after any restart
                try:
                    assert await store.create_collection("c", b"{}", "g") is None
                    break
                except StoreDown as error:
                    errors.append(str(error))
            k, w = CollectionKeys("c", "g"), Workload(5)
            ids, sigs, bands = w.documents(10)
            for _ in range(5):
                try:
                    reply = await check(store, k, w, "insert", ids, sigs, bands)
                    break
                except StoreDown as error:
                    errors.append(str(error))
            assert reply.ordinals == list(range(1, 11))
            assert any("unknown command" in e.lower() for e in errors), errors
            assert store._scripts.uses_module is False
        finally:
            second.stop()
    finally:
        await store.close()
        first.stop()


async def test_module_and_lua_rank_a_crowd_the_same(
    servers: tuple[EmbeddedValkey, EmbeddedValkey], stores: tuple[RedisStore, RedisStore]
) -> None:
    # Candidates cut to a few: those the most buckets hold, then the smallest ordinal; the Lua band
    # step groups them by count and must give the module's answer, order included.
    rng = np.random.default_rng(7)
    template = rng.integers(1, 2**64 - 1, size=BANDS, dtype=np.uint64)
    replies = []
    for store in stores:
        assert await store.create_collection("crowd", b"{}", "g") is None
        k = CollectionKeys("crowd", "g")
        w = Workload(8)
        out = []
        for _ in range(6):
            ids, sigs, bands = w.documents(60)
            keep = rng.random(size=bands.shape) < 0.5  # each shares about half the template's bands
            bands = np.where(keep, template, bands)
            batch = CheckBatch(
                bands=BANDS,
                band_keys=bands.astype("<u8").tobytes(),
                signatures=sigs.astype("<u4").tobytes(),
                empties=b"0" * len(ids),
                ids=[f"{len(out)}-{i}".encode() for i in ids],
                records=[b"0:1:x"] * len(ids),
            )
            reply = await store.check(k, "insert", batch, max_candidates=5)
            assert isinstance(reply, CheckReply)
            out.append(reply.candidates)
        replies.append(out)
        rng = np.random.default_rng(7)  # the same documents for the other store
        template = rng.integers(1, 2**64 - 1, size=BANDS, dtype=np.uint64)
    assert replies[0] == replies[1]
    assert any(len(c) == 5 for batch in replies[0] for c in batch)  # cut to the limit
