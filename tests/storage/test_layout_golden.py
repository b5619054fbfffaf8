"""The stored layout, pinned: a fixed sequence of writes (inserts sharing buckets, a replacement, a
delete) on a real server must leave exactly the keyspace recorded in ``golden_layout.json``: key names,
state fields, band bucket bytes (5-byte ordinals), id table values, signature slots (``sg`` per hash)
and record slots; for a collection with sites, its site keys (names, ids, pages, free ids, entries,
shared counts, the link journal); for a collection with passages, its passage index groups and stored blobs.
The records' insertion times come from the server's clock and are masked. A change to any stored byte
fails here: regenerate with ``NEARDUP_REGEN_GOLDEN=1 pytest tests/storage/test_layout_golden.py`` and
say why in the commit."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import redis

from neardup.domain import fingerprints, passage_candidates
from neardup.storage import ClusterStore, RedisStore, keys
from neardup.storage.keys import CollectionKeys
from neardup.storage.store import CheckBatch, CheckReply, NeedOldBands

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).with_name("golden_layout.json")
BANDS, PERM = 4, 8


def band_key(n: int) -> bytes:
    return (0x9E3779B97F4A7C15 * n % 2**64 or 1).to_bytes(8, "little")


def signature(n: int) -> bytes:
    return b"".join(((n * 2654435761 + slot) % (2**32 - 1)).to_bytes(4, "little") for slot in range(PERM))


def batch(
    docs: list[tuple[str, list[int], int]], old: dict[int, tuple[int, bytes]] | None = None
) -> CheckBatch:
    """(id, its band numbers, signature number) per document."""
    ids = [d.encode() for d, _, _ in docs]
    b = CheckBatch(
        bands=BANDS,
        band_keys=b"".join(band_key(x) for _, numbers, _ in docs for x in numbers),
        signatures=b"".join(signature(s) for _, _, s in docs),
        empties=b"0" * len(docs),
        ids=ids,
        records=[b'0:%d:%s{"n":%d}' % (len(i), i, s) for i, (_, _, s) in zip(ids, docs, strict=True)],
    )
    for i, (ordinal, bands) in (old or {}).items():
        b.expected[i], b.old_bands[i] = str(ordinal).encode(), bands
    return b


def dump(client: redis.Redis, k: CollectionKeys) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(client.scan_iter("nd:*")):
        name = key.decode()
        if client.type(key) == b"string":  # a site's packed shared counts, a passage index group
            out[name] = client.get(key).hex()
            continue
        fields = client.hgetall(key)
        if name == k.state:
            out[name] = {f.decode(): v.decode() for f, v in sorted(fields.items())}
            for clock in ("clock", "tick"):  # the collection's clock: the server's
                if clock in out[name]:
                    out[name][clock] = "T"
            continue
        values = {}
        for f, v in sorted(fields.items()):
            if name.startswith(k.doc_prefix):
                v = re.sub(rb"^\d+:", b"T:", v)  # the server's clock
            values[f.hex()] = v.hex()
        out[name] = values
    return out


async def write_sequence(store: RedisStore, k: CollectionKeys) -> None:
    docs = [("a", [1, 2, 3, 4], 1), ("b", [1, 2, 5, 6], 2), ("c", [1, 7, 8, 9], 3)]
    reply = await store.check(k, "insert", batch(docs), max_candidates=256)
    assert isinstance(reply, CheckReply) and reply.ordinals == [1, 2, 3]
    assert reply.candidates == [[], [1], [1, 2]]
    # "b" again with new text: a replacement (the store asks for the stored version's band keys first).
    new_b = [("b", [2, 10, 11, 12], 4)]
    need = await store.check(k, "insert", batch(new_b), max_candidates=256)
    assert isinstance(need, NeedOldBands) and need.stored[0][0] == 2
    old_bands = b"".join(band_key(x) for x in [1, 2, 5, 6])
    reply = await store.check(k, "insert", batch(new_b, {0: (2, old_bands)}), max_candidates=256)
    assert isinstance(reply, CheckReply) and reply.ordinals == [4] and reply.candidates == [[1]]
    assert await store.delete(k, b"c", 3, b"".join(band_key(x) for x in [1, 7, 8, 9])) is True


def check_golden(name: str, got: dict[str, Any]) -> None:
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("NEARDUP_REGEN_GOLDEN"):
        golden[name] = got
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    assert got == golden[name]


async def test_the_stored_bytes_are_pinned(standalone_store: RedisStore, sync_redis: redis.Redis) -> None:
    created = await standalone_store.create_collection(
        "golden", b'{"golden": true}', "g", sketch_bytes=4 * PERM
    )
    assert created is None
    k = CollectionKeys("golden", "g")
    await write_sequence(standalone_store, k)
    got = dump(sync_redis, k)
    assert "ow" not in got[k.state] and keys.ORDINAL_WIDTH == 5
    assert got[k.state]["sg"] == str(keys.sig_group_size(4 * PERM))
    assert all(len(v) == 2 * 5 * (len(v) // 10) for v in got[k.band_group(0)].values())  # hex of 5 bytes each
    check_golden("layout", got)


async def site_sequence(store: RedisStore, k: CollectionKeys) -> None:
    """Four pages of three sites, three cross-site links (the check's journal settled with them), then
    a page deleted whose site's shared record sits before another one (its place taken by the last):
    the only page of its site, which is forgotten, its id on the free stack."""
    docs = [
        ("a", [1, 2, 3, 4], 1),
        ("b", [1, 2, 5, 6], 2),
        ("c", [1, 7, 8, 9], 3),
        ("d", [20, 21, 22, 23], 5),
    ]
    b = batch(docs)
    b.sites = [b"a.example", b"b.example", b"c.example", b"a.example"]
    reply = await store.check(k, "insert", b, max_candidates=256)
    assert isinstance(reply, CheckReply) and reply.ordinals == [1, 2, 3, 4] and reply.journal == 1
    assert await store.link(k, [(2, 1), (3, 1), (3, 2)], [reply.journal]) == (3, 0)
    assert await store.delete(k, b"b", 2, b"".join(band_key(x) for x in [1, 2, 5, 6])) is True


async def test_the_stored_bytes_of_sites_are_pinned(
    standalone_store: RedisStore, sync_redis: redis.Redis
) -> None:
    created = await standalone_store.create_collection(
        "golden", b'{"golden": true}', "g", sketch_bytes=4 * PERM
    )
    assert created is None
    k = CollectionKeys("golden", "g")
    await site_sequence(standalone_store, k)
    got = dump(sync_redis, k)
    assert all(isinstance(got[k.shared(site)], str) for site in (1, 3))  # packed counts
    check_golden("sites", got)


#: Words of the passage texts: a text of 800 of them makes a blob stored in two parts (600 bytes each).
WORDS = [f"w{i}" for i in range(2000)]


async def passage_sequence(store: RedisStore | ClusterStore) -> CollectionKeys:
    """Three documents, the second copying a passage of the first and replaced by a text of its own,
    the third a long text (its blob in two parts), then the first deleted."""
    created = await store.create_collection(
        "golden", b'{"golden": true}', "g", sketch_bytes=4 * PERM, passages=True
    )
    assert created is None
    k = CollectionKeys("golden", "g")
    texts = [
        " ".join(WORDS[:120]),
        " ".join(WORDS[500:560] + WORDS[30:90]),
        " ".join(WORDS[1000:1800]),
    ]
    docs = [("a", [1, 2, 3, 4], 1), ("b", [1, 2, 5, 6], 2), ("c", [1, 7, 8, 9], 3)]
    b = batch(docs)
    b.passages = [fingerprints.blob(t) for t in texts]
    reply = await store.check(k, "insert", b, max_candidates=256)
    assert isinstance(reply, CheckReply) and reply.ordinals == [1, 2, 3]
    read = await store.postings(k, fingerprints.wanted(fingerprints.features(texts[1]).keys))
    chosen = passage_candidates.choose(read.counts, read.ordinals, read.floor, 8)
    assert chosen == [2, 1]  # its own keys, then the copied passage's
    found = await store.passage_sources(k, chosen)
    assert [o for o, _, _ in found.sources] == chosen and all(
        blob and record for _, blob, record in found.sources
    )
    new_b = batch([("b", [2, 10, 11, 12], 4)], {0: (2, b"".join(band_key(x) for x in [1, 2, 5, 6]))})
    new_b.passages = [fingerprints.blob(" ".join(WORDS[1800:1900]))]
    reply = await store.check(k, "insert", new_b, max_candidates=256)
    assert isinstance(reply, CheckReply) and reply.ordinals == [4]
    assert await store.delete(k, b"a", 1, b"".join(band_key(x) for x in [1, 2, 3, 4])) is True
    return k


async def test_the_stored_bytes_of_passages_are_pinned(
    standalone_store: RedisStore, sync_redis: redis.Redis
) -> None:
    """Three documents, the second copying a passage of the first and replaced by a text of its own,
    the third a long text (its blob in two parts), then the first deleted: the index groups (packed
    records) and the blobs as stored."""
    k = await passage_sequence(standalone_store)
    got = dump(sync_redis, k)
    state = got[k.state]
    assert (state["pL"], state["pS"]) == (str(keys.PASSAGE_INDEX_LEVEL), "0") and "pf" not in state
    index_groups = [v for name, v in got.items() if name.startswith(k.passage_index_prefix)]
    assert index_groups and all(
        isinstance(v, str) and len(v) % 16 == 0 for v in index_groups
    )  # 8-byte records
    assert int(state["pN"]) == sum(len(v) // 16 for v in index_groups)
    blobs = {
        f: v
        for name, fields in got.items()
        if name.startswith(k.passage_blob_prefix)
        for f, v in fields.items()
    }
    assert sorted(bytes.fromhex(f).decode() for f in blobs) == ["123", "3", "4"]  # c's in two parts
    check_golden("passages", got)


def cluster_dump(urls: list[str], k: CollectionKeys) -> dict[str, Any]:
    """``dump`` over every node of a cluster; the state without its sweep time."""
    out: dict[str, Any] = {}
    for url in urls:
        client = redis.Redis.from_url(url)
        try:
            out.update(dump(client, k))
        finally:
            client.close()
    out[k.state]["swept"] = "T"
    return dict(sorted(out.items()))


@pytest.mark.parametrize(
    "name, families, target",
    [("cluster_layout", keys.CLUSTER_BAND_FAMILIES, keys.CLUSTER_BAND_TARGET), ("cluster_split", 2, 2)],
)
async def test_the_cluster_stored_bytes_are_pinned(
    cluster_url: str,
    valkey_cluster: Any,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    families: int,
    target: int,
) -> None:
    # "cluster_split": two band and two id families with 2 fields per group, so the sequence splits
    # groups of both tables and the families' shapes move
    monkeypatch.setattr(keys, "CLUSTER_BAND_FAMILIES", families)
    monkeypatch.setattr(keys, "CLUSTER_BAND_TARGET", target)
    monkeypatch.setattr(keys, "CLUSTER_ID_FAMILIES", min(families, keys.CLUSTER_ID_FAMILIES))
    monkeypatch.setattr(keys, "CLUSTER_ID_TARGET", target if families == 2 else keys.CLUSTER_ID_TARGET)
    store = ClusterStore.from_url(cluster_url)
    try:
        assert (
            await store.create_collection("golden", b'{"golden": true}', "g", sketch_bytes=4 * PERM) is None
        )
        k = CollectionKeys("golden", "g")
        await write_sequence(store, k)  # type: ignore[arg-type]
    finally:
        await store.close()
    got = cluster_dump(valkey_cluster.urls, k)
    shapes = [v for key, v in got.items() if key.endswith("}") and ":b:{" in key]
    assert shapes and (families > 2 or max(int(bytes.fromhex(v["4c"])) for v in shapes) >= 1)  # some "L" > 0
    check_golden(name, got)


async def test_the_cluster_stored_bytes_of_passages_are_pinned(cluster_url: str, valkey_cluster: Any) -> None:
    """The passage sequence on a 3-node cluster: the passage families' shapes and groups (a posting
    a field: the 4-byte key -> ordinals), the blobs as on one server."""
    store = ClusterStore.from_url(cluster_url)
    try:
        k = await passage_sequence(store)
    finally:
        await store.close()
    got = cluster_dump(valkey_cluster.urls, k)
    postings = {
        f: v
        for key, fields in got.items()
        if key.startswith(k.passage_family_prefix) and not key.endswith("}")
        for f, v in fields.items()
    }
    assert postings and all(
        len(bytes.fromhex(f)) == 4 and len(bytes.fromhex(v)) % 5 == 0 for f, v in postings.items()
    )
    blobs = {f for key, fields in got.items() if key.startswith(k.passage_blob_prefix) for f in fields}
    assert sorted(bytes.fromhex(f).decode() for f in blobs) == ["123", "3", "4"]  # as on one server
    check_golden("cluster_passages", got)


async def test_the_cluster_stored_bytes_of_sites_are_pinned(cluster_url: str, valkey_cluster: Any) -> None:
    """The site sequence on a 3-node cluster: the site keys, all on the state's slot (``{golden}``),
    hold the bytes one server's do under the same names after their base."""
    store = ClusterStore.from_url(cluster_url)
    try:
        created = await store.create_collection(
            "golden", b'{"golden": true}', "g", sketch_bytes=4 * PERM, sites=True
        )
        assert created is None
        k = CollectionKeys("golden", "g")
        await site_sequence(store, k)  # type: ignore[arg-type]
    finally:
        await store.close()
    got = cluster_dump(valkey_cluster.urls, k)
    base = k.cluster_sites.doc_prefix.removesuffix("d:")
    on_cluster = {key.removeprefix(base): v for key, v in got.items() if key.startswith(base)}
    one = json.loads(GOLDEN.read_text())["sites"]
    one_base = k.doc_prefix.removesuffix("d:")
    on_one = {
        key.removeprefix(one_base): v
        for key, v in one.items()
        if key.startswith(one_base)
        and key.removeprefix(one_base)[:2] in ("sn", "si", "sp", "sf", "x:", "e:", "lj")
    }
    assert on_cluster == on_one and "sf" in on_cluster  # the same bytes; the deleted site's id freed
    assert {valkey_cluster_node(valkey_cluster.urls, key) for key in got if key.startswith(base)} == {
        valkey_cluster_node(valkey_cluster.urls, k.state)
    }
    check_golden("cluster_sites", got)


def valkey_cluster_node(urls: list[str], key: str) -> str:
    """The url of the node that holds ``key``."""
    for url in urls:
        client = redis.Redis.from_url(url)
        try:
            if client.exists(key):
                return url
        finally:
            client.close()
    raise AssertionError(f"no node holds {key}")
