"""Passage search of one collection (``Index.passages``): fingerprints of the text, one read-only store
call for the stored documents sharing the most of them (with their passage blobs and records), then
spans, containment and coverage (neardup.domain.alignment). docs/design.md, "Passages"."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from neardup.domain import alignment, fingerprints
from neardup.domain.errors import CollectionConflict
from neardup.domain.models import Metadata
from neardup.storage import records
from neardup.storage.errors import GenerationChanged

if TYPE_CHECKING:
    from neardup.domain.index import Index

#: Spans shorter than this many words of the text are not reported unless the caller asks.
DEFAULT_MIN_WORDS = 20
#: Stored documents fetched and aligned per search: those sharing the most rarity-weighted fingerprints.
MAX_SOURCES = 64
#: Texts with more code points than this are fingerprinted and aligned in a thread (the loop keeps
#: serving).
INLINE_CHARS = 32_768


@dataclass(frozen=True)
class PassageSource:
    """A stored document containing passages of the text: ``containment``, the estimated share of the
    text's word 5-grams found in it; ``spans`` in text order."""

    id: str
    metadata: Metadata | None
    containment: float
    spans: list[alignment.Span]


@dataclass(frozen=True)
class PassageResult:
    """``coverage``: share of the text's code points inside a span of any source found (also those
    past ``limit``); ``sources`` best first."""

    coverage: float
    sources: list[PassageSource]


async def search_passages(index: Index, name: str, text: str, limit: int, min_words: int) -> PassageResult:
    collection = await index._collection(name)
    if not collection.params.passages:
        raise CollectionConflict(
            f'collection {name!r} was created without passages: create one with "passages": true '
            "and store the documents there"
        )
    if len(text) <= INLINE_CHARS:
        f = fingerprints.features(text)
    else:
        f = await asyncio.to_thread(fingerprints.features, text)
    if not len(f.grams):
        return PassageResult(0.0, [])
    wanted = fingerprints.wanted(f.keys)
    async for collection in index._views(name):
        if not collection.params.passages:
            raise CollectionConflict(f"collection {name!r} was created without passages")
        try:
            async with index._storage(name):
                reply = await index._store.passages(collection.keys, wanted, MAX_SOURCES)
            break
        except GenerationChanged:
            continue
    ttl = collection.params.ttl_seconds
    oldest = reply.now_ms - ttl * 1000 if ttl is not None else 0
    query = alignment.QueryIndex(f)
    sources = [
        (blob, record)
        for _, blob, record in reply.sources
        if blob and record and records.inserted_ms(record) >= oldest
    ]
    if len(text) <= INLINE_CHARS:
        candidates = _aligned(query, sources, min_words)
    else:  # the native alignment lets go of the GIL: the loop keeps serving
        candidates = await asyncio.to_thread(_aligned, query, sources, min_words)
    found: list[PassageSource] = []
    spans: list[alignment.Span] = []
    for record, aligned in alignment.drop_overshadowed(candidates):
        stored_id, _, metadata = records.unpack(record)
        found.append(
            PassageSource(
                stored_id,
                metadata,
                round(alignment.containment(query, aligned), 4),
                [a.span for a in aligned],
            )
        )
        spans += found[-1].spans
    found.sort(key=lambda s: (-s.containment, s.id))
    return PassageResult(round(alignment.coverage(len(text), spans), 4), found[:limit])


def _aligned(
    query: alignment.QueryIndex, sources: list[tuple[bytes, bytes]], min_words: int
) -> list[tuple[bytes, list[alignment.Aligned]]]:
    """Per stored document (its blob and record) with a passage of the text: its record and spans."""
    out: list[tuple[bytes, list[alignment.Aligned]]] = []
    for blob, record in sources:
        aligned = alignment.align(query, fingerprints.unpack(blob), min_words)
        if aligned:
            out.append((record, aligned))
    return out
