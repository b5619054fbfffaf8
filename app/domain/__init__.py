"""The product's logic: collections, LSH banding, check/query/insert with verification and first-seen
ordering. Never imports fastapi, starlette or pydantic-settings.

Use::

    from neardup.domain import Index, CollectionParams, Document
    from neardup.storage import RedisStore

    store = RedisStore.from_url("redis://127.0.0.1:6379/0")   # app/main.py picks the store
    index = Index(store)
    await index.ensure_default_collection(CollectionParams.create("default"))
    [result] = await index.check("default", [Document("a", "some text")], insert=True)
    ...
    await store.close()

Semantics every caller can rely on:

- ``check(..., insert=True)`` stores every document of the batch (duplicates too: the copy is kept
  under its own id so it can be fetched and deleted; ``inserted=True``), and reports verified matches
  among documents inserted *before* it; a later document of the batch sees the earlier ones. Checking
  an existing id replaces it; a document never matches itself (nor the stored version of its own id).
- ``check(..., insert=False)`` stores nothing; a later document of the batch still sees the earlier
  ones of the batch (as if they had been inserted, after everything stored).
- First seen wins under concurrency: of two verified near-duplicates, exactly one is earlier.
- A document whose text has no features (empty, or no words) is stored but never matches and is
  never matched.
- Every store failure (unreachable, timeout, loading) surfaces as :class:`StoreUnavailable`.
"""

from neardup.domain.errors import (
    CollectionConflict,
    CollectionFull,
    CollectionNotFound,
    DocumentNotFound,
    InvalidInput,
    InvalidParameters,
    NearDupError,
    NotFound,
    SitesNotCounted,
    StoreUnavailable,
)
from neardup.domain.index import MAX_BATCH, MAX_CANDIDATES, Index
from neardup.domain.models import (
    MAX_ID_BYTES,
    CheckResult,
    CollectionInfo,
    CollectionParams,
    Document,
    Match,
    Metadata,
    Shingle,
    StoredDocument,
)
from neardup.domain.registry import Collection, Registry

__all__ = [
    "MAX_BATCH",
    "MAX_CANDIDATES",
    "MAX_ID_BYTES",
    "CheckResult",
    "Collection",
    "CollectionConflict",
    "CollectionFull",
    "CollectionInfo",
    "CollectionNotFound",
    "CollectionParams",
    "Document",
    "DocumentNotFound",
    "Index",
    "InvalidInput",
    "InvalidParameters",
    "Match",
    "Metadata",
    "NearDupError",
    "NotFound",
    "Registry",
    "Shingle",
    "SitesNotCounted",
    "StoreUnavailable",
    "StoredDocument",
    "WrittenByNewerVersion",
]
