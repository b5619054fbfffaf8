"""Redis memory per document, measured: INFO used_memory before and after inserting 20,000 documents
(36-character ids, records as the domain packs them) with the default collection's bands and stored
sketch (482 bytes), on the embedded server with either malloc (used_memory counts what the allocator
hands out, its size classes' rounding included). Measured on a server that has held as many keys once:
the keyspace's own table, which a server keeps after FLUSHALL, is not counted (on a fresh server it
adds ~16 bytes a document at this size: 1,004 instead of 988 with mimalloc, 956 instead of 939 with
libc's malloc). The flushes are synchronous: memory still being freed in the background would count
as the next fill's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import redis

from neardup.domain import CollectionParams
from neardup.storage import EmbeddedValkey, RedisStore
from neardup.storage.keys import CollectionKeys
from neardup.storage.store import CheckBatch, CheckReply

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DOCS, BATCH = 20_000, 500
BUDGET = 1000  # bytes per document, stored signature included (the limit)
DEFAULT = CollectionParams.create("mem")


@pytest.fixture(scope="module", params=["mimalloc", "libc"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedValkey]:
    valkey = EmbeddedValkey(tmp_path_factory.mktemp("memory"), malloc=request.param)
    valkey.start()
    try:
        yield valkey
    finally:
        valkey.stop()


def flush(client: redis.Redis) -> None:
    """FLUSHALL, done when it answers (not freed in the background, which would count as the next fill's)."""
    client.execute_command("FLUSHALL", "SYNC")  # type: ignore[no-untyped-call]


async def test_bytes_per_document_within_budget(server: EmbeddedValkey) -> None:
    store = RedisStore.from_url(server.url, timeout=5.0)
    sync_redis = redis.Redis.from_url(server.url)
    try:
        flush(sync_redis)
        await measure(store, sync_redis, server.malloc)  # grows the keyspace's table
        flush(sync_redis)
        per_doc = await measure(store, sync_redis, server.malloc)
        assert per_doc <= BUDGET
    finally:
        sync_redis.close()
        await store.close()


async def measure(store: RedisStore, sync_redis: redis.Redis, malloc: str) -> float:
    """Bytes per document of DOCS inserted into a new collection."""
    BANDS, SKETCH = DEFAULT.bands, DEFAULT.stored_bytes
    assert SKETCH == 482
    rng = np.random.default_rng(1)
    assert await store.create_collection("mem", b"{}", "g", sketch_bytes=SKETCH) is None
    k = CollectionKeys("mem", "g")
    before = int(sync_redis.info("memory")["used_memory"])
    for _ in range(0, DOCS, BATCH):
        sigs = rng.integers(0, 256, size=(BATCH, SKETCH), dtype=np.uint8)
        bands = rng.integers(1, 2**64 - 1, size=(BATCH, BANDS), dtype=np.uint64)
        ids = [str(uuid.UUID(int=int(x))).encode() for x in rng.integers(0, 2**62, size=BATCH)]
        batch = CheckBatch(
            bands=BANDS,
            band_keys=bands.tobytes(),
            signatures=sigs.tobytes(),
            empties=b"0" * BATCH,
            ids=ids,
            records=[b"1760000000000:36:" + i for i in ids],
        )
        reply = await store.check(k, "insert", batch, max_candidates=256)
        assert isinstance(reply, CheckReply)
    after = int(sync_redis.info("memory")["used_memory"])
    per_doc = (after - before) / DOCS
    print(
        f"\nredis memory: {per_doc:.0f} bytes/document ({DOCS} documents, {BANDS} bands, {SKETCH} B, "
        f"{malloc})"
    )
    assert sync_redis.hget(k.state, "docs") == str(DOCS).encode()
    return per_doc
