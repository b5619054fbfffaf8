"""A collection at the end of its ordinals, on a real server and a real cluster: ordinals up to the last
one (2^40 - 1: 5-byte ordinals) work like any other (buckets hold them, near-duplicates find them,
cluster stamps stay exact), and a write past it is refused with CollectionFull (permanent: a 409 in the
API, not a 503 to retry forever), while reads, queries and deletes go on."""

from __future__ import annotations

import pytest
import redis

from neardup.domain import CollectionFull, CollectionParams, Document, Index
from neardup.domain.index import MAX_INSERTIONS
from neardup.storage import Store, keys
from tests.conftest import StoreTarget
from tests.domain.test_index import text, variant

pytestmark = pytest.mark.anyio


def test_a_collection_takes_two_to_the_forty_insertions() -> None:
    assert keys.ORDINAL_WIDTH == 5 and MAX_INSERTIONS == 2**40 - 1
    # Cluster stamps of the last ordinals stay exact in a Lua double.
    assert keys.max_ordinal(keys.ORDINAL_WIDTH) * keys.STAMP_SCALE < 2**53


async def test_the_last_ordinals_work_and_the_next_write_is_a_permanent_error(
    store: Store, store_target: StoreTarget
) -> None:
    index = Index(store)
    await index.create_collection(CollectionParams.create("end", threshold=0.7))
    k = (await index.registry.get("end")).keys
    width = keys.ORDINAL_WIDTH
    last = keys.max_ordinal(width)
    await index.check("end", [Document("early", text(400))])
    client = store_target.sync_client()
    try:
        client.hset(k.state, "seq", last - 2)  # as after 2^40 insertions
        if isinstance(client, redis.RedisCluster):
            client.hset(k.state, "top", (last - 2) * keys.STAMP_SCALE)
    finally:
        client.close()
    [a] = await index.check("end", [Document("a", text(401))])  # ordinal last - 1
    [b] = await index.check("end", [Document("b", variant(text(401), 1))])  # the last one
    assert not a.duplicate and b.duplicate_of == "a"
    stored = {d.id: d for d in [await index.get_document("end", i) for i in ("early", "a", "b")]}
    assert set(stored) == {"early", "a", "b"}  # each id still names its own record
    client = store_target.sync_client()
    try:  # the buckets hold 5-byte ordinals, the last ones included
        if isinstance(client, redis.RedisCluster):
            nodes = client.get_primaries()
            values = [
                v
                for node in nodes
                for key in client.keys(target_nodes=node)  # type: ignore[union-attr]
                if key.startswith(k.band_prefix.encode()) and not key.endswith(b"}")  # not a family's shape
                for v in client.hvals(key)
            ]
        else:
            values = [v for key in client.scan_iter(f"{k.band_prefix}*") for v in client.hvals(key)]
        assert values and all(len(v) % width == 0 for v in values)
        ords = {int.from_bytes(v[q : q + width], "big") for v in values for q in range(0, len(v), width)}
        assert {last - 1, last} <= ords and max(ords) == last
    finally:
        client.close()
    with pytest.raises(CollectionFull, match=f"{last:,} insertions"):
        await index.check("end", [Document("c", text(402))])
    with pytest.raises(CollectionFull):
        await index.put("end", Document("c", text(402)))
    # Everything else goes on.
    [probe] = await index.check("end", [Document("p", variant(text(401), 2))], insert=False)
    assert probe.duplicate_of == "a" and {m.id for m in probe.matches} == {"a", "b"}
    assert [m.id for m in await index.query("end", text(400))] == ["early"]
    await index.delete_document("end", "b")
    assert (await index.get_document("end", "a")).id == "a"
