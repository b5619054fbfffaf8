"""A collection at the end of its ordinals, on a real server and a real cluster: ordinals up to the last
one (2^32 - 1) work like any other (buckets hold them, near-duplicates find them), and a write past
it is refused with CollectionFull (permanent: a 409 in the API, not a 503 to retry forever), while
reads, queries and deletes go on."""

from __future__ import annotations

import pytest
import redis

from neardup.domain import CollectionFull, CollectionParams, Document, Index
from neardup.domain.index import MAX_INSERTIONS
from neardup.storage import Store
from tests.conftest import StoreTarget
from tests.domain.test_index import text, variant

pytestmark = pytest.mark.anyio


async def test_the_last_ordinals_work_and_the_next_write_is_a_permanent_error(
    store: Store, store_target: StoreTarget
) -> None:
    index = Index(store)
    await index.create_collection(CollectionParams.create("end", threshold=0.7))
    await index.check("end", [Document("early", text(400))])
    k = (await index._collection("end")).keys
    client = store_target.sync_client()
    try:
        client.hset(k.state, "seq", MAX_INSERTIONS - 2)  # as after four billion insertions
        if isinstance(client, redis.RedisCluster):
            client.hset(k.state, "top", (MAX_INSERTIONS - 2) * 2**20)
    finally:
        client.close()
    [a] = await index.check("end", [Document("a", text(401))])  # ordinal 2^32 - 2
    [b] = await index.check("end", [Document("b", variant(text(401), 1))])  # the last one
    assert not a.duplicate and b.duplicate_of == "a"
    with pytest.raises(CollectionFull, match="insertions"):
        await index.check("end", [Document("c", text(402))])
    with pytest.raises(CollectionFull):
        await index.put("end", Document("c", text(402)))
    # Everything else goes on.
    [probe] = await index.check("end", [Document("p", variant(text(401), 2))], insert=False)
    assert probe.duplicate_of == "a" and {m.id for m in probe.matches} == {"a", "b"}
    assert [m.id for m in await index.query("end", text(400))] == ["early"]
    await index.delete_document("end", "b")
    assert (await index.get_document("end", "a")).id == "a"
