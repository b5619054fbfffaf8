"""Errors of the storage layer; the domain turns them into its own (storage never imports the domain).

StoreError
 ├── StoreDown          the server cannot be reached, timed out, is loading, refused (read-only...)
 ├── CollectionMissing  the collection's state is gone (dropped, or never created)
 └── GenerationChanged  the collection was dropped and created again since the caller read it
"""

from __future__ import annotations


class StoreError(Exception):
    pass


class StoreDown(StoreError):
    pass


class CollectionMissing(StoreError):
    pass


class GenerationChanged(StoreError):
    pass
