"""Mirror detection: what a collection with a ``site_field`` answers about its sites, from the counts
the store keeps (docs/design.md, "Sites").

Bharat and Broder ("Mirror, mirror on the Web", 1999) call two hosts mirrors by the share of one
host's pages that have a near-duplicate on the other. The store counts, per ordered pair of sites
(A, B), ``shared(A, B)``: the pages of A with at least one verified near-duplicate on B, found while
checking (the later of the two documents finds the earlier one). So ``share = shared / pages`` is that
fraction, from each side: a full mirror has share ~1 from both sides, a site that copied a tenth of a
big one has share 1 and share_of_other 0.1, two sites that only hold the same license page have tiny
shares both ways.
"""

from __future__ import annotations

from dataclasses import dataclass

from neardup.storage.store import SiteCounts


@dataclass(frozen=True)
class SiteShare:
    """Another site, seen from one site: ``shared`` of this site's pages have a near-duplicate there
    (``share`` = shared / this site's pages); ``other_shared`` of its ``pages`` have one here."""

    site: str
    pages: int
    shared: int
    share: float
    other_shared: int
    share_of_other: float


@dataclass(frozen=True)
class SiteMirrors:
    """A site's pages (0: no page of it is stored) and its other sites, best first."""

    site: str
    pages: int
    mirrors: list[SiteShare]


@dataclass(frozen=True)
class MirrorPair:
    """Two sites, ``site`` the one with the larger share (the more copied-over of the two)."""

    site: str
    other: str
    pages: int
    other_pages: int
    shared: int
    other_shared: int
    share: float
    share_of_other: float


def _ratio(part: int, whole: int) -> float:
    return min(1.0, part / whole) if whole > 0 else 0.0


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogatepass")


def site_mirrors(counts: SiteCounts) -> SiteMirrors:
    """Ranked by the larger of the two shares, then by shared pages, then by name."""
    mirrors = [
        SiteShare(_name(name), pages, shared, _ratio(shared, counts.pages), other, _ratio(other, pages))
        for name, pages, shared, other in counts.others
        if name and (shared or other)
    ]
    mirrors.sort(key=lambda m: (-max(m.share, m.share_of_other), -m.shared, m.site))
    return SiteMirrors(_name(counts.name), counts.pages, mirrors)


def mirror_pairs(
    counts: list[SiteCounts], *, min_share: float, min_pages: int, limit: int
) -> list[MirrorPair]:
    """Each pair of sites once, where both have at least ``min_pages`` pages and either direction's
    share reaches ``min_share``; ranked by the larger share, then shared pages, then names."""
    pages = {c.name: c.pages for c in counts if c.pages >= min_pages}
    shared: dict[tuple[bytes, bytes], int] = {}
    for c in counts:
        if c.name in pages:
            for other, _, n, _ in c.others:
                if other in pages and n > 0:
                    shared[(c.name, other)] = n
    pairs: list[MirrorPair] = []
    for a, b in {(min(x, y), max(x, y)) for x, y in shared}:
        ab, ba = shared.get((a, b), 0), shared.get((b, a), 0)
        share_a, share_b = _ratio(ab, pages[a]), _ratio(ba, pages[b])
        if max(share_a, share_b) < min_share:
            continue
        if share_b > share_a:
            a, b, ab, ba, share_a, share_b = b, a, ba, ab, share_b, share_a
        pairs.append(MirrorPair(_name(a), _name(b), pages[a], pages[b], ab, ba, share_a, share_b))
    pairs.sort(key=lambda p: (-p.share, -p.shared, p.site, p.other))
    return pairs[:limit]
