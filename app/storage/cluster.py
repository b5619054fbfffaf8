"""The store on a Redis Cluster: same interface as :class:`neardup.storage.store.RedisStore`, over redis-py's
async ``RedisCluster``. A collection's id, signature and record groups have no hash tag and its band
table is many families, each one slot (keys.py), so they spread over every shard; its state
(sequence, stamps, pending ordinals) shares one slot.

A check cannot be one atomic script here, so it runs the protocol of docs/design.md ("Cluster: append,
stamp, read, verify" and "Why first seen wins") in round trips, each pipelined or one script call per
node:

0. look up the ids (a replaced version's band keys must come from the caller, as on one server);
1. reserve ordinals (state slot; they are *pending*), then claim their signature and record slots,
   one script call per node (a slot held by another value: the ordinal was handed out before a
   failover, so reserve again past it; docs/design.md, "Fencing");
2. write: append the ordinals to their band buckets, remove replaced versions, swap the id table to
   the new ordinals (compare-and-set), one script call per node;
3. stamp (state slot), the commit point: only while every ordinal of the batch is still pending,
   else the batch is refused (a 503); stamps only grow, and a pending ordinal is later than any
   stamp issued;
4. read the buckets; 5. the candidates' stamps (state slot) and signatures/records; 6. verify each
   candidate against the id table (its id must still name it), dropping dead entries lazily.

Why first seen wins: if A is stamped before B, A's appends finished before A's stamp, which came
before B's stamp, which came before B's reads: B sees A, stamped and smaller. A sees B pending or
with a larger stamp, and ignores it. A check that dies or pauses half-way leaves an ordinal that is
pending (ignored by everyone) until the stamp script's sweep makes it dead, past the collection's
abandon time, or a retry of the same document fences it (cluster_fence.lua); a dead ordinal is never
stamped, its check is refused if it comes back, and its retry writes the document again.

With ``min_replicas`` (NEARDUP_MIN_REPLICAS) every write round waits for that many replicas
(ClusterRouting._synced); see docs/design.md, "Replication".

How the parts fit: ``ClusterStore`` (here: collections and the check protocol's steps) has a
``ClusterRouting`` (cluster_routing.py: the client, slot routing, script calls, replica waits) and a
``ClusterRetention`` (cluster_retention.py: due, reclaim) over that same routing; both name keys
with cluster_layout.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster

from neardup.storage import keys, records
from neardup.storage.cluster_layout import KeyGroups, OpsFor, unpack_band_keys
from neardup.storage.cluster_retention import ClusterRetention
from neardup.storage.cluster_routing import ClusterRouting, as_bytes, cluster_client, raise_for_status
from neardup.storage.cluster_sites import ClusterSites, site_head
from neardup.storage.errors import StoreDown
from neardup.storage.store import (
    DROP_SWEEP_AGE_MS,
    CheckBatch,
    CheckReply,
    JournalEntries,
    Mode,
    NeedOldBands,
    PassageReply,
    Postings,
    Settle,
    SiteCounts,
    StoredVersion,
    decode_postings,
    each,
    journal_value,
)

#: Keys per per-node unlink call when a collection is dropped.
_UNLINK_CHUNK = 5000
#: Reservations a check makes before it gives up (a 503) when the data shards keep showing its
#: ordinals in use; the jump past a clash doubles each time (docs/design.md, "Fencing").
_CLAIM_TRIES = 12
#: How long a retry that finds its stored copy still pending waits for that copy's check to commit it,
#: in store timeouts, before it fences the copy (docs/design.md, "The commit point"); and how often it
#: looks meanwhile, in seconds.
_COPY_WAIT = 0.25
_COPY_POLL_S = 0.05


class ClusterStore:
    """The store on a Redis Cluster: collections and the check protocol here, retention in its
    ``ClusterRetention``, routing and failure handling in its ``ClusterRouting``. Build with
    :meth:`from_url`."""

    def __init__(self, client: RedisCluster, *, timeout: float = 5.0, min_replicas: int = 0) -> None:
        self._routing = ClusterRouting(client, timeout=timeout, min_replicas=min_replicas)
        self._sites = ClusterSites(self._routing)
        self._retention = ClusterRetention(self._routing, self._sites)
        self._timeout = timeout
        #: Awaited, where set, at two points of every check that writes: "claimed" (reserved and
        #: claimed, before the write round) and "written" (after the write round, before the stamp).
        #: Tests hold a check there, as a GC pause or a SIGSTOP would, to fix an interleaving.
        self.pause_points: dict[str, Callable[[], Awaitable[None]]] = {}

    @classmethod
    def from_url(
        cls, url: str, *, timeout: float = 5.0, max_connections: int = 64, min_replicas: int = 0
    ) -> ClusterStore:
        """URL of any node of the cluster (``redis://`` or ``rediss://``, password as usual); the
        client discovers the others. More seed nodes may follow, comma-separated, as ``host:port``
        (``redis://:pw@node1:7000,node2:7000,node3:7000``): any one that answers is enough.
        ``timeout`` bounds connecting and each command; a whole store
        call is bounded by a few times it, then the caller gets StoreDown. ``min_replicas`` > 0: a
        write the caller is told succeeded was applied by that many replicas of its shard (WAIT, at
        most half the timeout each), else StoreDown."""
        client = cluster_client(url, timeout=timeout, max_connections=max_connections)
        return cls(client, timeout=timeout, min_replicas=min_replicas)

    @property
    def client(self) -> RedisCluster:
        return self._routing.client

    async def close(self) -> None:
        await self._routing.close()

    async def ping(self) -> None:
        await self._routing.ping()

    async def now_ms(self, k: keys.CollectionKeys) -> int:
        """The collection's clock (the state node's time, kept from going back: scripts/_clock.lua)."""
        return await self._routing.now_ms(k)

    async def due(self, k: keys.CollectionKeys, *, now_ms: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` of the oldest expired or evicted documents: (ordinal, signature)."""
        return await self._retention.due(k, now_ms=now_ms, limit=limit)

    async def reclaim(self, k: keys.CollectionKeys, items: Sequence[tuple[int, bytes]]) -> int:
        """Remove these (ordinal, band keys) documents everywhere (see ``ClusterRetention.reclaim``)."""
        return await self._retention.reclaim(k, items)

    # --- sites (cluster_sites.py) -------------------------------------------------------------------

    async def link(
        self, k: keys.CollectionKeys, pairs: Sequence[tuple[int, int]], settles: Sequence[int] = ()
    ) -> tuple[int, int]:
        """As RedisStore.link, in one call on the state slot."""
        async with self._routing.guard():
            return await self._sites.settle(k, Settle(list(settles), list(pairs)))

    async def link_journal(self, k: keys.CollectionKeys, *, limit: int, through: int = 0) -> JournalEntries:
        async with self._routing.guard():
            return await self._sites.journal(k, limit=limit, through=through)

    async def site(self, k: keys.CollectionKeys, name: bytes) -> SiteCounts:
        async with self._routing.guard():
            return await self._sites.site(k, name)

    async def site_pairs(self, k: keys.CollectionKeys, *, min_pages: int) -> list[SiteCounts]:
        async with self._routing.guard(30):
            return await self._sites.site_pairs(k, min_pages=min_pages)

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
        """The state first, atomically on the collection's slot (cluster_init.lua: created, or what
        exists), then the registry entry, written again by any later creation that finds it missing
        (a creation that died between the two). ``sketch_bytes`` sets how many sketches share a hash
        (``keys.sig_group_size``), as on one server. The collection's abandon time is this process's
        (``ClusterRouting.abandon_ms``), kept in the state: every process sweeps by that one."""
        async with self._routing.guard():
            families, level, id_families, id_level = keys.cluster_groups(capacity, bands)
            sig_group = keys.sig_group_size(sketch_bytes)
            abandon = self._routing.abandon_ms()
            reply = await self._routing.run_state_script(
                "cluster_init",
                name,
                [
                    gen,
                    ttl_ms,
                    max_documents,
                    families,
                    id_families,
                    params_json,
                    sig_group,
                    abandon,
                    level,
                    id_level,
                    keys.CLUSTER_PASSAGE_FAMILIES if passages else 0,
                    1 if sites else 0,
                ],
            )
            if reply[0] == b"created":
                await self._routing.keyed_write(keys.REGISTRY, "HSET", keys.REGISTRY, name, params_json)
                return None
            existing = as_bytes(reply[2]) or as_bytes(await self.client.hget(keys.REGISTRY, name) or b"")
            if existing:
                await self._routing.keyed_write(keys.REGISTRY, "HSETNX", keys.REGISTRY, name, existing)
                return existing
            raise StoreDown("the collection's state has no parameters and no registry entry")

    async def get_collection(self, name: str) -> tuple[bytes, int] | None:
        async with self._routing.guard():
            params, docs = await asyncio.gather(
                self.client.hget(keys.REGISTRY, name), self.client.hget(keys.state(name), "docs")
            )
        return None if params is None else (as_bytes(params), max(0, int(docs or 0)))

    async def list_collections(self) -> list[tuple[bytes, int]]:
        async with self._routing.guard():
            registry: dict[Any, Any] = await self.client.hgetall(keys.REGISTRY)
            names = sorted(as_bytes(name) for name in registry)
            counts = await asyncio.gather(
                *(self.client.hget(keys.state(name.decode()), "docs") for name in names)
            )
        return [
            (as_bytes(registry[name]), max(0, int(c or 0))) for name, c in zip(names, counts, strict=True)
        ]

    async def drop_collection(self, name: str) -> bool:
        """The generation into the dropped ones (keys.DROPPED) first, so a drop that dies later is
        finished by a sweep; then the state (checks in flight then see the collection missing), then the
        registry entry of that generation (cluster_unregister.lua: a creation racing the drop keeps its
        own), then the data keys, named from the state's shape. The entry stays for the sweep: checks
        that were in flight can still write keys of the generation for a while, and the sweep unlinks
        those too."""
        async with self._routing.guard(30):
            before = await self._routing.retrying(
                lambda: self.client.hmget(keys.state(name), ["gen", "seq", "bG", "iG"])
            )
            if before[0] is not None:
                gen = as_bytes(before[0]).decode()
                now = await self.now_ms(keys.CollectionKeys(name, gen))
                seq, band_groups, id_groups = (int(v or 0) for v in before[1:])
                shape_text = keys.dropped_shape(seq, band_groups, id_groups, now)
                await self.client.hset(keys.DROPPED, keys.dropped_entry(name, gen), shape_text)
            shape = await self._routing.run_state_script("cluster_drop", name, [])
            gen = as_bytes(shape[0]).decode() if shape else ""
            entry = as_bytes(shape[4]) if shape else b""
            unregistered = await self._routing.retrying(
                lambda: self._routing.run_script(
                    "cluster_unregister", [keys.REGISTRY], [name, entry], touch=keys.REGISTRY
                )
            )
            if not shape and not unregistered:
                return False
            if shape and int(shape[1]) > 0:  # seq 0: nothing was ever written
                seq, band_groups, id_groups = map(int, shape[1:4])
                self._routing.forget_layout(name, gen)
                if before[0] is None or as_bytes(before[0]).decode() != gen:  # created meanwhile
                    now = await self.now_ms(keys.CollectionKeys(name, gen))
                    shape_text = keys.dropped_shape(seq, band_groups, id_groups, now)
                    await self.client.hset(keys.DROPPED, keys.dropped_entry(name, gen), shape_text)
                await self._unlink_generation(keys.CollectionKeys(name, gen))
        return True

    async def sweep_dropped(self, *, min_age_ms: int = DROP_SWEEP_AGE_MS) -> int:
        """As RedisStore's. An entry younger than the larger of ``min_age_ms`` and the abandon time is
        left alone (its drop is still unlinking, checks in flight may still write); an entry whose
        generation is still the collection's (the drop died before it deleted the state) is forgotten
        once old enough."""
        async with self._routing.guard(30):
            entries = await self._routing.retrying(lambda: self.client.hgetall(keys.DROPPED))
            done = 0
            for entry, shape in entries.items():
                name, gen = as_bytes(entry).decode().split(":", 1)
                ms = int(as_bytes(shape).split(b":")[3])
                k = keys.CollectionKeys(name, gen)
                if await self.now_ms(k) - ms < max(min_age_ms, self._routing.abandon_ms()):
                    continue
                live = await self._routing.retrying(
                    functools.partial(self.client.hget, keys.state(name), "gen")
                )
                if live is None or as_bytes(live).decode() != gen:
                    await self._unlink_generation(k)
                await self.client.hdel(keys.DROPPED, as_bytes(entry))
                done += 1
        return done

    async def _unlink_generation(self, k: keys.CollectionKeys) -> None:
        """By a scan of every node: the band families' groups are as many as each family grew to."""
        names: AsyncIterator[Any] = self.client.scan_iter(match=k.data_pattern, count=_UNLINK_CHUNK)
        chunk: list[str] = []

        def build(ops_for: OpsFor) -> None:
            for key in chunk:
                ops_for(key).unlinks.append(key)

        async for key in each(names):
            chunk.append(key.decode() if isinstance(key, bytes) else key)
            if len(chunk) >= _UNLINK_CHUNK:
                await self._routing.write(build)
                chunk = []
        if chunk:
            await self._routing.write(build)

    # --- documents ------------------------------------------------------------------------------------

    async def check(
        self, k: keys.CollectionKeys, mode: Mode, batch: CheckBatch, *, max_candidates: int
    ) -> CheckReply | NeedOldBands:
        """The same contract as RedisStore.check, in the round trips of the module docstring."""
        async with self._routing.guard():
            return await self._check(k, mode, batch, max_candidates)

    async def _check(
        self, k: keys.CollectionKeys, mode: Mode, batch: CheckBatch, max_candidates: int
    ) -> CheckReply | NeedOldBands:
        bands, band_keys, empties = batch.bands, batch.band_keys, batch.empties
        ids, packed, expected, old_bands = batch.ids, batch.records, batch.expected, batch.old_bands
        n = len(ids)
        if n == 0:
            return CheckReply([], [], {})
        g = await self._routing.groups(k)
        fields = [
            []
            if empties[i : i + 1] == b"1"
            else unpack_band_keys(band_keys[i * bands * 8 : (i + 1) * bands * 8])
            for i in range(n)
        ]
        if mode == "restore":
            committed = await self._settle_copies(k, expected)
            kept = [o if int(o or 0) in committed else b"" for o in expected]
            await self._restore_bands(k, g, ids, fields, kept, batch.passages if g.passages else ())
        if mode in ("read", "restore"):
            read = await self._read(k, g, fields, [0] * n, {}, [], max_candidates, set())
            if mode == "restore":
                # The kept copy's answer relies on its own stamp and on the candidates' stamps it just
                # read (a candidate's data was waited for before its stamp): with min_replicas, the
                # state node's replicas must have them all (a wait on that node, nothing to write).

                def state_node(ops_for: OpsFor) -> None:
                    ops_for(k.state)

                await self._routing.write(state_node)
            return read

        # 0. the stored version of each id (first occurrence in the batch)
        first: dict[bytes, int] = {}
        for i, doc_id in enumerate(ids):
            first.setdefault(doc_id, i)
        firsts = sorted(first.values())
        current = await self._routing.read_ids(g, [ids[i] for i in firsts])
        stale = [(i, cur) for i, cur in zip(firsts, current, strict=True) if cur and cur != expected[i]]
        if stale:
            sigs = await self._routing.read_fields([g.sig(int(cur)) for _, cur in stale])
            return NeedOldBands({i: (int(cur), sig) for (i, cur), sig in zip(stale, sigs, strict=True)})
        stored = dict(zip(firsts, current, strict=True))
        # A replaced version whose record names another id is not this id's to remove: the ordinal
        # went to another document after a failover lost this one's claim (NEARDUP_MIN_REPLICAS=0,
        # docs/design.md "Fencing"); only the id is moved.
        replaced = [(i, int(cur)) for i, cur in stored.items() if cur]
        held, held_blobs = await asyncio.gather(
            self._routing.read_fields([g.doc(o) for _, o in replaced]),
            self._routing.read_blobs(g, [o for _, o in replaced] if g.passages else []),
        )
        old_blob = dict(zip((o for _, o in replaced), held_blobs, strict=False))
        blobs = batch.passages if g.passages and batch.passages else [b""] * n
        foreign = {
            o for (i, o), r in zip(replaced, held, strict=True) if r and records.record_id(r) != ids[i]
        }

        # 1. reserve, and claim the new ordinals' signature and record slots on the data shards
        sketches = [batch.signature(i) for i in range(n)]  # (exact mode: of different sizes)
        reserve = self._reserve(k, g, n, sketches, packed)
        gone = [o for _, o in replaced if o not in foreign] if g.sites else []
        if gone:
            # The replaced versions' pages go before anything of this check lands (docs/design.md,
            # "Sites on a cluster"), beside the reservation; a batch that could run out of site ids is
            # refused there already (the stamp refuses it in any case).
            (ordinal0, server_ms, packed), _ = await _both(reserve, self._sites.remove(k, batch.sites, gone))
        else:
            ordinal0, server_ms, packed = await reserve
        ordinals = list(range(ordinal0, ordinal0 + n))
        await self._pause("claimed")

        # 2. write
        new_docs = 0
        forget: list[int] = []
        swaps: list[tuple[int, bytes, bytes, bytes]] = []  # (i, id, expected, new)
        last_of: dict[bytes, int] = {}
        removed: list[tuple[int, list[bytes], bytes]] = []  # (old ordinal, its band fields, its blob)
        for i, doc_id in enumerate(ids):
            previous = last_of.get(doc_id)
            if previous is not None:
                removed.append((ordinals[previous], fields[previous], blobs[previous]))
                before = str(ordinals[previous]).encode()
            else:
                cur = stored.get(i, b"")
                if cur:
                    if int(cur) not in foreign:
                        old = int(cur)
                        removed.append((old, unpack_band_keys(old_bands[i]), old_blob.get(old, b"")))
                    forget.append(int(cur))
                else:
                    new_docs += 1
                before = cur
            last_of[doc_id] = i
            swaps.append((i, doc_id, before, str(ordinals[i]).encode()))

        def build(ops_for: OpsFor) -> None:
            for i in range(n):
                o4 = g.ordinal(ordinals[i])
                for f in fields[i]:
                    g.add_band(ops_for, f, o4)
            if g.passages:
                documents = list(zip(ordinals, blobs, strict=True))
                g.add_postings(ops_for, documents)
                g.add_blobs(ops_for, documents)
            for old, old_fields, old_passages in removed:
                g.remove_document(ops_for, old, old_fields, old_passages)
            for i, doc_id, before, new in swaps:
                g.add_swap(ops_for, doc_id, before, new, i)

        failed = sorted(i for i, answer in await self._routing.write(build) if answer not in (1, 2))
        if failed:
            # Another client changed these ids meanwhile: undo our versions of them, then the caller
            # looks again (the ids we did swap are replaced on that next call, like any stored id).

            def undo(ops_for: OpsFor) -> None:
                for i in failed:
                    g.remove_document(ops_for, ordinals[i], fields[i], blobs[i])

            await self._routing.write(undo, sync=False)
            # The whole reservation is given up: dead now, rather than pending until the sweep (the
            # ids this batch did swap name dead versions, replaced on the caller's next call).
            raise_for_status(await self._routing.run_state_script("cluster_fence", k, [k.gen, *ordinals]))
            current = await self._routing.read_ids(g, [ids[i] for i in failed])
            named = [(i, int(c)) for i, c in zip(failed, current, strict=True) if c]
            sigs = await self._routing.read_fields([g.sig(o) for _, o in named])
            need = {i: (0, b"") for i in failed}
            need.update({i: (o, s) for (i, o), s in zip(named, sigs, strict=True)})
            return NeedOldBands(need)

        # 3. stamp: the commit point (only this check can make its ordinals visible, and only while
        # they are pending: a refusal means they are dead, and nothing of this check is ever seen)
        await self._pause("written")
        # With a site_field the stamp also counts the batch's pages (the last version of each id) and
        # writes its link journal entry, candidates unread (docs/design.md, "Sites on a cluster").
        last = set(last_of.values())
        pages = [batch.sites[i] if i in last else b"" for i in range(n)] if g.sites else []
        reply = await self._routing.run_state_script(
            "cluster_stamp_sites" if g.sites else "cluster_stamp",
            k,
            [*site_head(k), ordinal0, n, new_docs, keys.STAMP_SCALE, len(forget), *forget, *pages],
        )
        if reply and reply[0] == b"dead":
            raise StoreDown(
                "this check's ordinals were made dead before its stamp (pending past the collection's "
                "abandon time, or fenced by a retry of the same document): nothing of it counts; retry"
            )
        raise_for_status(reply)
        own_stamps = {o: int(s) for o, s in zip(ordinals, reply[1], strict=True)}
        if mode == "put":
            return CheckReply(ordinals, [[] for _ in range(n)], {}, own_stamps, now_ms=server_ms)
        # the batch's own versions that are still current (the last occurrence of each id)
        live_own = {ordinals[i] for i in last_of.values()}
        read = await self._read(k, g, fields, ordinals, own_stamps, ordinals, max_candidates, live_own)
        if g.sites:
            # The earlier batches' verified pairs this check carries, linked; its journal entry gets the
            # candidates just read (what the service verifies and settles, as check.lua's), or goes.
            value = journal_value(ordinals, read.candidates, batch.sites)
            field = ordinal0 if any(pages) else 0
            await self._sites.settle(k, batch.settle, (field, value))
            read = dataclasses.replace(read, journal=ordinal0 if value else 0)
        return read if read.now_ms else dataclasses.replace(read, now_ms=server_ms)

    async def _pause(self, point: str) -> None:
        hold = self.pause_points.get(point)
        if hold is not None:
            await hold()

    async def _settle_copies(self, k: keys.CollectionKeys, copies: Sequence[bytes]) -> set[int]:
        """The stored copies (ordinals) a retry keeps, of those its check sent (``expected``): a copy
        still pending may belong to a check that is still going (the first attempt of this very
        retry, slow or paused), so it is waited for, a quarter of the store timeout, then fenced
        (cluster_fence.lua: made dead unless its check committed it meanwhile). Never replaced while
        it can still be committed. Returns the committed ones (stamped); the caller replaces the others."""
        ordinals = sorted({int(o) for o in copies if o})
        if not ordinals:
            return set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _COPY_WAIT * self._timeout
        fenced = False
        while True:
            reply = await self._routing.run_state_script(
                "cluster_status", k, [k.gen, keys.STAMP_SCALE, *ordinals]
            )
            raise_for_status(reply)
            stamps = dict(zip(ordinals, (int(s) for s in reply[1]), strict=True))
            pending = [o for o in ordinals if stamps[o] == -1]
            if not pending or fenced:
                return {o for o in ordinals if stamps[o] >= 0}
            if loop.time() >= deadline:
                raise_for_status(await self._routing.run_state_script("cluster_fence", k, [k.gen, *pending]))
                fenced = True
            else:
                await asyncio.sleep(_COPY_POLL_S)

    async def _reserve(
        self, k: keys.CollectionKeys, g: KeyGroups, n: int, sketches: Sequence[bytes], packed: Sequence[bytes]
    ) -> tuple[int, int, list[bytes]]:
        """Reserve n ordinals (pending), then claim their signature and record slots (one call per
        node, before anything else names them): a slot that holds another value means the ordinal was
        handed out before, by a state that a failover has since rolled back. Then the claims that
        did succeed are undone and the reservation is made again past the clash (the sequence jumps
        over it, further each time). Returns (first ordinal, the state node's time, the records
        restamped with it)."""
        reply = await self._routing.run_state_script("cluster_reserve", k, [k.gen, n])
        for attempt in range(_CLAIM_TRIES):
            raise_for_status(reply)
            ordinal0, server_ms = int(reply[1]), int(reply[4])
            stamped = [records.restamp(record, server_ms) for record in packed]  # the server's clock

            def claim(ops_for: OpsFor, first: int = ordinal0, values: list[bytes] = stamped) -> None:
                for i in range(n):
                    for tag, (key, slot), value in (
                        (2 * i, g.sig(first + i), sketches[i]),
                        (2 * i + 1, g.doc(first + i), values[i]),
                    ):
                        ops = ops_for(key)
                        ops.claims.extend((key, slot, value))
                        ops.claim_index.append(tag)

            answers = dict(await self._routing.write(claim, claims=True))
            clashed = [i for i in range(n) if answers[2 * i] == 0 or answers[2 * i + 1] == 0]
            if not clashed:
                return ordinal0, server_ms, stamped
            # Ours: a record slot we wrote (its value is this batch's, id and time included), and the
            # signature slot of the same ordinal; a signature slot we found empty. An equal signature
            # beside another record is the other document's (same text), not ours to remove.
            undo: list[tuple[str, str]] = []
            for i in range(n):
                mine = answers[2 * i + 1] != 0
                if mine:
                    undo.append(g.doc(ordinal0 + i))
                if answers[2 * i] == 1 or (mine and answers[2 * i] == 2):
                    undo.append(g.sig(ordinal0 + i))

            def build(ops_for: OpsFor, pairs: list[tuple[str, str]] = undo) -> None:
                for key, slot in pairs:
                    ops_for(key).deletes.extend((key, slot))

            if undo:
                await self._routing.write(build, sync=False)
            past = ordinal0 + max(clashed) + n * ((1 << attempt) - 1)
            ours = range(ordinal0, ordinal0 + n)
            reply = await self._routing.run_state_script("cluster_reserve", k, [k.gen, n, past, *ours])
        raise StoreDown(
            f"the data shards hold ordinals this collection's state had not reserved, past {past}"
        )

    async def _restore_bands(
        self,
        k: keys.CollectionKeys,
        g: KeyGroups,
        ids: Sequence[bytes],
        fields: list[list[bytes]],
        expected: list[bytes],
        passages: Sequence[bytes] = (),
    ) -> None:
        """Append each stored copy's ordinal (``expected``) to every bucket of its band keys, where it
        is missing: a check that died between its appends leaves a copy in some buckets only, and a
        retry that keeps that copy (unchanged) completes it here. Idempotent; full buckets stay full. If
        the copy was replaced meanwhile, these entries are dead and removed when met, as any other.
        The kept copy's answer also depends on its id, signature and record, written by a first check
        that may have been answered with a 503 before its replicas confirmed: the round visits their
        nodes too (nothing to write there), so with ``min_replicas`` it waits on every node the answer
        depends on (the state node, for the stamps, after the read: see ``_check``). The copy's
        passages likewise: its postings where missing, and its blob's parts where absent (``claims``:
        a part already there, this text's or, for another text with the same sketch, the stored one's,
        is left as it is)."""
        kept = [(i, int(o)) for i, o in enumerate(expected) if o]
        if not kept:
            return

        def build(ops_for: OpsFor) -> None:
            for i, ordinal in kept:
                for key in (g.ids(ids[i]), g.sig(ordinal)[0], g.doc(ordinal)[0]):
                    ops_for(key)
                for f in fields[i]:
                    g.add_band(ops_for, f, g.ordinal(ordinal))
            if passages:
                documents = [(ordinal, passages[i]) for i, ordinal in kept]
                g.add_postings(ops_for, documents)
                g.add_blobs(ops_for, documents, claims=True)

        await self._routing.write(build)

    async def _read(
        self,
        k: keys.CollectionKeys,
        g: KeyGroups,
        fields: list[list[bytes]],
        ordinals: list[int],
        own_stamps: dict[int, int],
        batch: list[int],
        max_candidates: int,
        live_own: set[int],
    ) -> CheckReply:
        n = len(fields)
        # 4. the buckets
        values = await self._routing.read_buckets(g, [f for i in range(n) for f in fields[i]])
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
                    for c in g.ordinals_in(value):
                        if c != ordinals[i]:
                            shared[c] = shared.get(c, 0) + 1
                            where.setdefault(c, []).append(f)
        every = sorted(where)
        if not every:
            return CheckReply(ordinals, [[] for _ in range(n)], {}, own_stamps)

        # 5. stamps, then signatures and records of the earliest ones
        reply = await self._routing.run_state_script("cluster_status", k, [k.gen, keys.STAMP_SCALE, *every])
        raise_for_status(reply)
        stamp_of = dict(zip(every, (int(s) for s in reply[1]), strict=True))
        seq, max_docs, server_ms = int(reply[2]), int(reply[3] or 0), int(reply[5])
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
        got = await self._routing.read_fields([p for c in outside for p in (g.sig(c), g.doc(c))])
        fetched = {c: (got[2 * j], got[2 * j + 1]) for j, c in enumerate(outside)}

        # 6. verify: the id in the record must still name this ordinal
        with_record = [c for c in outside if fetched[c][0] and fetched[c][1]]
        named = [records.record_id(fetched[c][1]) for c in with_record]
        names = await self._routing.read_ids(g, named)
        live = {c for c, name in zip(with_record, names, strict=True) if name == str(c).encode()}
        # and the ordinals made dead (their checks were refused): never stamped, their entries are dead
        dead = [c for c in outside if c not in live] + [c for c in every if stamp_of[c] == -2]
        if dead:
            # Entries of replaced, deleted or abandoned versions: drop them from the buckets they
            # were found in, so the next reader does not pay for them again.

            def build(ops_for: OpsFor) -> None:
                for c in dead:
                    for f in where[c]:
                        g.add_band(ops_for, f, g.ordinal(c), remove=True)

            await self._routing.write(build, sync=False)
        candidates = [[c for c in cs if c in live or c in own_set] for cs in chosen]
        stamps = {c: stamp_of[c] for cs in candidates for c in cs}
        stamps.update(own_stamps)
        return CheckReply(ordinals, candidates, {c: fetched[c] for c in live}, stamps, now_ms=server_ms)

    async def lookup(self, k: keys.CollectionKeys, ids: Sequence[bytes]) -> list[StoredVersion | None]:
        async with self._routing.guard():
            g = await self._routing.groups(k)
            current = await self._routing.read_ids(g, ids)
            ords = [int(c) if c else 0 for c in current]
            named = sorted({o for o in ords if o})
            # The state (with the generation and the eviction floor) says which are dead: their checks
            # were refused, so they are absent, though their id swaps landed.
            status, got = await asyncio.gather(
                self._routing.run_state_script("cluster_status", k, [k.gen, keys.STAMP_SCALE, *named]),
                self._routing.read_fields([p for o in ords if o for p in (g.sig(o), g.doc(o))]),
            )
            raise_for_status(status)
            dead = {o for o, s in zip(named, status[1], strict=True) if int(s) == -2}
            max_docs = int(status[3] or 0)
            floor = int(status[2]) - max_docs if max_docs > 0 else 0
        out: list[StoredVersion | None] = []
        j = 0
        for doc_id, o in zip(ids, ords, strict=True):
            if not o or o in dead:
                j += 1 if o else 0
                out.append(None)
                continue
            sig, record = got[2 * j], got[2 * j + 1]
            j += 1
            # A record that names another id is not this id's (only after a failover that lost the
            # claim of this ordinal but kept the id's swap, NEARDUP_MIN_REPLICAS=0): absent.
            own = not record or records.record_id(record) == doc_id
            out.append(StoredVersion(o, sig, record) if o > floor and own else None)
        return out

    async def delete(
        self, k: keys.CollectionKeys, doc_id: bytes, ordinal: int, old_bands: bytes
    ) -> bool | StoredVersion:
        """Data first, then the id (compare-and-set): a failure in between leaves an id naming a
        version without record, which reads as absent, and a retry finishes the job."""
        async with self._routing.guard():
            g = await self._routing.groups(k)
            # the version's blob beside its id (it names the postings to remove), in one round; and
            # its page (a site_field) taken away in that round, before its data: a version the id no
            # longer names was taken away by whoever replaced or deleted it (idempotent)
            [cur], blobs, _ = await asyncio.gather(
                self._routing.read_ids(g, [doc_id]),
                self._routing.read_blobs(g, [ordinal] if g.passages else []),
                self._sites.remove(k, [], [ordinal] if g.sites else []),
            )
            if not cur:
                return False
            if int(cur) != ordinal:
                [sig] = await self._routing.read_fields([g.sig(int(cur))])
                return StoredVersion(int(cur), sig, b"")
            blob = blobs[0] if blobs else b""

            def build(ops_for: OpsFor) -> None:
                g.remove_document(ops_for, ordinal, unpack_band_keys(old_bands), blob)
                g.add_swap(ops_for, doc_id, cur, b"", 0)

            [(_, answer)] = await self._routing.write(build)
            if answer == 2 or answer == b"":  # deleted by someone else meanwhile
                return False
            if answer != 1:
                [sig] = await self._routing.read_fields([g.sig(int(answer))])
                return StoredVersion(int(answer), sig, b"")
            reply = await self._routing.run_state_script("cluster_advance", k, [k.gen, 0, 1, ordinal])
            raise_for_status([reply])
        return True

    async def postings(self, k: keys.CollectionKeys, fingerprint_keys: bytes) -> Postings:
        """The postings of these fingerprint keys (4 bytes each): one read per node that holds some of
        their families (ND.BUCKETSGET or cluster_bands.lua, as the band buckets are read), beside one
        read of the state slot (the eviction floor, the clock). A posting may name ordinals still
        pending or dead here (written before their stamp); ``passage_sources`` leaves them out."""
        async with self._routing.guard():
            g = await self._routing.groups(k)
            wanted = [fingerprint_keys[p : p + 4] for p in range(0, len(fingerprint_keys), 4)]
            status, values = await asyncio.gather(
                self._routing.run_state_script("cluster_status", k, [k.gen, keys.STAMP_SCALE]),
                self._routing.read_buckets(g, wanted if g.passages else [], postings=True),
            )
        raise_for_status(status)
        seq, max_docs, now_ms = int(status[2]), int(status[3] or 0), int(status[5])
        width = keys.ORDINAL_WIDTH
        values = values or [b""] * len(wanted)
        counts = b"".join((len(v) // width).to_bytes(2, "big") for v in values)
        floor = seq - max_docs if max_docs else 0
        return decode_postings(counts + b"".join(values), len(wanted), floor, now_ms)

    async def passage_sources(self, k: keys.CollectionKeys, ordinals: Sequence[int]) -> PassageReply:
        """The passage blobs and records of these stored documents, b"" where gone or not committed (a
        pending or dead ordinal: its check has not made it visible, or never will): their blobs, their
        records and their status, in one round (a call per node that holds some, and one on the state
        slot)."""
        async with self._routing.guard():
            g = await self._routing.groups(k)
            status, blobs, held = await asyncio.gather(
                self._routing.run_state_script("cluster_status", k, [k.gen, keys.STAMP_SCALE, *ordinals]),
                self._routing.read_blobs(g, ordinals),
                self._routing.read_fields([g.doc(o) for o in ordinals]),
            )
        raise_for_status(status)
        sources = [
            (o, blob, record) if int(stamp) >= 0 else (o, b"", b"")
            for o, stamp, blob, record in zip(ordinals, status[1], blobs, held, strict=True)
        ]
        return PassageReply(sources, int(status[5]))


_A = TypeVar("_A")
_B = TypeVar("_B")


async def _both(a: Awaitable[_A], b: Awaitable[_B]) -> tuple[_A, _B]:
    """Both results, run together; the first failure is raised once both have ended (neither is left
    running behind the caller)."""
    x, y = await asyncio.gather(a, b, return_exceptions=True)
    for result in (x, y):
        if isinstance(result, BaseException):
            raise result
    return x, y  # type: ignore[return-value]
