"""The stored layout, pinned: a fixed sequence of writes (inserts sharing buckets, a replacement, a
delete) on a real server, for a collection of each layout (3: 5-byte ordinals and ``sg`` sketches per
signature hash; 2: a state without ``sg``, 120 per hash; 1: a state without ``ow`` either, 4-byte
ordinals), must leave exactly the keyspace recorded in ``golden_layout.json``: key names,
state fields, band bucket bytes, id table values, signature and record slots; and, for a collection
with sites, each site layout's site keys (names, ids, pages, entries, shared counts, the link
journal). The records' insertion times come from the server's clock and are masked. A release that
changes any stored byte of an existing layout fails here; a new layout gets new vectors (regenerate with
``NEARDUP_REGEN_GOLDEN=1 pytest tests/storage/test_layout_golden.py`` and say why in the commit)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import redis

from neardup.storage import RedisStore, keys
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
    docs: list[tuple[str, list[int], int]], old: dict[int, tuple[bytes, bytes]] | None = None
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
        if client.type(key) == b"string":  # a site's packed shared counts (site layout 2)
            out[name] = client.get(key).hex()
            continue
        fields = client.hgetall(key)
        if name == k.state:
            out[name] = {f.decode(): v.decode() for f, v in sorted(fields.items())}
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


@pytest.mark.parametrize("layout", [3, 2, 1])
async def test_the_stored_bytes_of_each_layout_are_pinned(
    standalone_store: RedisStore, sync_redis: redis.Redis, layout: int
) -> None:
    created = await standalone_store.create_collection(
        "golden", b'{"golden": true}', "g", sketch_bytes=4 * PERM
    )
    assert created is None
    k = CollectionKeys("golden", "g")
    if layout <= 2:
        sync_redis.hdel(k.state, "sg")  # what a layout-2 release created
    if layout == 1:
        sync_redis.hdel(k.state, "ow")  # what a layout-1 release created
    await write_sequence(standalone_store, k)
    got = dump(sync_redis, k)
    width = keys.ORDINAL_WIDTH if layout >= 2 else keys.LEGACY_ORDINAL_WIDTH
    assert got[k.state].get("ow", "4") == str(width)
    assert got[k.state].get("sg", "120") == str(keys.sig_group_size(4 * PERM) if layout == 3 else 120)
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("NEARDUP_REGEN_GOLDEN"):
        golden[f"layout {layout}"] = got
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    assert got == golden[f"layout {layout}"]


async def site_sequence(store: RedisStore, k: CollectionKeys) -> None:
    """Four pages of three sites, three cross-site links (the check's journal settled with them), then
    a page deleted whose site's shared record sits before another one (its place taken by the last)."""
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


@pytest.mark.parametrize("layout", [2, 1])
async def test_the_stored_bytes_of_each_site_layout_are_pinned(
    standalone_store: RedisStore, sync_redis: redis.Redis, layout: int
) -> None:
    """Site layout 2 (keys.SITE_LAYOUT: packed shared counts) and 1 (hashes), on top of layout 3."""
    created = await standalone_store.create_collection(
        "golden", b'{"golden": true}', "g", sketch_bytes=4 * PERM, sites=True
    )
    assert created is None
    k = CollectionKeys("golden", "g")
    if layout == 1:
        assert sync_redis.hdel(k.state, "sx") == 1  # what a release before site layout 2 created
    await site_sequence(standalone_store, k)
    got = dump(sync_redis, k)
    assert got[k.state].get("sx") == ("2" if layout == 2 else None)
    assert all(isinstance(got[k.shared(site)], str) == (layout == 2) for site in (1, 3))
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("NEARDUP_REGEN_GOLDEN"):
        golden[f"site layout {layout}"] = got
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    assert got == golden[f"site layout {layout}"]
