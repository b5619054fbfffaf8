"""ND.PASSAGES and ND.POSTINGS (native/valkey/passages.cpp) against real servers: the same passage
workload, on a server with neardup's module and on one without (the Lua passage step and read), ends in
identical keyspaces (every hash, field for field, every string, and every key's encoding) and the same
search answers; its writes replay from the append-only file; bad arguments get an error and leave the
data alone; a blob of another format is refused before anything is written."""

from __future__ import annotations

import random

import numpy as np
import pytest
import redis

from neardup.domain import CollectionParams, Document, Index, fingerprints
from neardup.storage import RedisStore
from neardup.storage.embedded import EmbeddedValkey
from neardup.storage.errors import StoreDown
from neardup.storage.keys import CollectionKeys
from neardup.storage.store import CheckBatch

pytestmark = pytest.mark.anyio

_RNG = random.Random(16)
VOCABULARY = sorted({"".join(_RNG.choice("abcdefghij") for _ in range(6)) for _ in range(3000)})
#: A phrase in most documents, each time at another place.
BOILERPLATE = " ".join(_RNG.choice(VOCABULARY) for _ in range(40))
#: A page stored in more documents than a posting keeps (keys.POSTING_CAP = 64): its postings fill up.
COPIED_PAGE = " ".join(_RNG.choice(VOCABULARY) for _ in range(300))


