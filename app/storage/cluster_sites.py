"""Sites on a Redis Cluster (collections with a ``site_field``; docs/design.md, "Sites on a cluster").

Every site key of a collection is on its state slot (``keys.SiteKeys``: ``<base>:{c}:sn`` ...), so each
site step is one script call there, atomic, running one server's site functions unchanged
(``scripts/cluster_sites.lua``): a check takes its replaced versions' pages away beside its
reservation, before anything of it lands; its stamp, the commit point, counts its pages and writes its
link journal entry with their candidates unread (``cluster_stamp.lua``); after its read it links the
earlier batches' verified pairs it carries (the link loop is one ``ND.LINK`` where the state's node has
neardup's module: ClusterRouting.run_state_script picks the variant) and puts the candidates in its
entry. Reads
(``site``, ``site_pairs``, the journal) are of that slot too; the sketches and records a journal entry
names are read from the data shards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neardup.storage import keys
from neardup.storage.cluster_routing import ClusterRouting, raise_for_status
from neardup.storage.store import (
    JournalEntries,
    Settle,
    SiteCounts,
    journal_docs,
    read_site_pairs,
    settle_text,
    site_counts,
)


def site_head(k: keys.CollectionKeys) -> list[Any]:
    """The shared head of the site scripts (_common.lua's), whose record prefix names the collection's
    site keys on the state slot (``k.cluster_sites``); the scripts there touch no other key."""
    return [
        k.gen, k.band_prefix, k.id_prefix, k.sig_prefix, k.cluster_sites.doc_prefix,
        keys.BAND_GROUP_TARGET, keys.ID_GROUP_TARGET, keys.ORDINAL_WIDTH, keys.DOC_GROUP,
    ]  # fmt: skip


class ClusterSites:
    """The cluster store's site steps and reads, over its routing (callers hold its guard)."""

    def __init__(self, routing: ClusterRouting) -> None:
        self._routing = routing

    async def remove(self, k: keys.CollectionKeys, names: Sequence[bytes], ordinals: Sequence[int]) -> None:
        """Refuse a batch whose site ``names`` could need more site ids than are left
        (SiteIdsExhausted), then take these versions' pages away (idempotent: a version not counted
        is nothing)."""
        named = [n for n in names if n]
        if not named and not ordinals:
            return
        args = [*site_head(k), "remove", len(named), *named, *ordinals]
        raise_for_status(await self._routing.run_state_script("cluster_sites", k, args))

    async def settle(
        self, k: keys.CollectionKeys, settle: Settle | None, journal: tuple[int, bytes] = (0, b"")
    ) -> tuple[int, int]:
        """Link ``settle``'s pairs and delete its journal fields, and put the check's journal entry
        ``journal`` (field, entry; field 0: none; entry b"": the field goes) in place of its stamp's,
        in one call. Returns (edges added, edges refused by a bound)."""
        if settle is None and not journal[0]:
            return 0, 0
        text = settle_text(settle) if settle is not None else b""
        args = [*site_head(k), "settle", text, journal[0], journal[1]]
        reply = await self._routing.run_state_script("cluster_sites", k, args)
        raise_for_status(reply)
        return int(reply[1]), int(reply[2])

    async def journal(self, k: keys.CollectionKeys, *, limit: int, through: int = 0) -> JournalEntries:
        """As RedisStore.link_journal: the entries from the state slot (cluster_journal.lua), then the
        sketches and records they name from the data shards (one round)."""
        g = await self._routing.groups(k)
        reply = await self._routing.run_state_script("cluster_journal", k, [*site_head(k), limit, through])
        raise_for_status(reply)
        width, flat = int(reply[2]), reply[3]
        entries = [(int(flat[j]), journal_docs(bytes(flat[j + 1]), width)) for j in range(0, len(flat), 2)]
        named = sorted({o for _, docs in entries for x, cs in docs for o in (x, *(cs or ()))})
        got = await self._routing.read_fields([p for o in named for p in (g.sig(o), g.doc(o))])
        found = {o: (got[2 * j], got[2 * j + 1]) for j, o in enumerate(named)}
        return JournalEntries(int(reply[1]), entries, found, int(reply[4]))

    async def site(self, k: keys.CollectionKeys, name: bytes) -> SiteCounts:
        """One site's counts, in one read of the state slot (site.lua, as on one server)."""
        reply = await self._routing.run_state_script("site", k, [*site_head(k), name])
        raise_for_status(reply)
        return site_counts(name, reply)

    async def site_pairs(self, k: keys.CollectionKeys, *, min_pages: int) -> list[SiteCounts]:
        """As RedisStore.site_pairs, from the site keys on the state slot."""
        sk = k.cluster_sites
        client = self._routing.client
        return await read_site_pairs(client, k, sk.site_pages, sk.site_ids, sk.shared, min_pages)
