"""The collections this process knows: each one's parameters and key names, read from the store's
registry entry, checked against what this release can read, and cached; and the guard every store call
about a collection goes through (store errors become the domain's, a vanished collection is forgotten).

A registry entry is ``{"format": FORMAT, "gen": <generation>, "params": {...}}`` (JSON, keys sorted).
``format`` names the stored format of everything the collection keeps: the stored sketch
(``neardup.domain.banding``), the key layout and records (``neardup.storage.keys``), the passage blob and
index (``neardup.domain.fingerprints``) and the site counts. A release reads the entries of its own
format; an entry of another format, or with a key or parameter value it does not know, is refused
(:class:`WrittenByNewerVersion`, a 503: another process behind the same address may be a newer release
that serves it) and left untouched. From 1.0.0 on, a release that changes a stored format raises
``FORMAT`` and keeps reading the formats earlier releases wrote, or migrates them (docs/design.md,
"Versioning")."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import orjson

from neardup import __version__
from neardup.domain.errors import (
    CollectionFull,
    CollectionNotFound,
    InvalidParameters,
    StoreUnavailable,
    WrittenByNewerVersion,
)
from neardup.domain.models import CollectionParams, is_collection_name
from neardup.domain.observer import IndexObserver
from neardup.storage.errors import CollectionMissing, OrdinalsExhausted, SiteIdsExhausted, StoreDown
from neardup.storage.keys import MAX_SITE_ID, CollectionKeys
from neardup.storage.store import Store

#: The stored format this release writes and reads (see the module's docstring).
FORMAT = 1
#: Views read again after the first, when a request keeps meeting a dropped and recreated collection.
ATTEMPTS = 8
KEEPS_CHANGING = "the collection keeps changing under this request; retry"

_ENTRY_KEYS = frozenset({"format", "gen", "params"})
_PARAMETERS = frozenset(field.name for field in dataclasses.fields(CollectionParams))


@dataclass(frozen=True)
class Collection:
    """One generation of a collection: its parameters and the names of its keys."""

    params: CollectionParams
    keys: CollectionKeys


def encode_entry(params: CollectionParams, gen: str) -> bytes:
    """The registry entry of a new collection."""
    entry = {"format": FORMAT, "gen": gen, "params": params.to_dict()}
    return orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)


def decode_entry(raw: bytes) -> Collection:
    """The collection a registry entry names; WrittenByNewerVersion if this release cannot read it."""
    data = orjson.loads(raw)
    entry = data.get("params") if isinstance(data, dict) else None
    if not isinstance(entry, dict) or not isinstance(data.get("gen"), str):
        raise WrittenByNewerVersion("?", "a registry entry of another shape", __version__)
    name = str(entry.get("name", "?"))
    unknown = sorted((set(data) - _ENTRY_KEYS) | (set(entry) - _PARAMETERS))
    if unknown:
        raise WrittenByNewerVersion(name, f"unknown {', '.join(map(repr, unknown))}", __version__)
    if data.get("format") != FORMAT:
        raise WrittenByNewerVersion(name, f"stored format {data.get('format')!r}", __version__)
    try:
        params = CollectionParams.from_dict(entry)
    except (InvalidParameters, TypeError, ValueError) as error:
        what = f"parameters this release rejects: {getattr(error, 'message', error)}"
        raise WrittenByNewerVersion(name, what, __version__) from error
    return Collection(params, CollectionKeys(params.name, data["gen"]))


class Registry:
    """Collections by name, cached for the life of the process (parameters never change; a dropped and
    recreated collection is noticed by the store's generation check, see :meth:`views`)."""

    def __init__(self, store: Store, observer: IndexObserver) -> None:
        self._store = store
        self._observer = observer
        self._cache: dict[str, Collection] = {}

    @asynccontextmanager
    async def call(self, name: str | None = None) -> AsyncIterator[None]:
        """Guard one store call (about collection ``name``, if given): a store that is down is
        StoreUnavailable, a collection that is gone is CollectionNotFound (and forgotten), a
        collection out of ordinals is CollectionFull; the call's time goes to the observer."""
        started = time.perf_counter()
        try:
            yield
        except StoreDown as error:
            self._observer.store_call(time.perf_counter() - started, failed=True)
            raise StoreUnavailable(f"the store is unavailable ({error}); retry shortly") from error
        except CollectionMissing:
            assert name is not None
            self.forget(name)
            raise CollectionNotFound(name) from None
        except OrdinalsExhausted as error:
            self._observer.store_call(time.perf_counter() - started, failed=False)
            allowed = f"{error.last:,} " if error.last else ""
            raise CollectionFull(
                f"collection {name!r} has used all {allowed}insertions its ordinals allow (each "
                "insertion or replacement takes one, and they are not reused): it cannot take more. Reads, "
                "queries and deletes still work; put new documents in a new collection"
            ) from None
        except SiteIdsExhausted:
            self._observer.store_call(time.perf_counter() - started, failed=False)
            raise CollectionFull(
                f"collection {name!r} holds {MAX_SITE_ID:,} sites, the most it can count at once: a "
                "document of a new site cannot be stored until some site loses all its pages (nothing of "
                "this request was stored). Documents of the sites it holds, reads, queries and deletes "
                "still work"
            ) from None
        else:
            self._observer.store_call(time.perf_counter() - started, failed=False)

    async def get(self, name: str, *, refresh: bool = False) -> Collection:
        """The collection (cached unless ``refresh``); CollectionNotFound if there is none."""
        if not refresh and name in self._cache:
            return self._cache[name]
        collection, _ = await self.fetch(name)
        return collection

    async def fetch(self, name: str) -> tuple[Collection, int]:
        """The collection read from the store (and cached), with its document count."""
        if not is_collection_name(name):
            raise CollectionNotFound(name)
        async with self.call(name):
            found = await self._store.get_collection(name)
        if found is None:
            self.forget(name)
            raise CollectionNotFound(name)
        collection = decode_entry(found[0])
        self._cache[name] = collection
        return collection, found[1]

    async def views(
        self, name: str, first: Callable[[str], Awaitable[Collection]] | None = None
    ) -> AsyncIterator[Collection]:
        """The collection (``first``'s view of it, or the cached one), then, each time the caller comes
        back for another (its request met GenerationChanged: dropped and created again meanwhile), a
        view read again from the store; after ``ATTEMPTS`` of them, StoreUnavailable."""
        for attempt in range(ATTEMPTS):
            if attempt == 0:
                yield await (first or self.get)(name)
            else:
                yield await self.get(name, refresh=True)
        raise StoreUnavailable(KEEPS_CHANGING)

    def remember(self, collection: Collection) -> None:
        self._cache[collection.params.name] = collection

    def forget(self, name: str) -> None:
        self._cache.pop(name, None)
