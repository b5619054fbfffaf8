"""The store: collection registry and batched document operations over one redis.asyncio client.

It speaks bytes and integers (raw band keys, raw signatures, packed records); the domain decides what
they mean. Each operation is one script call (one round trip) on a standalone Redis/Valkey server.
Every redis failure leaves this module as :class:`StoreDown`.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
import redis.asyncio as aioredis
from redis import exceptions as rx
from redis.asyncio.retry import Retry
from redis.backoff import ConstantBackoff

from neardup.storage import keys
from neardup.storage.errors import (
    CollectionMissing,
    GenerationChanged,
    StoreDown,
    closed_transport,
    permanent,
)
from neardup.storage.scripts import Scripts, module_refused

#: insert: store and report candidates; put: store only; read: report only, no writes; restore: read,
#: after making sure each document's stored copy (``CheckBatch.expected``) is in all its buckets again
#: (a cluster check that died half way through its appends leaves a copy missing from some; on one
#: server every write is one script, so restore is read).
Mode = Literal["insert", "put", "read", "restore"]
#: Keys per UNLINK when a dropped collection's data is deleted.
_UNLINK_CHUNK = 1000
#: Sites whose shared counts one pipelined round trip of ``site_pairs`` reads.
_SITE_CHUNK = 500
#: A dropped generation is swept by others only this long after its drop (ms): until then the drop
#: itself is still unlinking it (on a cluster, checks that were in flight may still write to it).
DROP_SWEEP_AGE_MS = 120_000
#: Key names of no collection (generations are 12 hex digits), for the module probe (scripts.py).
_PROBE_KEYS = keys.CollectionKeys("module", "probe")


@dataclass(frozen=True)
class CheckReply:
    """``ordinals[i]``: the ordinal given to document i (0 in read mode). ``candidates[i]``: ordinals
    found in its buckets that were stamped before it (at most ``max_candidates``: those that share the
    most of its buckets, then the earliest). ``fetched``: signature and record of every candidate that
    is not a document of this batch. ``stamps``: first-seen stamps where they differ from the ordinal
    (cluster: ordinals are taken before stamps). ``now_ms``: the store server's time during the call,
    the insertion time of the records it wrote (0 where the call needed no clock: no write and no
    candidate)."""

    ordinals: list[int]
    candidates: list[list[int]]
    fetched: dict[int, tuple[bytes, bytes]]
    stamps: dict[int, int] = field(default_factory=dict)
    now_ms: int = 0
    #: The link journal field the check wrote for this batch (its documents of a site with candidates,
    #: to settle with ``CheckBatch.settle`` or :meth:`Store.link`), 0 for none.
    journal: int = 0

    def stamp(self, ordinal: int) -> int:
        return self.stamps.get(ordinal, ordinal)


@dataclass(frozen=True)
class Settle:
    """Link journal fields and the pairs that settle them (see ``CheckBatch.settle``)."""

    fields: Sequence[int]
    pairs: Sequence[tuple[int, int]]


@dataclass(frozen=True)
class JournalEntries:
    """The link journal as :meth:`Store.link_journal` read it: ``entries``, per field, each document's
    ordinal and its candidates' (None: not read yet, see ``journal_docs``); ``found``: the sketch and
    record of every ordinal they name (b"", b"" for a gone one); ``now_ms``: the store server's time;
    ``through``: the highest field it read up to (entries written later have higher fields)."""

    now_ms: int
    entries: list[tuple[int, list[tuple[int, list[int] | None]]]]
    found: dict[int, tuple[bytes, bytes]]
    through: int


def _shared_counts(raw: bytes | None) -> Iterator[tuple[bytes, int]]:
    """(other site id as stored in the name and page hashes, shared) of a site's shared counts (_common.lua's
    shared_add): 8-byte records, the other site id and the count, 4 bytes big-endian each."""
    for other, n in struct.iter_unpack(">II", raw or b""):
        yield b"%d" % other, n


def _pairs_blob(pairs: Sequence[tuple[int, int]]) -> bytes:
    """Per pair the two ordinals, 8 bytes big-endian each (link.lua's and check.lua's settle's)."""
    return struct.pack(f">{2 * len(pairs)}Q", *itertools.chain.from_iterable(pairs))


def settle_text(settle: Settle) -> bytes:
    """A settle as the scripts parse it (_common.lua's parse_settle): the bounds and the journal fields,
    a newline, then the pairs."""
    head = b"%d %d" % (keys.SITE_PARTNERS, keys.SITE_OTHERS)
    return b" ".join([head, *(b"%d" % f for f in settle.fields)]) + b"\n" + _pairs_blob(settle.pairs)


def journal_docs(value: bytes, width: int) -> list[tuple[int, list[int] | None]]:
    """A link journal entry's documents (check.lua's write_journal): per document its ordinal and its
    candidates' ordinals, None where they were not read yet (``keys.JOURNAL_UNREAD``: a cluster stamp's
    entry whose check died before its read)."""
    q, docs = 0, list[tuple[int, list[int] | None]]()
    while q + width + 4 <= len(value):
        x = int.from_bytes(value[q : q + width], "big")
        m = int.from_bytes(value[q + width : q + width + 4], "big")
        q += width + 4
        if m == keys.JOURNAL_UNREAD:
            docs.append((x, None))
            continue
        found = [int.from_bytes(value[q + width * c : q + width * (c + 1)], "big") for c in range(m)]
        docs.append((x, found))
        q += width * m
    return docs


def journal_value(
    ordinals: Sequence[int], candidates: Sequence[Sequence[int]], sites: Sequence[bytes]
) -> bytes:
    """A batch's link journal entry, as check.lua's write_journal writes it: per document of a site
    with candidates its ordinal, their number (4 bytes, big-endian) and their ordinals."""
    width, parts = keys.ORDINAL_WIDTH, []
    for ordinal, found, site in zip(ordinals, candidates, sites, strict=True):
        if site and found:
            parts.append(ordinal.to_bytes(width, "big") + len(found).to_bytes(4, "big"))
            parts.extend(c.to_bytes(width, "big") for c in found)
    return b"".join(parts)


def site_counts(name: bytes, reply: Any) -> SiteCounts:
    """site.lua's reply as counts (pages 0: no such site)."""
    flat = reply[2]
    others = [
        (bytes(flat[j]), int(flat[j + 1]), int(flat[j + 2]), int(flat[j + 3])) for j in range(0, len(flat), 4)
    ]
    return SiteCounts(name, int(reply[1]), others)


@dataclass
class CheckBatch:
    """One batch of documents for :meth:`Store.check`, as bytes. ``band_keys``: n * ``bands`` uint64,
    raw; ``signatures``: n raw signatures of one size; ``empties``: n bytes, b'1' where the document is
    empty (no band entries, never matches); per document its id and packed record. ``expected[i]`` is
    the ordinal of the stored version of id i whose band keys ``old_bands[i]`` are (b'' when unknown):
    the caller fills both in when the store answers :class:`NeedOldBands`."""

    bands: int
    band_keys: bytes
    signatures: bytes
    empties: bytes
    ids: Sequence[bytes]
    records: Sequence[bytes]
    expected: list[bytes] = field(default_factory=list)
    old_bands: list[bytes] = field(default_factory=list)
    #: Per document its site's name as UTF-8 (b"": none), for collections with a ``site_field``.
    sites: list[bytes] = field(default_factory=list)
    #: Per document its passage blob (neardup.domain.fingerprints), or none at all: the collection has
    #: passages off.
    passages: Sequence[bytes] = ()
    #: n + 1 offsets into ``signatures`` when the sketches differ in size (exact mode), else None
    signature_offsets: list[int] | None = None
    #: Earlier batches' link journal entries to settle first (insert mode): their fields and the
    #: (checked document, match on another site) ordinal pairs the service verified for them, linked
    #: as :meth:`Store.link` would (check.lua's ARGV[18]).
    settle: Settle | None = None

    def signature(self, i: int) -> bytes:
        """The raw sketch of document i."""
        if self.signature_offsets is not None:
            return self.signatures[self.signature_offsets[i] : self.signature_offsets[i + 1]]
        size = len(self.signatures) // max(len(self.ids), 1)
        return self.signatures[i * size : (i + 1) * size]

    def __post_init__(self) -> None:
        n = len(self.ids)
        if self.passages and len(self.passages) != n:
            raise ValueError("a check batch with passages needs one passage blob per id")
        self.expected = self.expected or [b""] * n
        self.old_bands = self.old_bands or [b""] * n
        self.sites = self.sites or [b""] * n
        if not (
            len(self.records) == len(self.expected) == len(self.old_bands) == len(self.empties)
            == len(self.sites) == n
        ):  # fmt: skip
            raise ValueError(
                "a check batch needs one record, expected, old_bands, site and empty flag per doc"
            )

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class StoredVersion:
    """What an id names now: its ordinal, raw signature and packed record."""

    ordinal: int
    signature: bytes
    record: bytes


@dataclass(frozen=True)
class NeedOldBands:
    """The check wrote nothing: these batch positions name stored versions (ordinal, signature) whose
    band keys the caller must send so they can be removed first."""

    stored: dict[int, tuple[int, bytes]]


@dataclass(frozen=True)
class Postings:
    """The postings of a text's fingerprint keys (passages.lua): ``counts`` per key asked, in order,
    ``ordinals`` all of them in the same order; ordinals at or below ``floor`` are evicted by
    max_documents; ``now_ms``: the store server's time (for expiry)."""

    counts: npt.NDArray[np.uint16]
    ordinals: npt.NDArray[np.uint64]
    floor: int
    now_ms: int


@dataclass(frozen=True)
class PassageReply:
    """Stored documents a passage search chose: (ordinal, passage blob, record), b"" where gone;
    ``now_ms``: the store server's time (for expiry)."""

    sources: list[tuple[int, bytes, bytes]]
    now_ms: int


def decode_postings(raw: bytes, n: int, floor: int, now_ms: int) -> Postings:
    """passages.lua's (or ND.POSTINGS's) reply for ``n`` keys: their 2-byte counts, then their
    ORDINAL_WIDTH-byte big-endian ordinals."""
    if len(raw) < 2 * n:
        raise StoreDown("passages: a postings reply of the wrong length")
    counts = np.frombuffer(raw, ">u2", n).astype(np.uint16)
    width = keys.ORDINAL_WIDTH
    body = np.frombuffer(raw, np.uint8, offset=2 * n)
    if len(body) != width * int(counts.sum(dtype=np.int64)):
        raise StoreDown("passages: a postings reply of the wrong length")
    padded = np.zeros((len(body) // width, 8), np.uint8)
    padded[:, 8 - width :] = body.reshape(-1, width)
    return Postings(counts, padded.view(">u8").reshape(-1).astype(np.uint64), floor, now_ms)


@dataclass(frozen=True)
class SiteCounts:
    """One site's page count and, per other site it shares pages with: (other's name, other's pages,
    shared: this site's pages with a partner there, the other's pages with a partner here)."""

    name: bytes
    pages: int
    others: list[tuple[bytes, int, int, int]]


class Store(Protocol):
    """What the domain needs from a store; :class:`RedisStore` (one server, one script per batch) and
    ``neardup.storage.cluster.ClusterStore`` (Redis Cluster, the three-phase protocol) implement it."""

    async def close(self) -> None: ...
    async def ping(self) -> None: ...
    async def now_ms(self, k: keys.CollectionKeys) -> int:
        """The collection's clock, in Unix ms: the time of the server that holds its state, kept from
        going back (``scripts/_clock.lua``): the one clock the protocol compares (insertion times,
        retention), whatever the service processes' clocks."""
        ...

    async def create_collection(
        self,
        name: str,
        params_json: bytes,
        gen: str,
        *,
        ttl_ms: int = 0,
        max_documents: int = 0,
        capacity: int = 0,
        bands: int = 0,
        passages: bool = False,
        sketch_bytes: int = 0,
        sites: bool = False,
    ) -> bytes | None: ...
    async def get_collection(self, name: str) -> tuple[bytes, int] | None: ...
    async def list_collections(self) -> list[tuple[bytes, int]]: ...
    async def drop_collection(self, name: str) -> bool: ...
    async def sweep_dropped(self) -> int: ...
    async def check(
        self, k: keys.CollectionKeys, mode: Mode, batch: CheckBatch, *, max_candidates: int
    ) -> CheckReply | NeedOldBands: ...
    async def lookup(self, k: keys.CollectionKeys, ids: Sequence[bytes]) -> list[StoredVersion | None]: ...
    async def delete(
        self, k: keys.CollectionKeys, doc_id: bytes, ordinal: int, old_bands: bytes
    ) -> bool | StoredVersion: ...
    async def due(self, k: keys.CollectionKeys, *, now_ms: int, limit: int) -> list[tuple[int, bytes]]: ...
    async def reclaim(self, k: keys.CollectionKeys, items: Sequence[tuple[int, bytes]]) -> int: ...
    async def postings(self, k: keys.CollectionKeys, fingerprint_keys: bytes) -> Postings: ...
    async def passage_sources(self, k: keys.CollectionKeys, ordinals: Sequence[int]) -> PassageReply: ...

    async def link(
        self, k: keys.CollectionKeys, pairs: Sequence[tuple[int, int]], settles: Sequence[int] = ()
    ) -> tuple[int, int]: ...
    async def link_journal(
        self, k: keys.CollectionKeys, *, limit: int, through: int = 0
    ) -> JournalEntries: ...
    async def site(self, k: keys.CollectionKeys, name: bytes) -> SiteCounts: ...
    async def site_pairs(self, k: keys.CollectionKeys, *, min_pages: int) -> list[SiteCounts]: ...


async def each(items: AsyncIterator[Any] | Iterator[Any]) -> AsyncIterator[Any]:
    """The items of a plain or an async iterator, as an async iterator."""
    if isinstance(items, Iterator):
        for item in items:
            yield item
    else:
        async for item in items:
            yield item


class RedisStore:
    """Wraps one ``redis.asyncio.Redis`` client (never subclassed). Build with :meth:`from_url`."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._scripts = Scripts()

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 5.0, max_connections: int = 64) -> RedisStore:
        """``redis://``, ``rediss://`` or ``unix://`` URL; ``timeout`` bounds connecting and each command.
        A command that fails on a broken connection is retried once (a restarted server leaves stale
        pooled connections); beyond that the caller gets StoreDown at once, not after long backoffs."""
        client = aioredis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            max_connections=max_connections,
            health_check_interval=30,
            retry=Retry(ConstantBackoff(0.05), 1),
        )
        return cls(client)

    @property
    def client(self) -> aioredis.Redis:
        return self._client

    async def close(self) -> None:
        await self._client.aclose()

    @asynccontextmanager
    async def _guard(self) -> AsyncIterator[None]:
        # One place turns every client or server failure into StoreDown: a down, slow, loading or
        # read-only server is a "try again later" for the caller, never an unhandled exception.
        try:
            yield
        except rx.ResponseError as error:
            raise permanent(error) or StoreDown(f"{type(error).__name__}: {error}") from error
        except (rx.RedisError, OSError, TimeoutError) as error:
            raise StoreDown(f"{type(error).__name__}: {error}") from error
        except RuntimeError as error:
            if not closed_transport(error):
                raise
            raise StoreDown(f"the connection closed under the client: {error}") from error

    async def _call(self, name: str, keys_: list[str], args: list[Any]) -> Any:
        async with self._guard():
            await self._scripts.ensure_loaded(self._client, self._head(_PROBE_KEYS))
            script = getattr(self._scripts, name)
            try:
                return await script(self._client, keys_, args)
            except rx.ResponseError as error:
                # The server's module refused a command since the scripts were chosen (an external
                # server restarted without it or with another build, a module swapped under us):
                # choose again on the next call (the probe then finds the module unusable and the Lua
                # steps are taken); this one is a 503. The module refuses before the script's first
                # write (check.lua's band_step_ready).
                if self._scripts.uses_module and module_refused(error):
                    self._scripts.forget()
                raise

    async def ping(self) -> None:
        async with self._guard():
            await self._client.ping()

    async def now_ms(self, k: keys.CollectionKeys) -> int:
        """The collection's clock (``scripts/_clock.lua``: the server's time, kept from going back)."""
        return int(await self._call("clock", [k.state], []))

    # --- collections ----------------------------------------------------------------------------------

    async def create_collection(
        self,
        name: str,
        params_json: bytes,
        gen: str,
        *,
        ttl_ms: int = 0,
        max_documents: int = 0,
        capacity: int = 0,
        bands: int = 0,
        passages: bool = False,
        sketch_bytes: int = 0,
        sites: bool = False,
    ) -> bytes | None:
        """Register; returns None if created, else the stored parameters JSON of that name.
        ``passages``: the collection keeps a passage index (neardup.domain.fingerprints).
        ``ttl_ms``/``max_documents`` (0: none) bound the collection's growth (see :meth:`due`);
        ``capacity`` documents of ``bands`` bands (0: none; the domain folds ``max_documents`` into
        it) size its tables up front. ``sketch_bytes``: the length of its stored sketches (0: varies),
        which sets how many share a hash (``keys.sig_group_size``). ``sites`` (a site_field) needs
        nothing here: check.lua counts a page where its document names a site."""
        shape = keys.initial_shape(capacity, bands)
        reply = await self._call(
            "create_collection",
            [keys.REGISTRY, keys.state(name)],
            [
                name,
                params_json,
                gen,
                ttl_ms,
                max_documents,
                *shape,
                "1" if passages else "0",
                keys.sig_group_size(sketch_bytes),
            ],
        )
        return None if reply[0] == b"created" else bytes(reply[1])

    async def get_collection(self, name: str) -> tuple[bytes, int] | None:
        """Parameters JSON and document count, or None."""
        async with self._guard():
            pipe = self._client.pipeline(transaction=False)
            pipe.hget(keys.REGISTRY, name)
            pipe.hget(keys.state(name), "docs")
            params, docs = await pipe.execute()
        return None if params is None else (bytes(params), int(docs or 0))

    async def list_collections(self) -> list[tuple[bytes, int]]:
        async with self._guard():
            registry: dict[Any, Any] = await self._client.hgetall(keys.REGISTRY)
            names = sorted(bytes(name) for name in registry)
            pipe = self._client.pipeline(transaction=False)
            for name in names:
                pipe.hget(keys.state(name.decode()), "docs")
            counts = await pipe.execute()
        return [(bytes(registry[name]), int(c or 0)) for name, c in zip(names, counts, strict=True)]

    async def drop_collection(self, name: str) -> bool:
        """Unregister and delete everything of the collection; False if it did not exist."""
        reply = await self._call("drop_collection", [keys.REGISTRY, keys.state(name), keys.DROPPED], [name])
        if reply[0] == b"absent":
            return False
        gen, seq, band_groups, id_groups = reply[1].decode(), int(reply[2]), int(reply[3]), int(reply[4])
        passage_groups = int(reply[5]) if len(reply) > 5 else 0
        sites = int(reply[6]) if len(reply) > 6 else 0
        if gen:
            async with self._guard():
                await self._unlink_generation(
                    keys.CollectionKeys(name, gen), seq, band_groups, id_groups, passage_groups, sites
                )
                await self._client.hdel(keys.DROPPED, keys.dropped_entry(name, gen))
        return True

    async def sweep_dropped(self, *, min_age_ms: int = DROP_SWEEP_AGE_MS) -> int:
        """Finish dropped generations whose data keys were not all unlinked (the dropping process died,
        or the store went away, half way): unlink what is left and forget them. Entries younger than
        ``min_age_ms`` are left to the drop that is still unlinking them. Returns how many it finished."""
        async with self._guard():
            entries: dict[Any, Any] = await self._client.hgetall(keys.DROPPED)
            seconds, micros = await self._client.time()
            now = int(seconds) * 1000 + int(micros) // 1000
            done = 0
            for entry, shape in entries.items():
                name, gen = entry.decode().split(":", 1)
                # a collection with sites adds the site ids it issued (drop_collection.lua)
                seq, band_groups, id_groups, ms, *more = map(int, shape.split(b":"))
                if now - ms < min_age_ms:
                    continue
                if await self._client.hget(keys.state(name), "gen") != gen.encode():
                    k = keys.CollectionKeys(name, gen)
                    # a collection with sites adds the site ids it issued (drop_collection.lua)
                    await self._unlink_generation(k, seq, band_groups, id_groups, 0, more[0] if more else 0)
                    # The passage index and blobs (collections with passages): the entry does not hold
                    # their shape, so they are found by a scan (sweeps are rare: a drop that died).
                    async for key in self._client.scan_iter(match=k.passage_pattern, count=_UNLINK_CHUNK):
                        await self._client.unlink(key)
                await self._client.hdel(keys.DROPPED, entry)
                done += 1
        return done

    async def _unlink_generation(
        self,
        k: keys.CollectionKeys,
        seq: int,
        band_groups: int,
        id_groups: int,
        passage_groups: int = 0,
        sites: int = 0,
    ) -> None:
        """Unlink every data key of a dropped generation, in chunks: by their names when there are fewer
        names than keys on the server, else by scanning for the generation's prefix (a table sized for
        a large capacity hint has far more names than keys)."""
        names: AsyncIterator[Any] | Iterator[str]
        if k.named_cost(seq, band_groups, id_groups, passage_groups, sites) > await self._client.dbsize():
            names = self._client.scan_iter(match=k.data_pattern, count=_UNLINK_CHUNK)
        else:
            names = k.data_keys(seq, band_groups, id_groups, passage_groups, sites)
        chunk: list[Any] = []
        async for key in each(names):
            chunk.append(key)
            if len(chunk) >= _UNLINK_CHUNK:
                await self._client.unlink(*chunk)
                chunk = []
        if chunk:
            await self._client.unlink(*chunk)

    # --- documents ------------------------------------------------------------------------------------

    @staticmethod
    def _head(k: keys.CollectionKeys) -> list[Any]:
        return [
            k.gen, k.band_prefix, k.id_prefix, k.sig_prefix, k.doc_prefix,
            keys.BAND_GROUP_TARGET, keys.ID_GROUP_TARGET, keys.ORDINAL_WIDTH, keys.DOC_GROUP,
        ]  # fmt: skip

    @staticmethod
    def _status(reply: Any) -> None:
        status = reply[0]
        if status == b"nocollection":
            raise CollectionMissing()
        if status == b"stale":
            raise GenerationChanged()

    async def check(
        self, k: keys.CollectionKeys, mode: Mode, batch: CheckBatch, *, max_candidates: int
    ) -> CheckReply | NeedOldBands:
        """One batch through check.lua (one round trip)."""
        b = batch
        if mode == "restore":  # one script per batch: a stored copy is never half written here
            mode = "read"
        settle = settle_text(b.settle) if b.settle is not None and mode == "insert" else b""
        args: list[Any] = [
            *self._head(k), mode, len(b), b.bands, max_candidates, b.band_keys, b.signatures, b.empties,
            keys.BUCKET_CAP, settle,
        ]  # fmt: skip
        for i in range(len(b)):
            args += (b.ids[i], b.records[i], b.expected[i], b.old_bands[i], b.sites[i])
        if b.signature_offsets is not None:  # sketches of different sizes: where each one starts
            args.append(struct.pack(f"<{len(b.signature_offsets)}I", *b.signature_offsets))
        elif b.passages:
            args.append(b"")  # no offsets: the passage blobs follow
        args += b.passages
        reply = await self._call("check", [k.state], args)
        self._status(reply)
        if reply[0] == b"replace":
            flat = reply[1]
            stored = {
                int(flat[j]) - 1: (int(flat[j + 1]), bytes(flat[j + 2])) for j in range(0, len(flat), 3)
            }
            return NeedOldBands(stored)
        flat = reply[3]
        fetched = {int(flat[j]): (bytes(flat[j + 1]), bytes(flat[j + 2])) for j in range(0, len(flat), 3)}
        ordinals, candidates = [int(o) for o in reply[1]], [[int(c) for c in cs] for cs in reply[2]]
        return CheckReply(ordinals, candidates, fetched, now_ms=int(reply[4]), journal=int(reply[5]))

    async def lookup(self, k: keys.CollectionKeys, ids: Sequence[bytes]) -> list[StoredVersion | None]:
        reply = await self._call("lookup", [k.state], [*self._head(k), *ids])
        self._status(reply)
        flat = reply[1]
        out: list[StoredVersion | None] = []
        for j in range(0, len(flat), 3):
            ordinal = int(flat[j])
            out.append(StoredVersion(ordinal, bytes(flat[j + 1]), bytes(flat[j + 2])) if ordinal else None)
        return out

    async def delete(
        self, k: keys.CollectionKeys, doc_id: bytes, ordinal: int, old_bands: bytes
    ) -> bool | StoredVersion:
        """Delete the version ``ordinal`` of ``doc_id``: True if deleted, False if no such id, or the
        version it names now (ordinal and signature) if it was replaced meanwhile."""
        reply = await self._call("delete", [k.state], [*self._head(k), doc_id, ordinal, old_bands])
        self._status(reply)
        if reply[0] == b"replace":
            return StoredVersion(int(reply[1]), bytes(reply[2]), b"")
        return bool(reply[1])

    # --- bounded growth -------------------------------------------------------------------------------

    async def due(self, k: keys.CollectionKeys, *, now_ms: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` of the oldest expired or evicted documents: (ordinal, signature)."""
        reply = await self._call("due", [k.state], [*self._head(k), now_ms, limit])
        self._status(reply)
        flat = reply[1]
        return [(int(flat[j]), bytes(flat[j + 1])) for j in range(0, len(flat), 2)]

    async def reclaim(self, k: keys.CollectionKeys, items: Sequence[tuple[int, bytes]]) -> int:
        """Remove these (ordinal, band keys) documents everywhere; returns how many were still there."""
        args: list[Any] = [*self._head(k)]
        for ordinal, bands in items:
            args += (ordinal, bands)
        reply = await self._call("reclaim", [k.state], args)
        self._status(reply)
        return int(reply[1])

    # --- passages -------------------------------------------------------------------------------------

    async def postings(self, k: keys.CollectionKeys, fingerprint_keys: bytes) -> Postings:
        """The postings of these fingerprint keys (4 bytes each: fingerprints.wanted; at most
        keys.PASSAGE_KEYS_PER_CALL): one read-only script call."""
        reply = await self._call("passages", [k.state], [*self._head(k), fingerprint_keys])
        self._status(reply)
        n = len(fingerprint_keys) // 4
        return decode_postings(bytes(reply[1]), n, int(reply[2]), int(reply[3]))

    async def passage_sources(self, k: keys.CollectionKeys, ordinals: Sequence[int]) -> PassageReply:
        """The passage blobs and records of these stored documents (b"" where gone): one read-only
        script call."""
        width = keys.ORDINAL_WIDTH
        wanted = b"".join(o.to_bytes(width, "big") for o in ordinals)
        reply = await self._call("passage_sources", [k.state], [*self._head(k), wanted])
        self._status(reply)
        flat = reply[1]
        sources = [(int(flat[j]), bytes(flat[j + 1]), bytes(flat[j + 2])) for j in range(0, len(flat), 3)]
        return PassageReply(sources, int(reply[2]))

    # --- sites ----------------------------------------------------------------------------------------

    async def link(
        self, k: keys.CollectionKeys, pairs: Sequence[tuple[int, int]], settles: Sequence[int] = ()
    ) -> tuple[int, int]:
        """Record these (checked document, matched document) ordinal pairs as edges between sites
        and delete the link journal fields ``settles`` (link.lua, one call): returns (edges added,
        edges refused by a bound)."""
        reply = await self._call(
            "link", [k.state],
            [*self._head(k), keys.SITE_PARTNERS, keys.SITE_OTHERS, _pairs_blob(pairs), *settles],
        )  # fmt: skip
        self._status(reply)
        return int(reply[1]), int(reply[2])

    async def link_journal(self, k: keys.CollectionKeys, *, limit: int, through: int = 0) -> JournalEntries:
        """At most ``limit`` link journal entries whose field is at most ``through`` (0: the collection's
        last ordinal now, i.e. the entries written before this call), with every sketch and record they
        name (journal.lua, one read-only call)."""
        reply = await self._call("journal", [k.state], [*self._head(k), limit, through])
        self._status(reply)
        width, flat = int(reply[2]), reply[3]
        entries = [(int(flat[j]), journal_docs(bytes(flat[j + 1]), width)) for j in range(0, len(flat), 2)]
        found = reply[4]
        return JournalEntries(
            int(reply[1]), entries,
            {int(found[j]): (bytes(found[j + 1]), bytes(found[j + 2])) for j in range(0, len(found), 3)},
            int(reply[5]),
        )  # fmt: skip

    async def site(self, k: keys.CollectionKeys, name: bytes) -> SiteCounts:
        """One site's counts, read in one script call (pages 0: no such site)."""
        reply = await self._call("site", [k.state], [*self._head(k), name])
        self._status(reply)
        return site_counts(name, reply)

    async def site_pairs(self, k: keys.CollectionKeys, *, min_pages: int) -> list[SiteCounts]:
        """Every site with at least ``min_pages`` pages and its other sites (see ``read_site_pairs``)."""
        async with self._guard():
            return await read_site_pairs(self._client, k, k.site_pages, k.site_ids, k.shared, min_pages)


async def read_site_pairs(
    client: Any,
    k: keys.CollectionKeys,
    pages_key: str,
    names_key: str,
    shared: Callable[[str], str],
    min_pages: int,
) -> list[SiteCounts]:
    """Every site with at least ``min_pages`` pages and its other sites (of any size: the caller
    filters), from the site keys named here (one server's, or a cluster's on the state slot). Reads the
    page counts and names (one round trip), then the shared counts of those sites, pipelined
    ``_SITE_CHUNK`` at a time: O(sites + pairs) work and memory, no long script blocking the server;
    not one snapshot (writes may land between the chunks)."""
    pipe = client.pipeline(transaction=False)
    pipe.hget(k.state, "gen")
    pipe.hgetall(pages_key)
    pipe.hgetall(names_key)
    gen, pages_raw, names_raw = await pipe.execute()
    if gen is None:
        raise CollectionMissing()
    if bytes(gen).decode() != k.gen:
        raise GenerationChanged()
    pages = {bytes(i): int(n) for i, n in pages_raw.items()}
    names = {bytes(i): bytes(n) for i, n in names_raw.items()}
    chosen = [i for i, n in pages.items() if n >= min_pages and i in names]
    out: list[SiteCounts] = []
    for start in range(0, len(chosen), _SITE_CHUNK):
        chunk = chosen[start : start + _SITE_CHUNK]
        pipe = client.pipeline(transaction=False)
        for site in chunk:
            pipe.get(shared(site.decode()))
        for site, row in zip(chunk, await pipe.execute(), strict=True):
            others = [(names[o], pages[o], n, 0) for o, n in _shared_counts(row) if o in names and o in pages]
            out.append(SiteCounts(names[site], pages[site], others))
    return out
