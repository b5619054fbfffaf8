"""Which stored documents a passage search reads and aligns (docs/design.md, "Passages", "A search").

The postings of a text's fingerprint keys name the stored documents sharing k-grams with it. A key held
by many documents says less than a rare one, so a document's *score* is the sum over the keys it shares
of 1 / (documents in that key's posting). Taking the best scores alone would let the copies of one
passage (ten stored versions of one page, a licence in a hundred packages) fill every place and push
out the only source of another passage. So the places are filled in two rounds:

1. *cover*, in rounds: greedily, the document whose keys not yet covered in this round weigh the most,
   until every key with a live posting is covered; then again among the documents left. The first
   round gives each passage the source sharing most of it, the next ones a copy of each passage before
   a further copy of any (so that copies can be counted under every passage); the first round takes
   at most COVER_SHARE of the places (a text full of common phrases, each in other documents, would
   otherwise take them all);
2. the places left, if any, go to the best scores among the rest.

Pure arithmetic on the postings (numpy, no store): ``choose`` is what the search calls.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: Most of the places the cover round takes; the rest are for copies.
COVER_SHARE = 0.75
#: A gain at or below this is nothing left to cover (weights are sums of 1/size, size <= 2^16).
_EPSILON = 1e-9


def _ranges(starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The concatenation of ``arange(s, e)`` for each pair."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return offsets + np.arange(total, dtype=np.int64)


def choose(
    counts: npt.NDArray[np.uint16], ordinals: npt.NDArray[np.uint64], floor: int, limit: int
) -> list[int]:
    """At most ``limit`` ordinals to read, cover first then copies by score (module docstring).
    ``counts``: each key's posting size, in order; ``ordinals``: the postings one after the other;
    ordinals at or below ``floor`` are evicted and left out (their posting still counts them in the
    key's size: how common the key is)."""
    n = len(counts)
    key_of = np.repeat(np.arange(n, dtype=np.int64), counts.astype(np.int64))
    live = ordinals > np.uint64(floor)
    ords, keys = ordinals[live], key_of[live]
    if not len(ords) or limit <= 0:
        return []
    weight = 1.0 / np.maximum(counts, 1).astype(np.float64)
    docs, doc_of = np.unique(ords, return_inverse=True)
    doc_of = doc_of.astype(np.int64)
    score = np.bincount(doc_of, weights=weight[keys], minlength=len(docs))
    if len(docs) <= limit:
        return [int(docs[d]) for d in np.lexsort((docs, -score))]
    # entries grouped by key (to lower the gains of a key's other documents) and by document (its keys)
    by_key = np.argsort(keys, kind="stable")
    key_start = np.searchsorted(keys[by_key], np.arange(n + 1))
    by_doc = np.argsort(doc_of, kind="stable")
    doc_start = np.searchsorted(doc_of[by_doc], np.arange(len(docs) + 1))
    taken = np.zeros(len(docs), bool)
    chosen: list[int] = []
    places = max(1, int(limit * COVER_SHARE))  # the first round's; later rounds may take every place
    while len(chosen) < limit:
        gain = np.where(taken, -np.inf, score)
        covered = np.zeros(n, bool)
        before = len(chosen)
        while len(chosen) < places:
            d = int(np.argmax(gain))  # ties: the smallest ordinal, stored first
            if gain[d] <= _EPSILON:
                break
            chosen.append(d)
            taken[d] = True
            mine = keys[by_doc[doc_start[d] : doc_start[d + 1]]]
            new = mine[~covered[mine]]
            covered[new] = True
            entries = by_key[_ranges(key_start[new], key_start[new + 1])]
            np.subtract.at(gain, doc_of[entries], weight[keys[entries]])
            gain[taken] = -np.inf
        if len(chosen) == before:
            break
        places = limit
    rest = np.flatnonzero(~taken)
    rest = rest[np.lexsort((docs[rest], -score[rest]))][: limit - len(chosen)]
    return [int(docs[d]) for d in chosen] + [int(docs[d]) for d in rest]
