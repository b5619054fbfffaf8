"""Passage search of one collection (``Index.passages``): fingerprints of the text, the postings of its
keys (one read-only store call per keys.PASSAGE_KEYS_PER_CALL keys), the stored documents to align
chosen from them (neardup.domain.passage_candidates), their passage blobs and records (one more call),
then spans, containment and coverage (neardup.domain.alignment). docs/design.md, "Passages"."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from neardup.domain import alignment, fingerprints, passage_candidates
from neardup.domain.errors import CollectionConflict
from neardup.domain.models import Metadata
from neardup.domain.registry import Registry
from neardup.storage import keys, records
from neardup.storage.errors import GenerationChanged
from neardup.storage.store import PassageReply, Postings, Store

#: Spans shorter than this many words of the text are not reported unless the caller asks.
DEFAULT_MIN_WORDS = 20
#: Stored documents fetched and aligned per search: those sharing the most rarity-weighted fingerprints.
MAX_SOURCES = 64
#: Texts with more code points than this are fingerprinted and aligned in a thread (the loop keeps
#: serving).
INLINE_CHARS = 32_768
#: Other stored documents holding a passage named under it (all of them are counted).
ALSO_IN_SHOWN = 10
#: Choices of the documents to read: the first, and again while some chosen came back gone.
_CHOICES = 3
#: Postings calls of one search in flight at once.
_POSTINGS_IN_FLIGHT = 4


@dataclass(frozen=True)
class Copy:
    """Another stored document holding a passage: where it is there."""

    id: str
    metadata: Metadata | None
    source_start: int
    source_end: int


@dataclass(frozen=True)
class Passage:
    """A passage of the text (code points, ``end`` exclusive) in the source it is attributed to
    (``source_start``/``source_end``), and the other stored documents holding it: ``also_in`` the best
    ALSO_IN_SHOWN of them (most hits first), ``also_in_count`` all of them."""

    start: int
    end: int
    source_start: int
    source_end: int
    also_in: list[Copy]
    also_in_count: int


@dataclass(frozen=True)
class PassageSource:
    """A stored document that is the best source of passages of the text: ``containment``, the
    estimated share of the text's word 5-grams found in it (also in passages attributed to another
    source); ``spans`` the passages attributed to it, in text order."""

    id: str
    metadata: Metadata | None
    containment: float
    spans: list[Passage]


@dataclass(frozen=True)
class PassageResult:
    """``sources``: the first ``limit`` sources in attribution order; ``coverage``: share of the text's
    code points inside their spans (what a page highlights); ``coverage_all``: the same without
    ``limit``; ``more_sources``: sources of further passages past ``limit``; ``documents``: stored
    documents holding a passage of the text (listed, grouped under a passage, or past ``limit``)."""

    coverage: float
    coverage_all: float
    sources: list[PassageSource]
    more_sources: int
    documents: int


async def search_passages(
    registry: Registry, store: Store, name: str, text: str, limit: int, min_words: int
) -> PassageResult:
    collection = await registry.get(name)
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
        return PassageResult(0.0, 0.0, [], 0, 0)
    wanted = fingerprints.wanted(f.keys)
    async for collection in registry.views(name):
        if not collection.params.passages:  # dropped and created again without passages meanwhile
            raise CollectionConflict(f"collection {name!r} was created without passages")
        try:
            async with registry.call(name):
                reply = await _read_sources(store, collection.keys, wanted, len(text) > INLINE_CHARS)
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
        found, attributed = _attributed(query, sources, min_words)
    else:  # the native alignment lets go of the GIL: the loop keeps serving
        found, attributed = await asyncio.to_thread(_attributed, query, sources, min_words)
    listed = attributed[:limit]
    return PassageResult(
        round(alignment.coverage(len(text), [t.span.span for _, spans in listed for t in spans]), 4),
        round(alignment.coverage(len(text), [t.span.span for _, spans in attributed for t in spans]), 4),
        [
            PassageSource(source.key, source.payload, source.containment, [_passage(t) for t in spans])
            for source, spans in listed
        ],
        len(attributed) - len(listed),
        len(found),
    )


async def _read_sources(store: Store, k: keys.CollectionKeys, wanted: bytes, in_thread: bool) -> PassageReply:
    """The postings of the text's keys, in calls of at most PASSAGE_KEYS_PER_CALL keys, then the passage
    blobs and records of the MAX_SOURCES stored documents passage_candidates chooses from them."""
    step = keys.PASSAGE_KEYS_PER_CALL * fingerprints.KEY_BYTES
    # The calls go out together, a few at a time: each is bounded on the server, and on a cluster
    # each is a round trip to every node, so a text of 2,000 keys waits for one round, not two.
    in_flight = asyncio.Semaphore(_POSTINGS_IN_FLIGHT)

    async def postings(at: int) -> Postings:
        async with in_flight:
            return await store.postings(k, wanted[at : at + step])

    parts = await asyncio.gather(*(postings(at) for at in range(0, len(wanted), step)))
    floor = max(p.floor for p in parts)
    counts = np.concatenate([p.counts for p in parts])
    ordinals = np.concatenate([p.ordinals for p in parts])
    read: dict[int, tuple[int, bytes, bytes]] = {}
    now_ms = parts[-1].now_ms
    for _ in range(_CHOICES):
        if in_thread:
            chosen = await asyncio.to_thread(passage_candidates.choose, counts, ordinals, floor, MAX_SOURCES)
        else:
            chosen = passage_candidates.choose(counts, ordinals, floor, MAX_SOURCES)
        unread = [o for o in chosen if o not in read]
        if not unread:
            break
        reply = await store.passage_sources(k, unread)
        now_ms = reply.now_ms
        read.update((source[0], source) for source in reply.sources)
        gone = [o for o, blob, record in reply.sources if not blob or not record]
        if not gone or len(chosen) < MAX_SOURCES:
            break
        # Documents gone since the postings were read (deleted, replaced), or not visible (a cluster's
        # pending or dead ordinals): their places go to the next ones (0 is below every floor).
        ordinals = np.where(np.isin(ordinals, np.array(gone, np.uint64)), np.uint64(0), ordinals)
    return PassageReply([read[o] for o in chosen if o in read], now_ms)


_Found = alignment.Found[Metadata | None]


def _attributed(
    query: alignment.QueryIndex, sources: list[tuple[bytes, bytes]], min_words: int
) -> tuple[list[_Found], list[tuple[_Found, list[alignment.Attributed[Metadata | None]]]]]:
    """The stored documents (their blobs and records) with a passage of the text, and each passage
    attributed to its best source (alignment.attribute)."""
    found: list[_Found] = []
    for record, aligned in alignment.drop_overshadowed(_aligned(query, sources, min_words)):
        stored_id, _, metadata = records.unpack(record)
        containment = round(alignment.containment(query, aligned), 4)
        found.append(alignment.Found(metadata, containment, stored_id, aligned))
    return found, alignment.attribute(found)


def _passage(t: alignment.Attributed[Metadata | None]) -> Passage:
    s = t.span.span
    also_in = [Copy(f.key, f.payload, c.span.source_start, c.span.source_end) for f, c in t.copies]
    return Passage(s.start, s.end, s.source_start, s.source_end, also_in[:ALSO_IN_SHOWN], len(also_in))


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
