"""Retention on a Redis Cluster (``ttl_seconds``, ``max_documents``): which documents are due, and
reclaiming them, a bounded amount per write; the watermark ``low`` only moves up, over reclaimed
ordinals and holes (docs/design.md, "Retention")."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from neardup.storage import keys, records
from neardup.storage.cluster_layout import OpsFor, unpack_band_keys
from neardup.storage.cluster_routing import ClusterRouting, raise_for_status
from neardup.storage.cluster_sites import ClusterSites


class ClusterRetention:
    """The cluster store's ``due`` and ``reclaim``, over the store's routing (see ``ClusterStore``)."""

    def __init__(self, routing: ClusterRouting, sites: ClusterSites) -> None:
        self._routing = routing
        self._sites = sites

    async def _window(self, k: keys.CollectionKeys) -> tuple[int, int, int, int, int]:
        """(low, end, floor, ttl ms, seq): ordinals (low, end] may be reclaimed; end stops below the
        first pending ordinal (its record may not be written yet). One read of the state slot
        (cluster_window.lua): a reservation between two reads would leave its ordinals in the window."""
        reply = await self._routing.run_state_script("cluster_window", k, [k.gen])
        raise_for_status(reply)
        low, seq, max_docs, ttl, first_pending = (int(v) for v in reply[1:6])
        end = min(seq, first_pending - 1) if first_pending else seq
        floor = seq - max_docs if max_docs > 0 else 0
        return low, end, floor, ttl, seq

    async def due(self, k: keys.CollectionKeys, *, now_ms: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` of the oldest expired or evicted documents: (ordinal, signature)."""
        routing = self._routing
        async with routing.guard():
            g = await routing.groups(k)
            low, end, floor, ttl, _ = await self._window(k)
            span = list(range(low + 1, min(end, low + 4 * limit) + 1))
            got = await routing.read_fields([p for o in span for p in (g.doc(o), g.sig(o))])
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
            async with routing.guard():
                raise_for_status([await routing.run_state_script("cluster_advance", k, [k.gen, holes_to, 0])])
        return out

    async def reclaim(self, k: keys.CollectionKeys, items: Sequence[tuple[int, bytes]]) -> int:
        """Remove these (ordinal, band keys) documents everywhere, then move ``low`` over every
        reclaimed ordinal and hole."""
        routing = self._routing
        async with routing.guard():
            g = await routing.groups(k)
            stored, blobs, _ = await asyncio.gather(
                routing.read_fields([g.doc(o) for o, _ in items]),
                routing.read_blobs(g, [o for o, _ in items] if g.passages else []),
                self._sites.remove(k, [], [o for o, _ in items] if g.sites else []),
            )
            blob_of = dict(zip((o for o, _ in items), blobs, strict=False))
            present = [(o, b, r) for (o, b), r in zip(items, stored, strict=True) if r]

            def build(ops_for: OpsFor) -> None:
                for o, band_bytes, record in present:
                    g.remove_document(ops_for, o, unpack_band_keys(band_bytes), blob_of.get(o, b""))
                    g.add_swap(ops_for, records.record_id(record), str(o).encode(), b"", o)

            removed_ids = 0
            if present:
                removed_ids = sum(1 for _, answer in await routing.write(build) if answer == 1)
            low, end, _, _, _ = await self._window(k)
            span = list(range(low + 1, min(end, low + 4 * max(len(items), 64)) + 1))
            exists = await routing.read_fields([g.doc(o) for o in span])
            new_low = low
            for o, record in zip(span, exists, strict=True):
                if record:
                    break
                new_low = o
            reply = await routing.run_state_script(
                "cluster_advance", k, [k.gen, new_low, removed_ids, *(o for o, _, _ in present)]
            )
            raise_for_status([reply])
        return len(present)