def documents(seed: int, n: int) -> list[Document]:
    """Random texts; a third copy a passage of an earlier one, most hold the boilerplate, some are one
    page stored again and again; some ids come again (replacements)."""
    rng = random.Random(seed)
    texts: list[str] = []
    out = []
    for i in range(n):
        own = [rng.choice(VOCABULARY) for _ in range(rng.randrange(30, 600))]
        if texts and rng.random() < 1 / 3:
            earlier = rng.choice(texts).split()
            at = rng.randrange(len(earlier))
            own[len(own) // 2 : len(own) // 2] = earlier[at : at + rng.randrange(25, 120)]
        text = " ".join(own) + ("\n" + BOILERPLATE if rng.random() < 0.8 else "")
        if rng.random() < 0.3:  # a page stored again and again: its copies select the same k-grams
            text = COPIED_PAGE
        texts.append(text)
        doc_id = f"d{rng.randrange(i)}" if i > 10 and rng.random() < 0.1 else f"d{i}"
        out.append(Document(doc_id, text))
    return out


def contents(client: redis.Redis, key: bytes) -> dict[bytes, bytes]:
    if client.type(key) == b"hash":
        return client.hgetall(key)
    return {b"": client.get(key)}


def dump(url: str) -> dict[bytes, tuple[bytes, dict[bytes, bytes]]]:
    """Every hash (and string: the index groups, as {b"": value}) of the server with its
    encoding; the registry (each collection's random generation) and the records' insertion times (each
    server's own clock) left out, generations renamed."""
    client = redis.Redis.from_url(url)
    try:
        keys = [k for k in client.scan_iter(count=1000) if k != b"nd:collections"]
        # a string's encoding (embstr or raw) says how it was written (a module's string or a command's
        # argument), not what it holds: both count as raw
        out = {
            k: (client.object("encoding", k).replace(b"embstr", b"raw"), contents(client, k)) for k in keys
        }
        gens = {v[b"gen"] for k, (_, v) in out.items() if k.endswith(b":state")}
    finally:
        client.close()
    renamed = {}
    for key, (encoding, fields) in out.items():
        if b":d:" in key:
            fields = {f: value[value.index(b":") :] for f, value in fields.items()}
        if b"gen" in fields:  # a state: the collection's clock is each server's own
            fields = {f: v for f, v in fields.items() if f not in (b"clock", b"tick")}
            fields = {**fields, b"gen": b"g"}
        for gen in gens:
            key = key.replace(gen, b"g")
        renamed[key] = (encoding, fields)
    return renamed


#: The index holds keys.PASSAGE_GROUP_TARGET records a group before it splits, far fewer than this
#: workload posts: its state is told of this many records more, so that it splits at most 4 groups a
#: document (as a table far over target does), through a level and beyond.
PACKED_HEADSTART = 256 * 512


async def workload(store: RedisStore, name: str = "texts", seed: int = 3) -> list[object]:
    index = Index(store)
    await index.create_collection(CollectionParams.create(name, passages=True))
    await store.client.hincrby(f"nd:{{{name}}}:state", "pN", PACKED_HEADSTART)
    docs = documents(seed=seed, n=260)
    answers: list[object] = []
    for start in range(0, len(docs), 40):
        answers.append(await index.check(name, docs[start : start + 40]))
    await index.delete_document(name, "d3")
    for doc in docs[::37]:
        found = await index.passages(name, "intro words here " + doc.text[: len(doc.text) // 2])
        answers.append([(s.id, s.containment, s.spans) for s in found.sources])
    answers.append([(d.id, d.duplicate_of) for d in await index.check(name, docs[:5], insert=False)])
    return answers


async def test_module_and_lua_passage_steps_write_the_same_data_and_answer_the_same(
    servers: tuple[EmbeddedValkey, EmbeddedValkey], stores: tuple[RedisStore, RedisStore]
) -> None:
    with_module, lua_only = stores
    answers_module = await workload(with_module)
    answers_lua = await workload(lua_only)
    assert with_module._scripts.uses_module and not lua_only._scripts.uses_module
    stats = await with_module.client.info("commandstats")
    assert stats["cmdstat_nd.passages"]["calls"] >= 260
    assert stats["cmdstat_nd.postings"]["calls"] >= 8  # each search reads the index with one
    lua_stats = await lua_only.client.info("commandstats")
    assert "cmdstat_nd.passages" not in lua_stats and "cmdstat_nd.postings" not in lua_stats
    assert answers_module == answers_lua
    assert any(sources for sources in answers_module[7:-1])  # the searches found their sources
    a, b = dump(servers[0].url), dump(servers[1].url)
    assert a == b
    state = a[b"nd:{texts}:state"][1]
    assert b"pf" not in state
    assert_packed_index(a, int(state[b"pL"]), int(state[b"pN"]) - PACKED_HEADSTART)
    # ND.PASSAGES posts in place, within a group's spare room: a group it had to move is written
    # again at its size, never kept at the twice its length the server grows a string to
    client = redis.Redis.from_url(servers[0].url)
    usage = [(client.memory_usage(k, samples=0), client.strlen(k)) for k in client.scan_iter(match="*:f:*")]
    client.close()
    assert len(usage) == sum(b":f:" in k for k in a)
    assert all(used <= 1.3 * size + 64 for used, size in usage), sorted(usage)[-5:]


Keyspace = dict[bytes, tuple[bytes, dict[bytes, bytes]]]


def assert_packed_index(keyspace: Keyspace, level: int, records: int) -> None:
    """Every index group a string of 8-byte records in (key, ordinal) order, each in the group
    its key's low bits name; ``records`` of them in all; the boilerplate's postings full; long blobs in
    parts of 600 bytes, every blob group still a listpack."""
    assert level >= 9  # started at 8, split through a level
    groups = {int(k.rsplit(b":", 1)[1]): v[b""] for k, (_, v) in keyspace.items() if b":f:" in k}
    runs: dict[bytes, int] = {}
    total = 0
    for number, value in groups.items():
        assert value and len(value) % 8 == 0
        rows = [value[at : at + 8] for at in range(0, len(value), 8)]
        assert rows == sorted(rows)
        for row in rows:
            h = int.from_bytes(row[:3], "big") << 8 | number % 256
            assert number in (h % 2**level, h % 2 ** (level + 1))
            runs[row[:3] + bytes([number % 256])] = runs.get(row[:3] + bytes([number % 256]), 0) + 1
        total += len(rows)
    assert total == records
    # POSTING_CAP: the copied page's postings filled up (replacements and a delete took a few out)
    assert 60 <= max(runs.values()) <= 64
    blobs = {k: v for k, v in keyspace.items() if b":p:" in k}
    parts = [value for _, fields in blobs.values() for value in fields.values()]
    assert max(len(p) for p in parts) == 600 and {e for e, _ in blobs.values()} == {b"listpack"}


async def test_nd_passages_replays_from_the_append_only_file(
    servers: tuple[EmbeddedValkey, EmbeddedValkey], stores: tuple[RedisStore, RedisStore]
) -> None:
    server = servers[0]
    await workload(stores[0], "texts", 3)
    await workload(stores[0], "other", 4)
    before = dump(server.url)
    aof = b"".join(p.read_bytes() for p in (server.data_dir / "appendonlydir").glob("*.incr.aof"))
    assert b"nd.passages" in aof.lower()
    server.stop()
    server.start()
    assert dump(server.url) == before


def test_bad_arguments_get_an_error_and_leave_the_data_alone(
    servers: tuple[EmbeddedValkey, EmbeddedValkey],
) -> None:
    client = redis.Redis.from_url(servers[0].url)
    try:
        blob = fingerprints.blob(" ".join(VOCABULARY[:900]))
        assert 600 < len(blob) <= 1200
        _, m, at = fingerprints.header(blob)
        ordinal = (1).to_bytes(5, "big")
        ok = ["1", "f:", 8, 0, 0, 256, "p:0", "1", ordinal, blob, 64, 5, 120, 600]
        cases = [
            ("wrong number", ok[:-1]),
            ("protocol version", ["2", *ok[1:]]),
            ("out of range", [*ok[:2], 7, *ok[3:]]),  # a packed index has at least 2^8 groups
            ("out of range", [*ok[:2], 24, *ok[3:]]),  # and at most 2^23 (keys.PASSAGE_INDEX_TOP)
            ("out of range", [*ok[:7], "120", *ok[8:]]),  # slot >= stride
            ("out of range", [*ok[:13], 8]),  # parts too small
            ("width must be 5", [*ok[:11], 4, *ok[12:]]),
            ("ordinal is <width> bytes", [*ok[:8], b"\0\0\0\1", *ok[9:]]),
            ("too short", [*ok[:9], blob[:8], *ok[10:]]),
            ("unknown passage blob format", [*ok[:9], b"\2" + blob[1:], *ok[10:]]),
            ("truncated", [*ok[:9], blob[: at + 4 * m - 1], *ok[10:]]),
        ]
        for message, args in cases:
            with pytest.raises(redis.ResponseError, match=message):
                client.execute_command("ND.PASSAGES", *args)
        assert client.dbsize() == 0
        keys = fingerprints.unpack_keys(blob[at : at + 4 * m]).tolist()
        busy = f"f:{keys[0] % 256}"  # a group the blob posts to
        client.hset(busy, "a", "not a string")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("ND.PASSAGES", *ok)
        assert client.dbsize() == 1
        client.delete(busy)
        assert client.execute_command("ND.PASSAGES", *ok) == [8, 0, len(set(keys))]  # no split
        # kept as sent, whole 4-byte keys and all, in parts of 600 bytes
        assert client.hgetall("p:0") == {b"1": blob[:600], b"121": blob[600:]}
        records = b"".join(client.get(f"f:{n}") or b"" for n in range(256))
        assert len(records) == 8 * len(set(keys))
        expected = sorted((k % 256, (k >> 8).to_bytes(3, "big") + ordinal) for k in set(keys))
        assert records == b"".join(r for _, r in expected)
        # ND.POSTINGS reads them back: every key's count (2 bytes), then every key's ordinals
        wanted = fingerprints.key_bytes(np.array(sorted(set(keys)), np.uint64))
        read = ["1", "f:", 8, 0, 5, wanted]
        assert client.execute_command("ND.POSTINGS", *read) == b"\0\1" * len(set(keys)) + ordinal * len(
            set(keys)
        )
        for message, args in [
            ("wrong number", read[:-1]),
            ("protocol version", ["2", *read[1:]]),
            ("out of range", [*read[:2], 7, *read[3:]]),
            ("width must be 5", [*read[:4], 4, *read[5:]]),
            ("4 bytes each", [*read[:5], wanted[:-1]]),
        ]:
            with pytest.raises(redis.ResponseError, match=message):
                client.execute_command("ND.POSTINGS", *args)
    finally:
        client.close()


async def test_a_blob_of_another_format_is_refused_before_any_write(
    stores: tuple[RedisStore, RedisStore],
) -> None:
    for store in stores:
        assert await store.create_collection("c", b"{}", "g", passages=True) is None
        k = CollectionKeys("c", "g")
        text = " ".join(VOCABULARY[:80])
        batch = CheckBatch(
            bands=1,
            band_keys=(5).to_bytes(8, "little"),
            signatures=b"\1" * 16,
            empties=b"0",
            ids=[b"a"],
            records=[b"0:1:a"],
            expected=[b""],
            old_bands=[b""],
            passages=[b"\2" + fingerprints.blob(text)[1:]],
        )
        keyspace = await store.client.dbsize()
        with pytest.raises(StoreDown, match="unknown passage blob format 2"):
            await store.check(k, "insert", batch, max_candidates=8)
        assert await store.client.dbsize() == keyspace
        assert await store.client.hget(k.state, "seq") == b"0"


async def test_a_packed_index_stops_splitting_at_its_last_level(
    stores: tuple[RedisStore, RedisStore],
) -> None:
    """Level 23 (keys.PASSAGE_INDEX_TOP, 2^23 groups) is the index's last: past it, groups only grow,
    and a document's removal finds its postings there from the stored blob's whole keys."""
    for store in stores:
        index = Index(store)
        await index.create_collection(CollectionParams.create("top", passages=True))
        await store.client.hset("nd:{top}:state", mapping={"pL": 23, "pS": 0, "pN": 10**12})
        docs = [Document(f"d{i}", " ".join(VOCABULARY[i * 300 : i * 300 + 300])) for i in range(3)]
        await index.check("top", docs)
        await index.delete_document("top", "d1")
        state = await store.client.hgetall("nd:{top}:state")
        assert (state[b"pL"], state[b"pS"]) == (b"23", b"0")
        # d1's records all went (pN counts records): found through the whole keys its blob kept
        posted = [len(set(fingerprints.unpack(fingerprints.blob(d.text)).keys.tolist())) for d in docs]
        assert int(state[b"pN"]) == 10**12 + posted[0] + posted[2]
        found = await index.passages("top", docs[2].text)
        assert [s.id for s in found.sources] == ["d2"]
        assert (await index.passages("top", docs[1].text)).sources == []
