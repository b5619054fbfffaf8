"""The service object: collections and documents over a store, with LSH candidates verified against
stored signatures and first-seen ordering decided by the store's stamps."""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.models import (
    CheckResult,
    CollectionInfo,
    CollectionParams,
    Document,
    Match,
    StoredDocument,
)
from app.storage import RedisStore

#: Most documents one ``check`` call takes (the API should reject larger batches with a 4xx).
MAX_BATCH = 1000
#: Per checked document, at most this many *earliest* candidates are verified: a huge cluster of
#: copies must not make every later check fetch thousands of signatures.
MAX_CANDIDATES = 256


class Index:
    """Near-duplicate index over a store. One instance per process; safe for concurrent use."""

    def __init__(self, store: RedisStore, *, threads: int = 1) -> None:
        """``threads``: threads the native core may use for one batch's signatures."""
        self._store = store
        self._threads = threads

    async def ping(self) -> None:
        """Readiness: returns if the store answers, else raises StoreUnavailable."""
        raise NotImplementedError

    async def create_collection(self, params: CollectionParams) -> tuple[CollectionParams, bool]:
        """Create; returns (params, True). Same name and same params again -> (params, False);
        different params -> CollectionConflict."""
        raise NotImplementedError

    async def ensure_default_collection(self, params: CollectionParams) -> CollectionParams:
        """Create the collection if missing. If it exists (even with other parameters, e.g. the
        configured defaults changed) its stored parameters win and are returned: they are fixed."""
        raise NotImplementedError

    async def get_collection(self, name: str) -> CollectionInfo:
        """Parameters and document count; CollectionNotFound if absent."""
        raise NotImplementedError

    async def list_collections(self) -> list[CollectionInfo]:
        """All collections, sorted by name."""
        raise NotImplementedError

    async def delete_collection(self, name: str) -> None:
        """Drop the collection and all its documents; CollectionNotFound if absent."""
        raise NotImplementedError

    async def check(
        self,
        name: str,
        docs: Sequence[Document],
        *,
        insert: bool = True,
        min_similarity: float | None = None,
    ) -> list[CheckResult]:
        """Check (and by default insert) a batch; results in input order. ``min_similarity``
        (0..1) overrides the collection threshold for reporting matches. Raises CollectionNotFound,
        InvalidInput (bad id/metadata, more than MAX_BATCH docs), StoreUnavailable."""
        raise NotImplementedError

    async def query(
        self, name: str, text: str, *, limit: int = 10, min_similarity: float | None = None
    ) -> list[Match]:
        """Read-only: verified matches of ``text``, best first, at most ``limit``."""
        raise NotImplementedError

    async def put(self, name: str, doc: Document) -> StoredDocument:
        """Insert or replace without reporting matches (it still takes its place in first-seen order)."""
        raise NotImplementedError

    async def get_document(self, name: str, doc_id: str) -> StoredDocument:
        """DocumentNotFound / CollectionNotFound if absent."""
        raise NotImplementedError

    async def delete_document(self, name: str, doc_id: str) -> None:
        """Remove it everywhere (bands, signature, metadata, stamp); DocumentNotFound if absent."""
        raise NotImplementedError
