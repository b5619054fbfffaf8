"""Domain errors: one root, so the API layer maps the whole tree to HTTP status codes in one place.

The tree::

    NearDupError                  root: anything the domain raises on purpose
     ├── NotFound                 404
     │    ├── CollectionNotFound  no collection of that name
     │    └── DocumentNotFound    no document of that id in the collection
     ├── CollectionConflict       409: the name exists with different parameters
     │    └── SitesNotCounted     the collection has no site_field: it counts no sites
     ├── CollectionFull           409: the collection can take no more insertions, or no page of a new
     │                            site (every site id held); a retry cannot help
     ├── InvalidInput             422/400: a value the client sent is wrong (message says what to change)
     │    └── InvalidParameters   collection parameters that cannot work together
     └── StoreUnavailable         503 + Retry-After: the store cannot be reached, timed out, is loading,
          │                       or stayed too contended; retrying later is the right reaction
          └── WrittenByNewerVersion  the collection's registry entry has what this release does not know
                                  (a newer release created it): a process of that release serves it
"""

from __future__ import annotations


class NearDupError(Exception):
    """Root of every error the domain raises on purpose; ``message`` is safe to show to a client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(NearDupError):
    """Something the client named does not exist."""


class CollectionNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"collection {name!r} does not exist")
        self.name = name


class DocumentNotFound(NotFound):
    def __init__(self, collection: str, doc_id: str) -> None:
        super().__init__(f"document {doc_id!r} does not exist in collection {collection!r}")
        self.collection = collection
        self.doc_id = doc_id


class CollectionConflict(NearDupError):
    """A collection of that name exists with other parameters (they are fixed at creation)."""


class SitesNotCounted(CollectionConflict):
    """Sites were asked of a collection created without a ``site_field`` (fixed at creation)."""


class CollectionFull(NearDupError):
    """The collection has used every insertion its ordinals allow, or holds as many sites as its site ids
    allow and was sent a page of a new one; a retry cannot help (for sites, until some lose all pages)."""


class InvalidInput(NearDupError):
    """A value the client sent cannot be used; the message says which and what to send instead."""


class InvalidParameters(InvalidInput):
    """Collection parameters out of range or inconsistent (e.g. bands*rows > num_perm)."""


class StoreUnavailable(NearDupError):
    """The store cannot serve now (unreachable, timeout, loading its data). ``retry_after`` in seconds."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class WrittenByNewerVersion(StoreUnavailable):
    """The collection was created by a newer release (its registry entry holds a parameter or a value
    this one does not know): this process refuses it rather than misread it. A 503, because another
    process behind the same address (an upgraded one, in a rolling upgrade) can serve it."""

    def __init__(self, name: str, what: str, version: str) -> None:
        super().__init__(
            f"collection {name!r} was created by a newer release of neardup ({what}); this process runs "
            f"neardup {version} and cannot read it: upgrade it",
            retry_after=30,
        )
        self.name = name
