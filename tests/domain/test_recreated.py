"""A request whose collection is dropped and created again under it (another client, another process)
retries on a fresh view of the collection: it answers from the new one, and when the collection keeps
being recreated it gives up after a bounded number of attempts with a 503-class error, never a loop."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from neardup.domain import CollectionParams, Document, DocumentNotFound, Index, StoreUnavailable
from neardup.storage import RedisStore
from neardup.storage.keys import CollectionKeys
from neardup.storage.store import StoredVersion
from tests.domain.test_index import text

pytestmark = pytest.mark.anyio

PARAMS = CollectionParams.create("moving", threshold=0.8)


class RecreatingStore(RedisStore):
    """A real store that drops and creates the collection again (through another Index on the same
    server) before each of its first ``times`` lookups: the lookup then meets the new generation."""

    times = 0
    lookups = 0

    async def lookup(self, k: CollectionKeys, ids: Sequence[bytes]) -> list[StoredVersion | None]:
        self.lookups += 1
        if self.times > 0:
            self.times -= 1
            other = Index(self)
            await other.delete_collection(PARAMS.name)
            await other.create_collection(PARAMS)
        return await super().lookup(k, ids)


@pytest.mark.parametrize("times", [1, 100])
async def test_a_recreated_collection_is_read_again_and_a_moving_one_is_given_up(
    redis_url: str, times: int
) -> None:
    store = RecreatingStore.from_url(redis_url, timeout=5.0)
    assert isinstance(store, RecreatingStore)
    try:
        index = Index(store)
        await index.create_collection(PARAMS)
        await index.check(PARAMS.name, [Document("a", text(1))])
        store.times = times
        if times == 1:
            # the second attempt reads the new (empty) collection: the document is gone with the old one
            with pytest.raises(DocumentNotFound):
                await index.get_document(PARAMS.name, "a")
            assert store.lookups == 2
        else:
            with pytest.raises(StoreUnavailable, match="keeps changing"):
                await index.get_document(PARAMS.name, "a")
            assert store.lookups == 8  # bounded
        await Index(store).delete_collection(PARAMS.name)
    finally:
        await store.close()
