"""The service object: collections and documents over a store, with LSH candidates verified against
stored signatures and first-seen order taken from the store's stamps (one script call per batch)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from neardup.domain.banding import (
    Sketches,
    candidate_scorer,
    earlier_in_batch,
    readable,
    sketch_texts,
    stored_band_keys,
)
from neardup.domain.errors import (
    CollectionConflict,
    CollectionNotFound,
    DocumentNotFound,
    InvalidInput,
    InvalidParameters,
    SitesNotCounted,
    StoreUnavailable,
    WrittenByNewerVersion,
)
from neardup.domain.group_commit import GroupCommit
from neardup.domain.models import (
    CheckResult,
    CollectionInfo,
    CollectionParams,
    Document,
    Match,
    Metadata,
    StoredDocument,
    check_document,
    encode_metadata,
    is_collection_name,
    site_of,
)
from neardup.domain.observer import IndexObserver, NullObserver
from neardup.domain.passage_search import DEFAULT_MIN_WORDS, PassageResult, search_passages
from neardup.domain.pending_links import PendingLinks
from neardup.domain.registry import ATTEMPTS, Collection, Registry, decode_entry, encode_entry
from neardup.domain.sites import MirrorPair, SiteMirrors, mirror_pairs, site_mirrors
from neardup.storage import records
from neardup.storage.errors import GenerationChanged, StoreDown
from neardup.storage.keys import ORDINAL_WIDTH, SITE_PARTNERS, CollectionKeys, max_ordinal
from neardup.storage.store import CheckBatch, CheckReply, JournalEntries, Mode, NeedOldBands, Settle, Store

#: Most documents one ``check`` call takes (the API should reject larger batches with a 4xx).
MAX_BATCH = 1000
#: Per checked document, at most this many *earliest* candidates are verified: a huge cluster of
#: copies must not make every later check fetch thousands of signatures.
MAX_CANDIDATES = 256
#: Insertions one collection can take: ordinals are ``keys.ORDINAL_WIDTH`` (5) bytes in the band
#: buckets and never reused.
MAX_INSERTIONS = max_ordinal(ORDINAL_WIDTH)
#: Sites count matches at the collection's threshold (what a check reports): a site's share estimates
#: the share of its pages with a near-duplicate on the other site. Recorded per checked document: at most
#: this many of its matches on other sites (a document keeps keys.SITE_PARTNERS partners), the best one
#: of each other site first.
MAX_LINKS_PER_DOCUMENT = SITE_PARTNERS
#: Attempts when another client changes the same ids (or drops/recreates the collection) meanwhile.
_ATTEMPTS = ATTEMPTS
T = TypeVar("T")
#: Similarities are float32 fractions: compare with a little slack so a similarity of exactly the
#: threshold (e.g. 70/100 vs 0.7) is not lost to rounding.
_EPSILON = 1e-6
#: A floor no estimate reaches (estimates are at most 1).
_NEVER = 2.0
#: Batches with at most this many characters are sketched on the event loop: ~100 us of work at
#: ~300 MB/s, less than handing them to a thread and back. Larger ones go to a thread (the native
#: core releases the GIL), so the loop keeps serving other requests meanwhile.
INLINE_SKETCH_CHARS = 32_768


def collection_floor(params: CollectionParams) -> float:
    """Least similarity a candidate needs to match in this collection: its threshold, on the estimate
    of the stored sketches (``verify="estimate"``) or on the exact Jaccard (``verify="exact"``)."""
    return params.threshold


def _match_floor(params: CollectionParams, min_similarity: float | None) -> float:
    if min_similarity is not None:
        return min_similarity
    return collection_floor(params)


#: Stamps given to batch documents in read-only checks: after every stored stamp (< 2^53).
_VIRTUAL_STAMP = 2**60
#: Expired or evicted documents reclaimed per write, at least (and twice the batch): reclaiming
#: keeps pace with inserting, so memory stays flat, and no request pays for a backlog at once.
_RECLAIM_PER_WRITE = 64
#: Reclaim rounds (each up to _RECLAIM_PER_WRITE documents) before a site read: expired or evicted
#: documents stop being counted when they are reclaimed.
_SITE_RECLAIM_ROUNDS = 16
#: Reclaim rounds per collection in one retention sweep (``Index.sweep_retention``): up to 4,096
#: documents per collection per sweep, in calls as short as a write's.
_SWEEP_ROUNDS = 64
#: Seconds a process holds verified cross-site pairs for its next check of the collection to settle
#: before it settles them with a call of their own (see ``pending_links``).
_SETTLE_DELAY = 0.1
#: Link journal entries read per round when a site read settles what is left (``_settle_journal``).
_JOURNAL_ROUND = 64
#: Seconds between two sweeps of a collection's link journal by a process that writes entries to it:
#: each settles the entries written before the last one (see ``pending_links``), so that entries whose
#: process died or whose check's answer was lost do not pile up where nobody reads the sites.
_JOURNAL_SWEEP = 10.0
log = logging.getLogger("neardup.index")


#: One document of a check with insert, as it waits for its batch: the document, its encoded
#: metadata, and its caller's min_similarity.
_Insert = tuple[Document, bytes, float | None]


class Index:
    """Near-duplicate index over a store. One instance per process; safe for concurrent use."""

    def __init__(
        self,
        store: Store,
        *,
        threads: int = 1,
        observer: IndexObserver | None = None,
        settle_delay: float = _SETTLE_DELAY,
        journal_sweep: float = _JOURNAL_SWEEP,
    ) -> None:
        """``threads``: threads the native core may use for one batch's signatures. ``observer`` is told
        about signature time, store calls and verification (metrics). ``settle_delay``: seconds this
        process holds a check's verified cross-site pairs for its next check of the collection to carry;
        ``journal_sweep``: seconds between two sweeps of a collection's link journal (see
        ``pending_links``)."""
        self._store = store
        self._threads = threads
        self._observer: IndexObserver = observer or NullObserver()
        #: The collections this process knows, and the guard of its store calls.
        self.registry = Registry(store, self._observer)
        # Concurrent checks with insert into one collection share store calls (group commit): the
        # script takes them as one batch, in arrival order, so first seen still wins.
        self._inserts: GroupCommit[str, _Insert, CheckResult] = GroupCommit(
            self._check_inserts, max_items=MAX_BATCH
        )
        # Cross-site pairs verified here, until a later check (or a call of their own) settles them.
        self._pending = PendingLinks(
            self._settle_pending, delay=settle_delay, sweep=self._sweep_journal, sweep_every=journal_sweep
        )

    async def close(self) -> None:
        """Settle what this process still holds (the store's link journal keeps it otherwise, until a
        site read or another process's sweep settles it)."""
        await self._pending.close()

    # --- plumbing -------------------------------------------------------------------------------------

    async def ping(self) -> None:
        """Readiness: returns if the store answers, else raises StoreUnavailable."""
        async with self.registry.call():
            await self._store.ping()

    # --- collections ----------------------------------------------------------------------------------

    async def create_collection(self, params: CollectionParams) -> tuple[CollectionParams, bool]:
        """Create; returns (params, True). Same name and same params again -> (params, False);
        different params -> CollectionConflict."""
        if not isinstance(params, CollectionParams):
            raise InvalidParameters("params must be CollectionParams (use CollectionParams.create)")
        gen = secrets.token_hex(6)
        async with self.registry.call(params.name):
            existing = await self._store.create_collection(
                params.name,
                encode_entry(params, gen),
                gen,
                ttl_ms=(params.ttl_seconds or 0) * 1000,
                max_documents=params.max_documents or 0,
                capacity=_capacity(params),
                bands=params.bands,
                passages=params.passages,
                sketch_bytes=0 if params.verify == "exact" else params.stored_bytes,
                sites=params.site_field is not None,
            )
        if existing is None:
            self.registry.remember(Collection(params, CollectionKeys(params.name, gen)))
            return params, True
        current = decode_entry(existing)
        self.registry.remember(current)
        if current.params == params:
            return current.params, False
        differences = ", ".join(
            f"{field}={getattr(current.params, field)!r} (asked {getattr(params, field)!r})"
            for field in {**current.params.to_dict(), **params.to_dict()}
            if getattr(current.params, field) != getattr(params, field)
        )
        raise CollectionConflict(
            f"collection {params.name!r} exists with other parameters: {differences}; "
            "parameters are fixed at creation: use another name, or delete it first"
        )

    async def ensure_default_collection(self, params: CollectionParams) -> CollectionParams:
        """Create the collection if missing. If it exists (even with other parameters, e.g. the
        configured defaults changed) its stored parameters win and are returned: they are fixed."""
        try:
            created, _ = await self.create_collection(params)
            return created
        except CollectionConflict:
            return (await self.registry.get(params.name, refresh=True)).params

    async def get_collection(self, name: str) -> CollectionInfo:
        """Parameters and document count; CollectionNotFound if absent."""
        collection, documents = await self.registry.fetch(name)
        return CollectionInfo(collection.params, documents)

    async def list_collections(self) -> list[CollectionInfo]:
        """All collections, sorted by name."""
        async with self.registry.call():
            found = await self._store.list_collections()
        return [CollectionInfo(decode_entry(raw).params, docs) for raw, docs in found]

    async def delete_collection(self, name: str) -> None:
        """Drop the collection and all its documents; CollectionNotFound if absent."""
        if not is_collection_name(name):
            raise CollectionNotFound(name)
        # a collection of a newer release is left to it: its keys may be of families this one cannot name
        await self.registry.fetch(name)
        self.registry.forget(name)
        async with self.registry.call(name):
            dropped = await self._store.drop_collection(name)
        if not dropped:
            raise CollectionNotFound(name)

    async def sweep_dropped(self) -> int:
        """Finish the drops that died half way (their data keys left behind): see Store.sweep_dropped.
        The service runs it in the background; returns how many dropped generations it finished. Its
        store calls are not the requests' (they are not counted in the store metrics); a store that is
        down is StoreUnavailable."""
        try:
            return await self._store.sweep_dropped()
        except StoreDown as error:
            raise StoreUnavailable(f"the store is unavailable ({error}); retry shortly") from error

    # --- documents ------------------------------------------------------------------------------------

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
        docs = list(docs)
        if len(docs) > MAX_BATCH:
            raise InvalidInput(f"a batch holds at most {MAX_BATCH} documents, got {len(docs)}")
        for doc in docs:
            check_document(doc)
        _check_similarity(min_similarity)
        if not docs:
            await self.registry.get(name)  # still a 404 for an unknown collection
            return []
        # Encoded here, in the caller: a document that cannot be stored must fail its own call, never a
        # shared batch of others'.
        metas = [encode_metadata(doc.id, doc.metadata) for doc in docs]
        if insert:
            return await self._inserts.submit(
                name, [(doc, meta, min_similarity) for doc, meta in zip(docs, metas, strict=True)]
            )
        collection, batch, reply, _ = await self._run(name, docs, metas, "read")
        floor = _match_floor(collection.params, min_similarity)
        return self._results(collection, docs, batch, reply, [floor] * len(docs), inserted=False)

    async def _check_inserts(
        self, name: str, items: list[_Insert], *, keep_unchanged: bool = True
    ) -> list[CheckResult]:
        """Checks with insert of one or several concurrent calls (see ``_inserts``), as one batch.

        A document whose id is stored with the same signature and metadata (a retry of a check whose
        answer was lost, or the same document sent again) keeps its stored copy and its place in
        first-seen order: it is checked read-only against the documents stamped before that copy.
        Replacing it would move it after a near-duplicate that arrived in between, which was already
        told that this one is earlier."""
        docs = [doc for doc, _, _ in items]
        metas = [meta for _, meta, _ in items]
        try:
            collection, batch, reply, _ = await self._run(
                name, docs, metas, "insert", keep_unchanged=keep_unchanged
            )
        except _Unchanged as unchanged:
            return await self._check_some_unchanged(name, items, unchanged.stored)
        floors = [_match_floor(collection.params, min_similarity) for _, _, min_similarity in items]
        links: list[tuple[int, int]] = []
        results = self._results(collection, docs, batch, reply, floors, inserted=True, links=links)
        if reply.journal:  # settled by this process's next check of the collection, or soon after
            self._pending.add(name, collection.keys.gen, reply.journal, links)
        await self._reclaim(collection, len(docs), reply.now_ms)
        return results

    async def _check_some_unchanged(
        self, name: str, items: list[_Insert], stored: dict[int, int]
    ) -> list[CheckResult]:
        """``stored``: batch position -> ordinal of the unchanged stored copy of that document. A copy
        that its own read-only check does not find (on a cluster: appended by a check that died before
        stamping it; or past the earliest candidates) is replaced after all, as before."""
        results: list[CheckResult | None] = [None] * len(items)
        rest = [i for i in range(len(items)) if i not in stored]
        if rest:  # the others first, in their order (they may meet unchanged copies of their own)
            for i, result in zip(
                rest, await self._check_inserts(name, [items[i] for i in rest]), strict=True
            ):
                results[i] = result
        kept = sorted(stored)
        docs = [items[i][0] for i in kept]
        metas = [items[i][1] for i in kept]
        # "restore": a copy half written by a check that died (on a cluster) is completed before it
        # is looked for, so a kept copy is always in every bucket of its band keys.
        copies = {j: stored[i] for j, i in enumerate(kept)}
        collection, batch, reply, _ = await self._run(name, docs, metas, "restore", expected=copies)
        floors = [_match_floor(collection.params, items[i][2]) for i in kept]
        before = [reply.stamp(stored[i]) for i in kept]
        links: list[tuple[int, int]] = []
        read = self._results(
            collection, docs, batch, reply, floors, inserted=True, before=before,
            own=[stored[i] for i in kept], links=links,
        )  # fmt: skip
        # A retried check records the edges its first answer found (again: idempotent), so a check
        # whose answer was lost before its edges were recorded still converges.
        await self._link(collection, links)
        gone = []
        for j, i in enumerate(kept):
            if stored[i] in reply.candidates[j]:
                results[i] = read[j]
            else:
                gone.append(i)
        if gone:
            replaced = await self._check_inserts(name, [items[i] for i in gone], keep_unchanged=False)
            for i, result in zip(gone, replaced, strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    async def query(
        self, name: str, text: str, *, limit: int = 10, min_similarity: float | None = None
    ) -> list[Match]:
        """Read-only: verified matches of ``text``, best first, at most ``limit``."""
        if not isinstance(text, str):
            raise InvalidInput("text must be a string")
        _check_positive("limit", limit)
        _check_similarity(min_similarity)
        # An empty id never names a stored document (ids are non-empty), so nothing is excluded.
        docs = [Document("", text)]
        collection, batch, reply, _ = await self._run(name, docs, [b""], "read")
        floor = _match_floor(collection.params, min_similarity)
        [result] = self._results(collection, docs, batch, reply, [floor], inserted=False)
        return result.matches[:limit]

    async def passages(
        self, name: str, text: str, *, limit: int = 10, min_words: int | None = None
    ) -> PassageResult:
        """Read-only: the stored documents that contain passages of ``text``, best first, at most
        ``limit``, with the spans (``min_words`` words or more) in both texts. Raises InvalidInput,
        CollectionConflict (the collection was created without passages), CollectionNotFound."""
        if not isinstance(text, str):
            raise InvalidInput("text must be a string")
        _check_positive("limit", limit)
        if min_words is None:
            min_words = DEFAULT_MIN_WORDS
        _check_positive("min_words", min_words)
        return await search_passages(self.registry, self._store, name, text, limit, min_words)

    async def put(self, name: str, doc: Document) -> StoredDocument:
        """Insert or replace without reporting matches (it still takes its place in first-seen order).
        The same text and metadata as the stored version change nothing. In a collection with a
        ``site_field`` it is stored as a check stores it (its candidates read and verified, its
        cross-site matches linked), so that a page counts the same however it was stored, and whether or
        not it was sent again."""
        check_document(doc)
        meta = encode_metadata(doc.id, doc.metadata)
        try:
            collection, batch, reply, inserted_ms = await self._run(
                name, [doc], [meta], "put", keep_unchanged=True
            )
        except _Unchanged as unchanged:  # stored as it is: it keeps its place, as in a check
            await self._check_some_unchanged(name, [(doc, meta, None)], unchanged.stored)
            return await self.get_document(name, doc.id)
        if collection.params.site_field is not None:  # "put" ran as "insert" (see _run)
            links: list[tuple[int, int]] = []
            floors = [collection_floor(collection.params)]
            self._results(collection, [doc], batch, reply, floors, inserted=True, links=links)
            if reply.journal:
                self._pending.add(name, collection.keys.gen, reply.journal, links)
        await self._reclaim(collection, 1, inserted_ms)
        return StoredDocument(doc.id, doc.metadata, inserted_ms / 1000.0)

    async def get_document(self, name: str, doc_id: str) -> StoredDocument:
        """DocumentNotFound / CollectionNotFound if absent."""
        async for collection in self.registry.views(name):
            try:
                async with self.registry.call(name):
                    [found] = await self._store.lookup(
                        collection.keys, [doc_id.encode("utf-8", "surrogatepass")]
                    )
                    now_ms = await self._server_ms(collection)
            except GenerationChanged:
                continue
            if found is None or not found.record or _expired(collection.params, found.record, now_ms):
                raise DocumentNotFound(name, doc_id)
            stored_id, inserted_at, metadata = records.unpack(found.record)
            return StoredDocument(stored_id, metadata, inserted_at)
        raise AssertionError("unreachable: _views raises when it runs out")

    async def delete_document(self, name: str, doc_id: str) -> None:
        """Remove it everywhere (bands, signature, metadata, stamp); DocumentNotFound if absent."""
        raw_id = doc_id.encode("utf-8", "surrogatepass")
        async for collection in self.registry.views(name):
            try:
                async with self.registry.call(name):
                    [found] = await self._store.lookup(collection.keys, [raw_id])
                    now_ms = await self._server_ms(collection)
                    if (
                        found is not None
                        and found.record
                        and _expired(collection.params, found.record, now_ms)
                    ):
                        found = None  # expired: gone for clients; the reclaimer removes it
                    while found is not None:
                        old = stored_band_keys(collection.params, found.signature)
                        outcome = await self._store.delete(collection.keys, raw_id, found.ordinal, old)
                        if outcome is True:
                            return
                        found = None if outcome is False else outcome
            except GenerationChanged:
                continue
            raise DocumentNotFound(name, doc_id)
        raise AssertionError("unreachable: _views raises when it runs out")

    # --- the check path -------------------------------------------------------------------------------

    async def _run(
        self,
        name: str,
        docs: list[Document],
        metas: list[bytes],
        mode: Mode,
        *,
        keep_unchanged: bool = False,
        expected: dict[int, int] | None = None,
    ) -> tuple[Collection, Sketches, CheckReply, int]:
        """Sketch the texts and send the batch; retries when the collection was recreated (new
        parameters: sketch again) or when stored versions of the ids need their band keys. With
        ``keep_unchanged``, raises :class:`_Unchanged` (nothing written) if some ids are stored with
        the same signature and metadata. A "put" into a collection with a site_field runs as an
        "insert": its cross-site matches are counted like a check's."""
        texts = [doc.text for doc in docs]
        ids = [doc.id.encode("utf-8", "surrogatepass") for doc in docs]
        batch: Sketches | None = None
        previous: CollectionParams | None = None
        async for collection in self.registry.views(name):
            if batch is None or collection.params != previous:
                started = time.perf_counter()
                if sum(map(len, texts)) <= INLINE_SKETCH_CHARS:
                    batch = sketch_texts(collection.params, texts, self._threads)
                else:
                    batch = await asyncio.to_thread(sketch_texts, collection.params, texts, self._threads)
                self._observer.signatures_computed(len(texts), time.perf_counter() - started)
                previous = collection.params
            inserted_ms = int(time.time() * 1000)
            recs = [records.pack(inserted_ms, i, m) for i, m in zip(ids, metas, strict=True)]
            request = CheckBatch(
                bands=collection.params.bands,
                band_keys=batch.band_key_bytes,
                signatures=batch.signature_bytes,
                signature_offsets=batch.signature_offsets,
                empties=batch.empty_flags,
                ids=ids,
                records=recs,
                passages=batch.passages,
                expected=[
                    b"%d" % (expected or {})[i] if i in (expected or {}) else b"" for i in range(len(ids))
                ],
                sites=_sites(collection.params, docs),
            )
            gen = collection.keys.gen
            sent: Mode = "insert" if mode == "put" and collection.params.site_field is not None else mode
            request.settle = self._pending.take(name, gen) if sent == "insert" else None
            settled = False
            try:
                for _ in range(_ATTEMPTS):
                    async with self.registry.call(name):
                        reply = await self._store.check(
                            collection.keys, sent, request, max_candidates=MAX_CANDIDATES
                        )
                    if not isinstance(reply, NeedOldBands):
                        settled = True
                        # the store stamped the records with its own clock (placeholder: ours)
                        return collection, batch, reply, reply.now_ms or inserted_ms
                    if keep_unchanged:
                        unchanged = await self._unchanged(collection, docs, ids, metas, batch, reply)
                        if unchanged:
                            raise _Unchanged(unchanged)
                    for i, (ordinal, signature) in reply.stored.items():
                        request.expected[i] = b"%d" % ordinal
                        request.old_bands[i] = stored_band_keys(collection.params, signature)
            except GenerationChanged:
                settled = True  # the collection was recreated: its journal went with it
                continue
            finally:
                # A check that did not answer "ok" is not known to have settled what it carried (a
                # "replace" answer settles nothing, an error may have): they go again, idempotently.
                if not settled and request.settle is not None:
                    self._pending.give_back(name, gen, request.settle)
        raise AssertionError("unreachable: _views raises when it runs out")

    async def _server_ms(self, collection: Collection) -> int:
        """The store server's time, for expiry; only asked of collections that expire documents."""
        if collection.params.ttl_seconds is None:
            return 0
        return await self._store.now_ms(collection.keys)

    async def _unchanged(
        self,
        collection: Collection,
        docs: list[Document],
        ids: list[bytes],
        metas: list[bytes],
        batch: Sketches,
        reply: NeedOldBands,
    ) -> dict[int, int]:
        """Positions of ``reply`` whose stored version has this document's signature and metadata, live,
        and whose id is not sent twice in the batch (the later one must win): position -> ordinal.
        Under ``max_documents`` too: a copy evicted meanwhile is not among its own read-only check's
        candidates (evicted ordinals never are), so ``_check_some_unchanged`` replaces it after all."""
        times = Counter(ids)
        same = [
            i
            for i, (_, signature) in sorted(reply.stored.items())
            if times[ids[i]] == 1 and signature == batch.stored(i)
        ]
        if not same:
            return {}
        # In the guard like every store call: a store error here is a 503, not a 500 for every caller
        # merged into this batch.
        async with self.registry.call(collection.params.name):
            found = await self._store.lookup(collection.keys, [ids[i] for i in same])
            now_ms = await self._server_ms(collection)
        unchanged: dict[int, int] = {}
        for i, version in zip(same, found, strict=True):
            if version is None or version.ordinal != reply.stored[i][0] or not version.record:
                continue
            if _expired(collection.params, version.record, now_ms):
                continue
            stored_id, _, metadata = records.unpack(version.record)
            if stored_id == docs[i].id and encode_metadata(stored_id, metadata) == metas[i]:
                unchanged[i] = version.ordinal
        return unchanged

    def _results(
        self,
        collection: Collection,
        docs: list[Document],
        batch: Sketches,
        reply: CheckReply,
        floors: Sequence[float],
        *,
        inserted: bool,
        before: Sequence[int] | None = None,
        own: Sequence[int] | None = None,
        links: list[tuple[int, int]] | None = None,
    ) -> list[CheckResult]:
        """Verified matches of each document; ``floors[i]``: least estimate a match of document i needs.
        ``before[i]``: only candidates stamped before this (the stored copy of an unchanged document,
        checked read-only), instead of the batch's own order. ``links``: filled, for a collection with
        a site_field, with (ordinal of document i, ordinal of a match on another site) pairs of the
        matches at the collection's own floor, in the order to record them (see ``_site_links``);
        ``own[i]``: document i's ordinal where the reply has none (an unchanged stored copy)."""
        n = len(docs)
        params = collection.params
        # One pool of every sketch a candidate can point at: the batch's, then the fetched ones.
        # Expiry by the store server's clock, the one its records were stamped with.
        oldest_ms = _oldest_live_ms(params, reply.now_ms or int(time.time() * 1000))
        fetched = [
            (ordinal, sig, rec)
            for ordinal, (sig, rec) in reply.fetched.items()
            if readable(params, sig) and rec and records.inserted_ms(rec) >= oldest_ms
        ]
        score = candidate_scorer(params, batch, [f[1] for f in fetched])
        # row in pool, stamp (first-seen order), id, metadata of each candidate ordinal
        known: dict[int, tuple[int, int, str, Metadata | None, int]] = {}
        for i, ordinal in enumerate(reply.ordinals):
            if ordinal:
                known[ordinal] = (i, reply.stamp(ordinal), docs[i].id, docs[i].metadata, ordinal)
        for row, (ordinal, _, rec) in enumerate(fetched, start=n):
            stored_id, _, metadata = records.unpack(rec)
            known[ordinal] = (row, reply.stamp(ordinal), stored_id, metadata, ordinal)
        site_field = collection.params.site_field if links is not None else None
        site_floor = collection.params.threshold  # see MAX_LINKS_PER_DOCUMENT
        in_batch = earlier_in_batch(batch.band_keys, batch.empty) if not inserted and before is None else {}

        results: list[CheckResult] = []
        for i, doc in enumerate(docs):
            own_ordinal = reply.ordinals[i] or (own[i] if own is not None else 0)
            rows: list[tuple[int, int, str, Metadata | None, int]] = [
                known[c] for c in reply.candidates[i] if c in known and c != own_ordinal
            ]
            for j in sorted(in_batch.get(i, ())):
                rows.append((j, _VIRTUAL_STAMP + j, docs[j].id, docs[j].metadata, 0))
            if before is not None:
                rows = [r for r in rows if r[1] < before[i]]
            elif not inserted:  # the stored version of the same id is this document, not an earlier one
                rows = [r for r in rows if r[2] != doc.id]
            matches: list[tuple[float, int, Match]] = []
            linked: list[tuple[float, int, Metadata | None]] = []  # (similarity, ordinal, metadata)
            # a document of no site, or one the store did not give an ordinal, links nothing
            own_site = site_of(doc.metadata, site_field) if site_field is not None and own_ordinal else None
            if rows and not batch.empty[i]:
                floor = floors[i] - _EPSILON
                link_floor = site_floor - _EPSILON if own_site is not None else _NEVER
                sims = score(i, [r[0] for r in rows], min(floor, link_floor))
                for (_, stamp, cand_id, metadata, ordinal), sim in zip(rows, sims, strict=True):
                    if sim >= floor:
                        matches.append((sim, stamp, Match(cand_id, sim, metadata)))
                    if sim >= link_floor and ordinal:
                        linked.append((sim, ordinal, metadata))
            if linked and links is not None:
                links.extend(_site_links(own_ordinal, own_site, linked, site_field))
            self._observer.candidates_verified(len(rows), len(rows) - len(matches))
            matches.sort(key=lambda m: (-m[0], m[1]))
            first = min(matches, key=lambda m: m[1])[2].id if matches else None
            results.append(
                CheckResult(
                    id=doc.id,
                    duplicate=bool(matches),
                    duplicate_of=first,
                    matches=[m[2] for m in matches],
                    inserted=inserted,
                )
            )
        return results

    async def _link(self, collection: Collection, links: list[tuple[int, int]]) -> None:
        """Record a batch's cross-site matches (one script call; none when there are none). Part of
        the check: a failure is the check's 503, and its retry records them (idempotent)."""
        if not links:
            return
        try:
            async with self.registry.call(collection.params.name):
                await self._store.link(collection.keys, links)
        except GenerationChanged:
            pass  # the collection was recreated: the documents these edges were about are gone

    # --- sites ------------------------------------------------------------------------------------------

    async def _settle_pending(self, name: str, gen: str, settle: Settle) -> None:
        """Settle link journal entries this process holds, with a call of their own (link.lua)."""
        collection = await self.registry.get(name)
        if collection.keys.gen != gen:
            return  # recreated: those entries went with the old generation
        try:
            async with self.registry.call(name):
                await self._store.link(collection.keys, settle.pairs, settle.fields)
        except GenerationChanged:
            pass

    async def _sweep_journal(self, name: str, gen: str, through: int) -> None:
        """Settle the link journal entries of fields up to ``through`` (a sweep: see ``pending_links``)."""
        collection = await self.registry.get(name)
        if collection.keys.gen != gen:
            return  # recreated: those entries went with the old generation
        with contextlib.suppress(GenerationChanged):
            await self._settle_journal(collection, through=through)

    async def _settle_journal(self, collection: Collection, *, through: int = 0) -> None:
        """Settle the entries of the collection's link journal written before this call (or those of
        fields up to ``through``): a process that died, or has not settled yet. Each document's
        candidates are verified from the stored sketches, as ``_results`` verifies them for a check (the
        same scorer, threshold and order), and linked (link.lua, which deletes the entries with the same
        call). Linking is idempotent, so an entry that its own process settles too converges to the same
        edges.

        Bounded whatever other processes write meanwhile: the first read fixes the highest field (the
        collection's last ordinal then: a field is its batch's first ordinal), every round settles up to
        _JOURNAL_ROUND of the entries at or below it and they only get fewer, and a round that finds fewer
        than that is the last. So E entries there at the start take at most E // _JOURNAL_ROUND + 1
        rounds of two calls (journal.lua, then link.lua when there is anything to link)."""
        params, keys = collection.params, collection.keys
        assert params.site_field is not None
        while True:
            async with self.registry.call(params.name):
                journal = await self._store.link_journal(keys, limit=_JOURNAL_ROUND, through=through)
            through = journal.through
            if journal.entries:
                await self._link_journal(collection, journal)
            if len(journal.entries) < _JOURNAL_ROUND:
                return

    async def _unread_candidates(
        self, collection: Collection, journal: JournalEntries
    ) -> dict[int, list[int]]:
        """The candidates of the journal's documents whose entry was written by a cluster stamp and never
        got them (its check died before its read: docs/design.md, "Sites on a cluster"), as that check
        would have read them: from the document's own band keys (in its stored sketch), those stamped
        before it. One read-only check of those sketches; their candidates' sketches and records join
        ``journal.found``. A document gone meanwhile gets none."""
        params = collection.params
        unread = sorted(
            {own for _, docs in journal.entries for own, cands in docs if cands is None}
            & {o for o, (sig, rec) in journal.found.items() if rec and stored_band_keys(params, sig)}
        )
        if not unread:
            return {}
        sketches = [journal.found[o][0] for o in unread]
        offsets = [0]
        for sketch in sketches:
            offsets.append(offsets[-1] + len(sketch))
        request = CheckBatch(
            bands=params.bands,
            band_keys=b"".join(stored_band_keys(params, sketch) for sketch in sketches),
            signatures=b"".join(sketches),
            signature_offsets=offsets,
            empties=b"0" * len(unread),
            ids=[b""] * len(unread),  # no id: nothing of the store's is excluded
            records=[b""] * len(unread),
        )
        async with self.registry.call(params.name):
            reply = await self._store.check(collection.keys, "read", request, max_candidates=MAX_CANDIDATES)
        assert isinstance(reply, CheckReply)  # read mode writes nothing, so needs no old bands
        journal.found.update(reply.fetched)
        return {
            own: [c for c in found if c != own and reply.stamp(c) < reply.stamp(own)]
            for own, found in zip(unread, reply.candidates, strict=True)
            if own in found  # still stored, and stamped
        }

    async def _link_journal(self, collection: Collection, journal: JournalEntries) -> None:
        """Verify and link one round of journal entries (see ``_settle_journal``)."""
        params, keys = collection.params, collection.keys
        unread = await self._unread_candidates(collection, journal)
        oldest_ms = _oldest_live_ms(params, journal.now_ms)
        pool = [
            ordinal
            for ordinal, (sig, rec) in journal.found.items()
            if readable(params, sig) and rec and records.inserted_ms(rec) >= oldest_ms
        ]
        row = {ordinal: r for r, ordinal in enumerate(pool)}
        metas = {o: records.unpack(journal.found[o][1])[2] for o in pool}
        score = candidate_scorer(params, sketch_texts(params, [], 1), [journal.found[o][0] for o in pool])
        floor = params.threshold - _EPSILON
        pairs: list[tuple[int, int]] = []
        for _, docs in journal.entries:
            for own, candidates in docs:
                own_site = site_of(metas[own], params.site_field) if own in metas else None
                rows = [
                    c
                    for c in (unread.get(own, []) if candidates is None else candidates)
                    if c in row and c != own
                ]
                if own_site is None or not rows:
                    continue
                sims = score(row[own], [row[c] for c in rows], floor)
                linked = [(sim, c, metas[c]) for c, sim in zip(rows, sims, strict=True) if sim >= floor]
                pairs.extend(_site_links(own, own_site, linked, params.site_field))
        async with self.registry.call(params.name):
            await self._store.link(keys, pairs, [f for f, _ in journal.entries])

    async def settle_links(self, name: str) -> None:
        """Link every verified cross-site match of the collection's checks that answered before this
        call, of this process and of any other (what a site read does first; see ``_settle_journal``
        for its bound)."""

        async def nothing(_: CollectionKeys) -> None:
            return None

        await self._read_sites(name, nothing)

    async def _site_collection(self, name: str) -> Collection:
        collection = await self.registry.get(name)
        if collection.params.site_field is None:
            raise SitesNotCounted(
                f"collection {name!r} has no site_field: sites are counted only in collections created "
                'with one (e.g. "site_field": "url"); parameters are fixed at creation'
            )
        # Expired or evicted documents still counted leave first (a bounded amount per call).
        for _ in range(_SITE_RECLAIM_ROUNDS):
            if not await self._reclaim(collection, 0, 0):
                break
        return collection

    async def site(self, name: str, site: str) -> SiteMirrors:
        """A site's pages and the sites it shares pages with, best first (see ``domain.sites``)."""
        if not isinstance(site, str) or not site:
            raise InvalidInput("a site is a non-empty string")
        key = (site_of({"s": site}, "s") or site).encode("utf-8", "surrogatepass")
        counts = await self._read_sites(name, lambda keys: self._store.site(keys, key))
        return site_mirrors(counts)

    async def mirrors(
        self, name: str, *, min_share: float = 0.5, min_pages: int = 1, limit: int = 100
    ) -> list[MirrorPair]:
        """Pairs of sites where either direction's share reaches ``min_share``, both sites having at
        least ``min_pages`` pages, ranked by share; at most ``limit``. Reads every site's counts:
        O(sites + pairs) (see ``Store.site_pairs``)."""
        counts = await self._read_sites(name, lambda keys: self._store.site_pairs(keys, min_pages=min_pages))
        return mirror_pairs(counts, min_share=min_share, min_pages=min_pages, limit=limit)

    async def _read_sites(self, name: str, read: Callable[[CollectionKeys], Awaitable[T]]) -> T:
        """``read`` of a site_field collection's keys, again on a fresh view of the collection when it
        was recreated meanwhile."""
        async for collection in self.registry.views(name, first=self._site_collection):
            try:
                # every verified match of a check that answered before the read linked first, this
                # process's and any other's: the counts are exact as of the read's start (and may
                # include what checks wrote meanwhile); a bounded number of calls (_settle_journal)
                await self._pending.flush(name)
                await self._settle_journal(collection)
                async with self.registry.call(name):
                    return await read(collection.keys)
            except GenerationChanged:
                continue
        raise AssertionError("unreachable: _views raises when it runs out")

    async def sweep_retention(self, *, stop: asyncio.Event | None = None) -> int:
        """Reclaim what is due (expired or evicted) in every collection with a ``ttl_seconds`` or
        ``max_documents``: up to ``_SWEEP_ROUNDS`` x ``_RECLAIM_PER_WRITE`` documents per collection,
        the same calls as after a write, by the collection's own clock. The service runs it every
        ``NEARDUP_RETENTION_SWEEP_SECONDS``, so a collection nobody writes to gives its expired documents
        back too. Returns how many documents it reclaimed. A store that is down is StoreUnavailable (the
        rest waits for the next sweep); a collection dropped or recreated meanwhile is skipped. Stops
        between two rounds once ``stop`` is set."""
        async with self.registry.call():
            found = await self._store.list_collections()
        reclaimed = 0
        for raw, documents in found:
            try:
                collection = decode_entry(raw)
            except WrittenByNewerVersion:
                continue  # its keys may be of families this release cannot name: left to its release
            params = collection.params
            if not documents or (params.ttl_seconds is None and params.max_documents is None):
                continue
            try:
                for _ in range(_SWEEP_ROUNDS):
                    if stop is not None and stop.is_set():
                        return reclaimed
                    count = await self._reclaim_due(collection, _RECLAIM_PER_WRITE, 0)
                    reclaimed += count
                    if count < _RECLAIM_PER_WRITE:
                        break
            except (CollectionNotFound, GenerationChanged):
                continue
        return reclaimed

    async def _reclaim(self, collection: Collection, written: int, now_ms: int) -> int:
        """Reclaim expired or evicted documents, a bounded amount per write (``_reclaim_due``). Best
        effort: the write itself has succeeded already. ``now_ms``: the store server's time from the
        write's own reply (no extra round trip; asked for if 0)."""
        params = collection.params
        if params.ttl_seconds is None and params.max_documents is None:
            return 0
        # The errors the guarded calls raise are caught here: the caller's write has succeeded, so its
        # answer stays a 2xx.
        try:
            return await self._reclaim_due(collection, max(_RECLAIM_PER_WRITE, 2 * written), now_ms)
        except (StoreUnavailable, CollectionNotFound, GenerationChanged) as error:
            log.info("reclaiming expired documents of %r deferred: %s", params.name, error)
            return 0

    async def _reclaim_due(self, collection: Collection, limit: int, now_ms: int) -> int:
        """Reclaim up to ``limit`` documents due; their band keys come from their stored signatures.
        ``now_ms``: the collection's clock, asked for if 0. The calls are in the guard, so they are timed
        and a failure counted like any other."""
        params = collection.params
        async with self.registry.call(params.name):
            due = await self._store.due(
                collection.keys, now_ms=now_ms or await self._store.now_ms(collection.keys), limit=limit
            )
        if due:
            items = [(ordinal, stored_band_keys(params, signature)) for ordinal, signature in due]
            async with self.registry.call(params.name):
                await self._store.reclaim(collection.keys, items)
        return len(due)


class _Unchanged(Exception):  # a signal inside Index, never raised to its callers
    """Some documents of a batch are stored unchanged (position -> ordinal); nothing was written."""

    def __init__(self, stored: dict[int, int]) -> None:
        super().__init__(stored)
        self.stored = stored


def _sites(params: CollectionParams, docs: Sequence[Document]) -> list[bytes]:
    """Each document's site as the store takes it (b"": none; all b"" without a site_field)."""
    if params.site_field is None:
        return []
    return [(site_of(doc.metadata, params.site_field) or "").encode("utf-8", "surrogatepass") for doc in docs]


def _site_links(
    own: int, site: str | None, linked: list[tuple[float, int, Metadata | None]], site_field: str | None
) -> list[tuple[int, int]]:
    """The (own, match) pairs to record for one checked document of ``site``, from its matches at the
    threshold (similarity, ordinal, metadata): matches on other sites only (by ``site_field``); the
    best match on each other site first, then the others best first, so the per-document bound
    (keys.SITE_PARTNERS) keeps as many sites as it can; at most MAX_LINKS_PER_DOCUMENT. Nothing for a
    document of no site."""
    if site is None:
        return []
    if len(linked) == 1:  # most documents that have a match have one
        other = site_of(linked[0][2], site_field)
        return [(own, linked[0][1])] if other is not None and other != site else []
    seen: set[str] = {site}
    first: list[tuple[int, int]] = []
    rest: list[tuple[int, int]] = []
    for _, ordinal, metadata in sorted(linked, key=_best_first):
        other = site_of(metadata, site_field)
        if other is None or other == site:
            continue
        (rest if other in seen else first).append((own, ordinal))
        seen.add(other)
    return (first + rest)[:MAX_LINKS_PER_DOCUMENT]


def _best_first(match: tuple[float, int, Metadata | None]) -> tuple[float, int]:
    return -match[0], match[1]


def _capacity(params: CollectionParams) -> int:
    """Documents the store sizes the collection's tables for (0: none, it grows as needed): the hint,
    or the bound, whichever is smaller."""
    given = [n for n in (params.expected_documents, params.max_documents) if n]
    return min(given) if given else 0


def _oldest_live_ms(params: CollectionParams, now_ms: int) -> int:
    """Documents inserted before this (Unix ms, by the store server's clock ``now_ms``: the clock their
    records were written with) have expired; 0 without retention."""
    if params.ttl_seconds is None:
        return 0
    return now_ms - params.ttl_seconds * 1000


def _expired(params: CollectionParams, record: bytes, now_ms: int) -> bool:
    return params.ttl_seconds is not None and records.inserted_ms(record) < _oldest_live_ms(params, now_ms)


def _check_positive(label: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{label} must be a positive integer, got {value!r}")


def _check_similarity(value: Any) -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0.0 <= value <= 1.0
    ):
        raise InvalidInput(f"min_similarity must be a number from 0 to 1, got {value!r}")
