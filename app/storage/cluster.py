"""The store on a Redis Cluster: same interface as :class:`neardup.storage.store.RedisStore`, over redis-py's
async ``RedisCluster``. A collection's band, id, signature and record groups have no hash tag, so
they spread over every shard; only its state (sequence, stamps, pending ordinals) shares one slot.

A check cannot be one atomic script here, so it runs the protocol of docs/design.md ("Cluster: append,
stamp, read, verify" and "Why first seen wins") in round trips, each pipelined or one script call per
node:

0. look up the ids (a replaced version's band keys must come from the caller, as on one server);
1. reserve ordinals (state slot; they are *pending*);
2. write: append the ordinals to their band buckets, store signatures and records, remove replaced
   versions, swap the id table to the new ordinals (compare-and-set), one script call per node;
3. stamp (state slot): stamps only grow, and a pending ordinal is later than any stamp issued;
4. read the buckets; 5. the candidates' stamps (state slot) and signatures/records; 6. verify each
   candidate against the id table (its id must still name it), dropping dead entries lazily.

Why first seen wins: if A is stamped before B, A's appends finished before A's stamp, which came
before B's stamp, which came before B's reads: B sees A, stamped and smaller. A sees B pending or
with a larger stamp, and ignores it. A check that dies half-way leaves an ordinal that is pending
(ignored by everyone) until the stamp script stamps it as abandoned; it is then live only if its id
still names it and its record is there, exactly as if the check had finished, and a retry of the
same id replaces it (the id swap makes the old ordinal dead; its entries are removed).
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
from binascii import crc_hqx
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from redis import exceptions as rx
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.backoff import ConstantBackoff
from redis.retry import Retry

from neardup.storage import keys, records
from neardup.storage.errors import CollectionMissing, GenerationChanged, StoreDown
from neardup.storage.scripts import Script
from neardup.storage.store import CheckBatch, CheckReply, Mode, NeedOldBands, StoredVersion, each

#: A pending ordinal older than this belongs to a check that died between append and stamp. It must
#: exceed the longest a live check can take (a store call is bounded by 8 store timeouts, see _guard;
#: each client passes max(ABANDON_MS, 20 x its timeout)).
ABANDON_MS = 60_000
#: Keys per per-node unlink call when a collection is dropped.
_UNLINK_CHUNK = 5000
#: Keys whose node is remembered (group keys repeat from batch to batch).
_NODE_CACHE = 1 << 17
#: Errors after which the slot map may be stale: refresh it and try once more.
_RESHARD = (rx.MovedError, rx.AskError, rx.TryAgainError, rx.ClusterDownError, rx.ClusterError)


def _deadline(seconds: float) -> AbstractAsyncContextManager[Any]:
    # asyncio.timeout exists from Python 3.11; on 3.10 the per-command socket timeouts still apply.
    timeout = getattr(asyncio, "timeout", None)
    return timeout(seconds) if timeout is not None else nullcontext()


@lru_cache(maxsize=1 << 16)
def _id_hash(doc_id: bytes) -> int:
    # The same as _common.lua's id_hash, so both stores agree on where an id lives.
    return int(hashlib.sha1(doc_id).hexdigest()[:8], 16)


def _bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


_GROUP = struct.Struct(">I")


def _o4(ordinal: int) -> bytes:
    return struct.pack(">I", ordinal)


@dataclass
class _Ops:
    """One node's share of a write (see cluster_ops.lua)."""

    band_prefix: str = ""
    appends: bytearray = field(default_factory=bytearray)  # 16-byte records, see cluster_ops.lua
    removals: bytearray = field(default_factory=bytearray)
    sets: list[bytes | str] = field(default_factory=list)
    deletes: list[bytes | str] = field(default_factory=list)
    swaps: list[bytes | str] = field(default_factory=list)
    swap_index: list[int] = field(default_factory=list)
    unlinks: list[bytes | str] = field(default_factory=list)

    def args(self) -> list[bytes | str | int]:
        out: list[bytes | str | int] = [
            self.band_prefix, bytes(self.appends), bytes(self.removals), keys.BUCKET_CAP
        ]  # fmt: skip
        for values, width in ((self.sets, 3), (self.deletes, 2), (self.swaps, 4), (self.unlinks, 1)):
            out.append(len(values) // width)
            out += values
        return out


@dataclass(frozen=True)
class _Layout:
    band_groups: int
    id_groups: int


class _Groups:
    """Key names of one collection generation on a cluster (fixed group counts, see keys.py)."""

    def __init__(self, k: keys.CollectionKeys, layout: _Layout) -> None:
        self.k = k
        self.band_mask = layout.band_groups - 1
        self.id_mask = layout.id_groups - 1

    def band(self, field_: bytes) -> str:
        return f"{self.k.band_prefix}{int.from_bytes(field_[:4], 'little') & self.band_mask}"

    def band_record(self, field_: bytes) -> tuple[str, bytes]:
        """The bucket's group key and its packed (group, band key) record prefix."""
        group = int.from_bytes(field_[:4], "little") & self.band_mask
        return f"{self.k.band_prefix}{group}", _GROUP.pack(group) + field_

    def add_band(self, ops_for: Any, field_: bytes, o4: bytes, *, remove: bool = False) -> None:
        key, record = self.band_record(field_)
        ops = ops_for(key)
        ops.band_prefix = self.k.band_prefix
        (ops.removals if remove else ops.appends).extend(record + o4)

    def ids(self, doc_id: bytes) -> str:
        return f"{self.k.id_prefix}{_id_hash(doc_id) & self.id_mask}"

    def sig(self, ordinal: int) -> tuple[str, str]:
        return f"{self.k.sig_prefix}{ordinal // keys.SIG_GROUP}", str(ordinal % keys.SIG_GROUP)

    def doc(self, ordinal: int) -> tuple[str, str]:
        return f"{self.k.doc_prefix}{ordinal // keys.DOC_GROUP}", str(ordinal % keys.DOC_GROUP)


class ClusterStore:
    """Wraps one ``redis.asyncio.cluster.RedisCluster`` (never subclassed). Build with :meth:`from_url`."""

    def __init__(self, client: RedisCluster, *, timeout: float = 5.0) -> None:
        self._client = client
        self._timeout = timeout
        self._layouts: dict[tuple[str, str], _Layout] = {}
        self._init_lock = asyncio.Lock()
        #: key -> node that serves its slot, until the slot map is learned again
        self._nodes: dict[str, ClusterNode] = {}
        self._scripts = {
            name: Script(name)
            for name in (
                "cluster_init", "cluster_drop", "cluster_reserve", "cluster_stamp", "cluster_status",
                "cluster_advance", "cluster_ops", "cluster_get", "cluster_bands", "cluster_unregister",
            )
        }  # fmt: skip

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 5.0, max_connections: int = 64) -> ClusterStore:
        """URL of any node of the cluster (``redis://`` or ``rediss://``, password as usual); the
        client discovers the others. More seed nodes may follow, comma-separated, as ``host:port``
        (``redis://:pw@node1:7000,node2:7000,node3:7000``): any one that answers is enough.
        ``timeout`` bounds connecting and each command; a whole store
        call is bounded by a few times it, then the caller gets StoreDown."""
        first, *others = url.split(",")
        seeds = [_seed(other) for other in others if other.strip()]
        client = RedisCluster.from_url(
            first,
            startup_nodes=seeds or None,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            max_connections=max_connections,
            retry=Retry(ConstantBackoff(0.05), 1),
        )
        return cls(client, timeout=timeout)

    @property
    def client(self) -> RedisCluster:
        return self._client

    async def close(self) -> None:
        await self._client.aclose()

    @asynccontextmanager
    async def _guard(self, round_trips: int = 8) -> AsyncIterator[None]:
        # Every failure (node down, timeout, resharding that did not settle) leaves as StoreDown; the
        # whole call has a deadline so a hung node turns into a prompt 503, not a pile of requests.
        try:
            async with _deadline(self._timeout * round_trips):
                await self._ensure_initialized()
                yield
        except (rx.RedisError, rx.RedisClusterException, OSError, TimeoutError) as error:
            raise StoreDown(f"{type(error).__name__}: {error}") from error

    # --- plumbing -------------------------------------------------------------------------------------

    def _node(self, key: str) -> ClusterNode:
        cached = self._nodes.get(key)
        if cached is not None:
            return cached
        # Data keys carry no hash tag, so their slot is CRC16(key) mod 16384 (binascii's CRC-CCITT
        # XMODEM is the cluster's CRC16), much cheaper than the client's general path.
        slot = self._client.keyslot(key) if "{" in key else crc_hqx(key.encode(), 0) & 16383
        node = self._client.nodes_manager.get_node_from_slot(slot)
        if node is None:
            raise rx.ClusterDownError(f"no node serves the slot of {key!r}")
        if len(self._nodes) > _NODE_CACHE:
            self._nodes.clear()
        self._nodes[key] = node
        return node

    async def _eval(
        self, name: str, keys_: list[str], args: Sequence[Any], node: ClusterNode | None = None
    ) -> Any:
        """One script call: routed by its keys (one slot), or on ``node`` when its keys are in ARGV."""
        script = self._scripts[name]
        target = node if node is not None else self._node(keys_[0])
        try:
            return await self._client.execute_command(
                "EVALSHA", script.sha, len(keys_), *keys_, *args, target_nodes=target
            )
        except rx.NoScriptError:
            await self._client.execute_command("SCRIPT", "LOAD", script.source, target_nodes=target)
            return await self._client.execute_command(
                "EVALSHA", script.sha, len(keys_), *keys_, *args, target_nodes=target
            )

    async def _state_call(self, name: str, k: keys.CollectionKeys | str, args: Sequence[Any]) -> Any:
        collection = k if isinstance(k, str) else k.collection
        slot_keys = [keys.state(collection), keys.pending(collection), keys.late(collection)]
        return await self._retrying(lambda: self._eval(name, slot_keys, args))

    async def _retrying(self, call: Any) -> Any:
        try:
            return await call()
        except (*_RESHARD, rx.ConnectionError):
            pass
        except rx.ResponseError as error:
            if "non local key" not in str(error) and "MOVED" not in str(error):
                raise
        # The slot map changed (or a node came back): learn it again and try once more. Every write
        # here is idempotent (appends skip an ordinal already there; swaps accept their own result).
        async with self._init_lock:
            await self._client.nodes_manager.initialize()
            self._nodes.clear()
        return await call()

    def _abandon_ms(self) -> int:
        return max(ABANDON_MS, int(self._timeout * 20_000))

    async def _ensure_initialized(self) -> None:
        # redis-py initializes the cluster client on its first command; many first commands at once
        # (a service starting under load) each start an initialization and break each other's
        # connections. One at a time, here.
        if self._client._initialize:
            async with self._init_lock:
                if self._client._initialize:
                    await self._client.initialize()

    async def _ops(self, per_node: dict[str, tuple[ClusterNode, _Ops]]) -> dict[str, Any]:
        names = list(per_node)
        replies = await asyncio.gather(
            *(self._eval("cluster_ops", [], per_node[n][1].args(), per_node[n][0]) for n in names)
        )
        return dict(zip(names, replies, strict=True))

    def _group(self, ops: dict[str, tuple[ClusterNode, _Ops]], key: str) -> _Ops:
        node = self._node(key)
        entry = ops.get(node.name)
        if entry is None:
            entry = ops[node.name] = (node, _Ops())
        return entry[1]

    async def _get(self, pairs: Sequence[tuple[str, bytes | str]]) -> list[bytes]:
        """HGET of every (key, field), one script call per node, values in order (b'' if absent)."""
        if not pairs:
            return []

        async def attempt() -> list[bytes]:
            by_node: dict[str, tuple[ClusterNode, list[int]]] = {}
            for i, (key, _) in enumerate(pairs):
                node = self._node(key)
                by_node.setdefault(node.name, (node, []))[1].append(i)
            # (node names are host:port strings)
            names = list(by_node)

            def flat(idx: list[int]) -> list[bytes | str]:
                out: list[bytes | str] = []
                for i in idx:
                    out += pairs[i]
                return out

            replies = await asyncio.gather(
                *(self._eval("cluster_get", [], flat(by_node[n][1]), by_node[n][0]) for n in names)
            )
            values: list[bytes] = [b""] * len(pairs)
            for name, reply in zip(names, replies, strict=True):
                for i, value in zip(by_node[name][1], reply, strict=True):
                    values[i] = bytes(value)
            return values

        result: list[bytes] = await self._retrying(attempt)
        return result

    async def _get_bands(self, g: _Groups, band_fields: Sequence[bytes]) -> list[bytes]:
        """The buckets of these band keys, one packed call per node (see cluster_bands.lua)."""
        if not band_fields:
            return []

        async def attempt() -> list[bytes]:
            by_node: dict[str, tuple[ClusterNode, list[int], bytearray]] = {}
            for i, f in enumerate(band_fields):
                key, record = g.band_record(f)
                node = self._node(key)
                entry = by_node.get(node.name)
                if entry is None:
                    entry = by_node[node.name] = (node, [], bytearray())
                entry[1].append(i)
                entry[2].extend(record)
            names = list(by_node)
            replies = await asyncio.gather(
                *(
                    self._eval("cluster_bands", [], [g.k.band_prefix, bytes(by_node[n][2])], by_node[n][0])
                    for n in names
                )
            )
            values: list[bytes] = [b""] * len(band_fields)
            for name, reply in zip(names, replies, strict=True):
                for i, value in zip(by_node[name][1], reply, strict=True):
                    values[i] = value
            return values

        result: list[bytes] = await self._retrying(attempt)
        return result

    async def _write(self, build: Any) -> list[tuple[int, Any]]:
        """Build the per-node ops (again after a slot-map refresh) and run them; returns the swap
        answers as (swap_index tag, answer) pairs."""

        async def attempt() -> list[tuple[int, Any]]:
            per_node: dict[str, tuple[ClusterNode, _Ops]] = {}
            build(lambda key: self._group(per_node, key))
            results = await self._ops(per_node)
            return [
                (tag, answer)
                for name, (_, ops) in per_node.items()
                for tag, answer in zip(ops.swap_index, results[name][1], strict=True)
            ]

        result: list[tuple[int, Any]] = await self._retrying(attempt)
        return result

    async def _layout(self, k: keys.CollectionKeys) -> _Layout:
        cached = self._layouts.get((k.collection, k.gen))
        if cached is not None:
            return cached
        gen, band_groups, id_groups = await self._retrying(
            lambda: self._client.hmget(k.state, ["gen", "bG", "iG"])
        )
        if gen is None:
            raise CollectionMissing()
        if _bytes(gen).decode() != k.gen:
            raise GenerationChanged()
        layout = _Layout(int(band_groups), int(id_groups))
        self._layouts[(k.collection, k.gen)] = layout
        return layout

    @staticmethod
    def _status(reply: Any) -> None:
        status = reply[0] if isinstance(reply, list) and reply else reply
        if status == b"nocollection":
            raise CollectionMissing()
        if status == b"stale":
            raise GenerationChanged()

    async def ping(self) -> None:
        async with self._guard(2):
            await self._client.ping(target_nodes=RedisCluster.PRIMARIES)

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
    ) -> bytes | None:
        """The state first, atomically on the collection's slot (cluster_init.lua: created, or what
        exists), then the registry entry, written again by any later creation that finds it missing
        (a creation that died between the two)."""
        async with self._guard():
            band_groups, id_groups = keys.cluster_groups(capacity, bands)
            reply = await self._state_call(
                "cluster_init", name, [gen, ttl_ms, max_documents, band_groups, id_groups, params_json]
            )
            if reply[0] == b"created":
                await self._client.hset(keys.REGISTRY, name, params_json)
                return None
            existing = _bytes(reply[2]) or _bytes(await self._client.hget(keys.REGISTRY, name) or b"")
            if existing:
                await self._client.hsetnx(keys.REGISTRY, name, existing)
                return existing
            raise StoreDown("the collection's state has no parameters and no registry entry")

    async def get_collection(self, name: str) -> tuple[bytes, int] | None:
        async with self._guard():
            params, docs = await asyncio.gather(
                self._client.hget(keys.REGISTRY, name), self._client.hget(keys.state(name), "docs")
            )
        return None if params is None else (_bytes(params), max(0, int(docs or 0)))

    async def list_collections(self) -> list[tuple[bytes, int]]:
        async with self._guard():
            registry: dict[Any, Any] = await self._client.hgetall(keys.REGISTRY)
            names = sorted(_bytes(name) for name in registry)
            counts = await asyncio.gather(
                *(self._client.hget(keys.state(name.decode()), "docs") for name in names)
            )
        return [(_bytes(registry[name]), max(0, int(c or 0))) for name, c in zip(names, counts, strict=True)]

    async def drop_collection(self, name: str) -> bool:
        """State first (checks in flight then see the collection missing), then the registry entry of
        that generation (cluster_unregister.lua: a creation racing the drop keeps its own), then the
        data keys, named from the state's shape."""
        async with self._guard(30):
            shape = await self._state_call("cluster_drop", name, [])
            gen = _bytes(shape[0]).decode() if shape else ""
            entry = _bytes(shape[4]) if shape else b""
            unregistered = await self._retrying(
                lambda: self._eval("cluster_unregister", [keys.REGISTRY], [name, entry])
            )
            if not shape and not unregistered:
                return False
            if shape and int(shape[1]) > 0:  # seq 0: nothing was ever written
                seq, band_groups, id_groups = map(int, shape[1:4])
                self._layouts.pop((name, gen), None)
                await self._unlink_generation(keys.CollectionKeys(name, gen), seq, band_groups, id_groups)
        return True

    async def _unlink_generation(
        self, k: keys.CollectionKeys, seq: int, band_groups: int, id_groups: int
    ) -> None:
        """As RedisStore's: by name, or by a scan of every node when there are fewer keys than names."""
        names: AsyncIterator[Any] | Iterator[str]
        if k.named_cost(seq, band_groups, id_groups) > int(await self._client.dbsize()):
            names = self._client.scan_iter(match=k.data_pattern, count=_UNLINK_CHUNK)
        else:
            names = k.data_keys(seq, band_groups, id_groups)
        chunk: list[str] = []

        def build(ops_for: Any) -> None:
            for key in chunk:
                ops_for(key).unlinks.append(key)

        async for key in each(names):
            chunk.append(key.decode() if isinstance(key, bytes) else key)
            if len(chunk) >= _UNLINK_CHUNK:
                await self._write(build)
                chunk = []
        if chunk:
            await self._write(build)

    # --- documents ------------------------------------------------------------------------------------

    async def check(
        self, k: keys.CollectionKeys, mode: Mode, batch: CheckBatch, *, max_candidates: int
    ) -> CheckReply | NeedOldBands:
        """The same contract as RedisStore.check, in the round trips of the module docstring."""
        async with self._guard():
            return await self._check(k, mode, batch, max_candidates)

    async def _check(
        self, k: keys.CollectionKeys, mode: Mode, batch: CheckBatch, max_candidates: int
    ) -> CheckReply | NeedOldBands:
        bands, band_keys, signatures, empties = batch.bands, batch.band_keys, batch.signatures, batch.empties
        ids, packed, expected, old_bands = batch.ids, batch.records, batch.expected, batch.old_bands
        n = len(ids)
        if n == 0:
            return CheckReply([], [], {})
        layout = await self._layout(k)
        g = _Groups(k, layout)
        sig_size = len(signatures) // n
        fields = [
            [] if empties[i : i + 1] == b"1" else _split(band_keys[i * bands * 8 : (i + 1) * bands * 8])
            for i in range(n)
        ]
        if mode == "restore":
            await self._restore_bands(g, fields, expected)
        if mode in ("read", "restore"):
            return await self._read(k, g, fields, [0] * n, {}, [], max_candidates, set())

        # 0. the stored version of each id (first occurrence in the batch)
        first: dict[bytes, int] = {}
        for i, doc_id in enumerate(ids):
            first.setdefault(doc_id, i)
        firsts = sorted(first.values())
        current = await self._get([(g.ids(ids[i]), ids[i]) for i in firsts])
        stale = [(i, cur) for i, cur in zip(firsts, current, strict=True) if cur and cur != expected[i]]
        if stale:
            sigs = await self._get([g.sig(int(cur)) for _, cur in stale])
            return NeedOldBands({i: (int(cur), sig) for (i, cur), sig in zip(stale, sigs, strict=True)})
        stored = dict(zip(firsts, current, strict=True))

        # 1. reserve
        reply = await self._state_call("cluster_reserve", k, [k.gen, n])
        self._status(reply)
        ordinal0 = int(reply[1])
        ordinals = list(range(ordinal0, ordinal0 + n))

        # 2. write
        new_docs = 0
        forget: list[int] = []
        swaps: list[tuple[int, str, bytes, bytes, bytes]] = []  # (i, id key, id, expected, new)
        last_of: dict[bytes, int] = {}
        removed: list[tuple[int, list[bytes]]] = []  # (old ordinal, its band fields)
        for i, doc_id in enumerate(ids):
            previous = last_of.get(doc_id)
            if previous is not None:
                removed.append((ordinals[previous], fields[previous]))
                before = str(ordinals[previous]).encode()
            else:
                cur = stored.get(i, b"")
                if cur:
                    removed.append((int(cur), _split(old_bands[i])))
                    forget.append(int(cur))
                else:
                    new_docs += 1
                before = cur
            last_of[doc_id] = i
            swaps.append((i, g.ids(doc_id), doc_id, before, str(ordinals[i]).encode()))

        def build(ops_for: Any) -> None:
            for i in range(n):
                o4 = _o4(ordinals[i])
                for f in fields[i]:
                    g.add_band(ops_for, f, o4)
                sig_key, sig_slot = g.sig(ordinals[i])
                ops_for(sig_key).sets.extend(
                    (sig_key, sig_slot, signatures[i * sig_size : (i + 1) * sig_size])
                )
                doc_key, doc_slot = g.doc(ordinals[i])
                ops_for(doc_key).sets.extend((doc_key, doc_slot, packed[i]))
            for old, old_fields in removed:
                self._removal(g, ops_for, old, old_fields)
            for i, id_key, doc_id, before, new in swaps:
                ops = ops_for(id_key)
                ops.swaps.extend((id_key, doc_id, before, new))
                ops.swap_index.append(i)

        failed = sorted(i for i, answer in await self._write(build) if answer not in (1, 2))
        if failed:
            # Another client changed these ids meanwhile: undo our versions of them, then the caller
            # looks again (the ids we did swap are replaced on that next call, like any stored id).
            await self._write(
                lambda ops_for: [self._removal(g, ops_for, ordinals[i], fields[i]) for i in failed]
            )
            current = await self._get([(g.ids(ids[i]), ids[i]) for i in failed])
            named = [(i, int(c)) for i, c in zip(failed, current, strict=True) if c]
            sigs = await self._get([g.sig(o) for _, o in named])
            need = {i: (0, b"") for i in failed}
            need.update({i: (o, s) for (i, o), s in zip(named, sigs, strict=True)})
            return NeedOldBands(need)

        # 3. stamp
        reply = await self._state_call(
            "cluster_stamp",
            k,
            [k.gen, ordinal0, n, 0, self._abandon_ms(), new_docs, keys.STAMP_SCALE, *forget],
        )
        self._status(reply)
        own_stamps = {o: int(s) for o, s in zip(ordinals, reply[1], strict=True)}
        if mode == "put":
            return CheckReply(ordinals, [[] for _ in range(n)], {}, own_stamps)
        # the batch's own versions that are still current (the last occurrence of each id)
        live_own = {ordinals[i] for i in last_of.values()}
        return await self._read(k, g, fields, ordinals, own_stamps, ordinals, max_candidates, live_own)

    @staticmethod
    def _removal(g: _Groups, ops_for: Any, ordinal: int, band_fields: list[bytes]) -> None:
        o4 = _o4(ordinal)
        for f in band_fields:
            g.add_band(ops_for, f, o4, remove=True)
        for key, slot in (g.sig(ordinal), g.doc(ordinal)):
            ops_for(key).deletes.extend((key, slot))

    async def _restore_bands(self, g: _Groups, fields: list[list[bytes]], expected: list[bytes]) -> None:
        """Append each stored copy's ordinal (``expected``) to every bucket of its band keys, where it
        is missing: a check that died between its appends leaves a copy in some buckets only, and a
        retry that keeps that copy (unchanged) completes it here. Idempotent; full buckets stay full. If
        the copy was replaced meanwhile, these entries are dead and removed when met, as any other."""
        wanted = [(int(o), f) for o, f in zip(expected, fields, strict=True) if o and f]
        if not wanted:
            return

        def build(ops_for: Any) -> None:
            for ordinal, doc_fields in wanted:
                for f in doc_fields:
                    g.add_band(ops_for, f, _o4(ordinal))

        await self._write(build)

    async def _read(
        self,
        k: keys.CollectionKeys,
        g: _Groups,
        fields: list[list[bytes]],
        ordinals: list[int],
        own_stamps: dict[int, int],
        batch: list[int],
        max_candidates: int,
        live_own: set[int],
    ) -> CheckReply:
        n = len(fields)
        # 4. the buckets
        values = await self._get_bands(g, [f for i in range(n) for f in fields[i]])
        # candidate -> how many of the document's buckets hold it, per document
        found: list[dict[int, int]] = [{} for _ in range(n)]
        where: dict[int, list[bytes]] = {}  # candidate -> band fields it was found in (for cleanup)
        pos = 0
        for i in range(n):
            shared = found[i]
            for f in fields[i]:
                value = values[pos]
                pos += 1
                if value:
                    for c in np.frombuffer(value, dtype=">u4").tolist():
                        if c != ordinals[i]:
                            shared[c] = shared.get(c, 0) + 1
                            where.setdefault(c, []).append(f)
        every = sorted(where)
        if not every:
            return CheckReply(ordinals, [[] for _ in range(n)], {}, own_stamps)

        # 5. stamps, then signatures and records of the earliest ones
        reply = await self._state_call("cluster_status", k, [k.gen, keys.STAMP_SCALE, *every])
        self._status(reply)
        stamp_of = dict(zip(every, (int(s) for s in reply[1]), strict=True))
        seq, max_docs = int(reply[2]), int(reply[3] or 0)
        floor = seq - max_docs if max_docs > 0 else 0
        own_set = set(batch)
        chosen: list[list[int]] = []
        for i in range(n):
            mine = own_stamps.get(ordinals[i], 1 << 62) if ordinals[i] else 1 << 62
            earlier = [
                c
                for c in found[i]
                if stamp_of[c] >= 0
                and stamp_of[c] < mine
                and c > floor
                and (c not in own_set or c in live_own)
            ]
            # The ones that share the most of the document's buckets first, then the earliest: a crowd
            # in one bucket cannot push a real near-duplicate out (see keys.BUCKET_CAP).
            shared = found[i]
            earlier.sort(key=lambda c: (-shared[c], stamp_of[c]))
            chosen.append(earlier[:max_candidates])
        outside = sorted({c for cs in chosen for c in cs if c not in own_set})
        got = await self._get([p for c in outside for p in (g.sig(c), g.doc(c))])
        fetched = {c: (got[2 * j], got[2 * j + 1]) for j, c in enumerate(outside)}

        # 6. verify: the id in the record must still name this ordinal
        with_record = [c for c in outside if fetched[c][0] and fetched[c][1]]
        named = [records.record_id(fetched[c][1]) for c in with_record]
        names = await self._get([(g.ids(name), name) for name in named])
        live = {c for c, name in zip(with_record, names, strict=True) if name == str(c).encode()}
        dead = [c for c in outside if c not in live]
        if dead:
            # Entries of replaced, deleted or abandoned versions: drop them from the buckets they
            # were found in, so the next reader does not pay for them again.

            def build(ops_for: Any) -> None:
                for c in dead:
                    for f in where[c]:
                        g.add_band(ops_for, f, _o4(c), remove=True)

            await self._write(build)
        candidates = [[c for c in cs if c in live or c in own_set] for cs in chosen]
        stamps = {c: stamp_of[c] for cs in candidates for c in cs}
        stamps.update(own_stamps)
        return CheckReply(ordinals, candidates, {c: fetched[c] for c in live}, stamps)

    async def lookup(self, k: keys.CollectionKeys, ids: Sequence[bytes]) -> list[StoredVersion | None]:
        async with self._guard():
            layout = await self._layout(k)
            g = _Groups(k, layout)
            state = await self._client.hmget(k.state, ["gen", "seq", "maxd"])
            if state[0] is None:
                raise CollectionMissing()
            if _bytes(state[0]).decode() != k.gen:
                raise GenerationChanged()
            max_docs = int(state[2] or 0)
            floor = int(_bytes(state[1]) or 0) - max_docs if max_docs > 0 else 0
            current = await self._get([(g.ids(i), i) for i in ids])
            ords = [int(c) if c else 0 for c in current]
            got = await self._get([p for o in ords if o for p in (g.sig(o), g.doc(o))])
        out: list[StoredVersion | None] = []
        j = 0
        for o in ords:
            if not o:
                out.append(None)
                continue
            sig, record = got[2 * j], got[2 * j + 1]
            j += 1
            out.append(StoredVersion(o, sig, record) if o > floor else None)
        return out

    async def delete(
        self, k: keys.CollectionKeys, doc_id: bytes, ordinal: int, old_bands: bytes
    ) -> bool | StoredVersion:
        """Data first, then the id (compare-and-set): a failure in between leaves an id naming a
        version without record, which reads as absent, and a retry finishes the job."""
        async with self._guard():
            g = _Groups(k, await self._layout(k))
            id_key = g.ids(doc_id)
            [cur] = await self._get([(id_key, doc_id)])
            if not cur:
                return False
            if int(cur) != ordinal:
                [sig] = await self._get([g.sig(int(cur))])
                return StoredVersion(int(cur), sig, b"")

            def build(ops_for: Any) -> None:
                self._removal(g, ops_for, ordinal, _split(old_bands))
                ops = ops_for(id_key)
                ops.swaps.extend((id_key, doc_id, cur, b""))
                ops.swap_index.append(0)

            [(_, answer)] = await self._write(build)
            if answer == 2 or answer == b"":  # deleted by someone else meanwhile
                return False
            if answer != 1:
                [sig] = await self._get([g.sig(int(answer))])
                return StoredVersion(int(answer), sig, b"")
            reply = await self._state_call("cluster_advance", k, [k.gen, 0, 1, ordinal])
            self._status([reply])
        return True

    # --- bounded growth -------------------------------------------------------------------------------

    async def _window(self, k: keys.CollectionKeys) -> tuple[int, int, int, int, int]:
        """(low, end, floor, ttl ms, seq): ordinals (low, end] may be reclaimed; end stops below the
        first pending ordinal (its record may not be written yet)."""
        state, pending = await asyncio.gather(
            self._client.hmget(k.state, ["gen", "low", "seq", "maxd", "ttl"]),
            self._client.hkeys(k.pending),
        )
        if state[0] is None:
            raise CollectionMissing()
        if _bytes(state[0]).decode() != k.gen:
            raise GenerationChanged()
        low, seq, max_docs, ttl = (int(v or 0) for v in state[1:])
        end = min([seq, *(int(p) - 1 for p in pending)])
        floor = seq - max_docs if max_docs > 0 else 0
        return low, end, floor, ttl, seq

    async def due(self, k: keys.CollectionKeys, *, now_ms: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` of the oldest expired or evicted documents: (ordinal, signature)."""
        async with self._guard():
            g = _Groups(k, await self._layout(k))
            low, end, floor, ttl, _ = await self._window(k)
            span = list(range(low + 1, min(end, low + 4 * limit) + 1))
            got = await self._get([p for o in span for p in (g.doc(o), g.sig(o))])
        out: list[tuple[int, bytes]] = []
        holes_to = low  # the last of the holes before anything due
        for j, o in enumerate(span):
            record, sig = got[2 * j], got[2 * j + 1]
            if not record:
                holes_to = o if not out and holes_to == o - 1 else holes_to
                continue
            if o <= floor or (ttl > 0 and records.inserted_ms(record) < now_ms - ttl):
                out.append((o, sig))
                if len(out) == limit:
                    break
            else:
                break
        if holes_to > low:
            # Holes (deleted, replaced, abandoned ordinals) are reclaimed already: step over them now,
            # or a window of nothing but holes would return nothing, forever (reclaim moves low too,
            # but only runs when something is due).
            async with self._guard():
                self._status([await self._state_call("cluster_advance", k, [k.gen, holes_to, 0])])
        return out

    async def reclaim(self, k: keys.CollectionKeys, items: Sequence[tuple[int, bytes]]) -> int:
        """Remove these (ordinal, band keys) documents everywhere, then move ``low`` over every
        reclaimed ordinal and hole."""
        async with self._guard():
            g = _Groups(k, await self._layout(k))
            stored = await self._get([g.doc(o) for o, _ in items])
            present = [(o, b, r) for (o, b), r in zip(items, stored, strict=True) if r]

            def build(ops_for: Any) -> None:
                for o, band_bytes, record in present:
                    self._removal(g, ops_for, o, _split(band_bytes))
                    doc_id = records.record_id(record)
                    id_key = g.ids(doc_id)
                    ops = ops_for(id_key)
                    ops.swaps.extend((id_key, doc_id, str(o).encode(), b""))
                    ops.swap_index.append(o)

            removed_ids = 0
            if present:
                removed_ids = sum(1 for _, answer in await self._write(build) if answer == 1)
            low, end, _, _, _ = await self._window(k)
            span = list(range(low + 1, min(end, low + 4 * max(len(items), 64)) + 1))
            exists = await self._get([g.doc(o) for o in span])
            new_low = low
            for o, record in zip(span, exists, strict=True):
                if record:
                    break
                new_low = o
            reply = await self._state_call(
                "cluster_advance", k, [k.gen, new_low, removed_ids, *(o for o, _, _ in present)]
            )
            self._status([reply])
        return len(present)


def _seed(spec: str) -> ClusterNode:
    """``host:port`` (or a full ``redis://host:port`` URL, whose credentials come from the first)."""
    spec = spec.strip().split("://", 1)[-1].rsplit("@", 1)[-1].split("/", 1)[0]
    host, _, port = spec.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"cluster seed nodes are host:port, got {spec!r}")
    return ClusterNode(host.strip("[]"), int(port))


def _split(band_bytes: bytes) -> list[bytes]:
    return [band_bytes[p : p + 8] for p in range(0, len(band_bytes), 8)]
