"""Signature groups fill a 64 KiB listpack: a collection keeps ``sg`` sketches per signature hash
(keys.sig_group_size: 134 for the default sketch's 482 bytes), fixed in its state at creation; every
stored sketch is read back where it was written (its own document is found, its near-duplicate matches
it), and a drop leaves no signature key."""

from __future__ import annotations

import pytest
import redis

from neardup.domain import CollectionParams, Document, Index
from neardup.storage import RedisStore, keys
from tests.domain.test_index import text, variant

pytestmark = pytest.mark.anyio


def test_the_default_sketches_fill_a_64_kib_listpack() -> None:
    assert CollectionParams.create("x", threshold=0.8).stored_bytes == 482
    assert keys.sig_group_size(482) == 134
    # 134 entries of 482 bytes (fields "0".."133") and the listpack's own 7 bytes fit in 64 KiB; 135 not
    entry = keys._listpack_string_entry(482)
    assert 128 * (entry + 2) + 6 * (entry + 3) + 7 <= 65536 < 128 * (entry + 2) + 7 * (entry + 3) + 7
    assert keys.sig_group_size(512) == 126
    assert keys.sig_group_size(0) == keys.sig_group_size(601) == keys.MIN_SIG_GROUP  # varies / no listpack
    assert keys.sig_group_size(8) == keys.MAX_SIG_GROUP


async def test_sketches_are_grouped_as_the_state_says_and_read_back(
    standalone_store: RedisStore, sync_redis: redis.Redis
) -> None:
    index = Index(standalone_store)
    await index.create_collection(CollectionParams.create("sg", threshold=0.8))
    k = (await index.registry.get("sg")).keys
    group = int(sync_redis.hget(k.state, "sg") or 0)
    assert group == 134
    docs = [Document(f"d{i}", text(1000 + i)) for i in range(group + 6)]
    for start in range(0, len(docs), 50):
        await index.check("sg", docs[start : start + 50])
    # ordinals start at 1: group 0 holds 1..group-1, group 1 the rest
    assert sync_redis.hlen(k.sig_group(0)) == group - 1
    assert sync_redis.hlen(k.sig_group(1)) == 7
    assert sync_redis.object("encoding", k.sig_group(0)) == b"listpack"
    # sketches on both sides of the group boundary are read where they were written
    for i in (group - 2, group - 1, group, group + 5):
        [result] = await index.check("sg", [Document(f"v{i}", variant(text(1000 + i), 1))], insert=False)
        assert [m.id for m in result.matches][:1] == [f"d{i}"], i
    await index.delete_collection("sg")
    assert list(sync_redis.scan_iter(f"{k.sig_prefix}*")) == []
