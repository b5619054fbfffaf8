"""From shared fingerprints to passages: the hits of a text's k-grams on a stored document's selected
ones, chained along the diagonal into spans, each extended to its estimated edges, and the text's
containment and coverage (docs/design.md, "Passages").

A hit pairs a k-gram of the text (index q, words q .. q+K-1) with a selected k-gram of the source
(its first word s) of the same key. A copied passage makes hits on one diagonal q - s; light edits
move the diagonal a little (a word inserted or dropped) and remove some hits (a substituted word
breaks the K k-grams that hold it), so consecutive hits of one passage are chained when both texts
move forward by at most GAP words and the diagonal by at most DRIFT.

Edges: the source's selected k-grams are at most W words apart, so the first hit of a span is up to W
words after the passage's true start. The selected k-gram before it did not hit, so the passage starts
after that one's first word: the span is extended back to the middle of that interval (the estimate
with the least expected error when the start is equally likely anywhere in it), and forward the same
way. Source offsets of the extension take the text's own code points for those words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from neardup.domain.fingerprints import Features, K, Source, W

#: Most words between consecutive hits of one passage, in either text.
GAP = 3 * W
#: Most words the diagonal may move between consecutive hits.
DRIFT = 8
#: Occurrences of one key in the text that are paired with a source k-gram (a phrase repeated more
#: often than this only pairs its first occurrences).
MAX_REPEATS = 8
#: Share of the interval before the first hit (after the last) that a span is extended over.
EXTEND = 0.5


@dataclass(frozen=True)
class Span:
    """Code points, ``end`` exclusive, in the text (``start``/``end``) and the stored one."""

    start: int
    end: int
    source_start: int
    source_end: int


@dataclass
class Chain:
    q0: int
    s0: int
    e0: int
    q1: int
    s1: int
    e1: int
    entries: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Aligned:
    """A span with the query words it covers (first, last) and the evidence behind it."""

    span: Span
    first_word: int
    last_word: int
    hits: int
    entries: int


class QueryIndex:
    """The text's k-gram positions by key."""

    def __init__(self, f: Features) -> None:
        self.features = f
        self.positions: dict[int, list[int]] = {}
        for q, key in enumerate(f.keys.tolist()):
            found = self.positions.setdefault(key, [])
            if len(found) < MAX_REPEATS:
                found.append(q)

    @property
    def grams(self) -> int:
        return len(self.features.grams)


def _chains(index: QueryIndex, src: Source) -> list[Chain]:
    hits: list[tuple[int, int, int]] = []
    for e, key in enumerate(src.keys.tolist()):
        for q in index.positions.get(key, ()):
            hits.append((q, int(src.word[e]), e))
    hits.sort()
    chains: list[Chain] = []
    for q, s, e in hits:
        best: Chain | None = None
        best_cost = 0
        for c in reversed(chains):
            dq, ds = q - c.q1, s - c.s1
            if dq > GAP:
                continue
            if dq > 0 and 0 < ds <= GAP and abs(dq - ds) <= DRIFT:
                cost = dq + abs(dq - ds)
                if best is None or cost < best_cost:
                    best, best_cost = c, cost
        if best is None:
            chains.append(Chain(q, s, e, q, s, e, {e}))
        else:
            best.q1, best.s1, best.e1 = q, s, e
            best.entries.add(e)
    return chains


def _extend(c: Chain, f: Features, src: Source) -> Aligned:
    words = len(f.starts)
    lo = int(src.word[c.e0 - 1]) + 1 if c.e0 > 0 else 0
    back = int((c.s0 - lo) * EXTEND + 0.5)
    last = c.s1 + K - 1
    hi = int(src.word[c.e1 + 1]) + K - 2 if c.e1 + 1 < len(src.word) else src.words - 1
    ahead = int(max(0, hi - last) * EXTEND + 0.5)
    qa = max(0, c.q0 - back)
    qz = min(words - 1, c.q1 + K - 1 + ahead)
    q_last = c.q1 + K - 1
    start, end = int(f.starts[qa]), int(f.ends[qz])
    source_start = max(0, int(src.start[c.e0]) - (int(f.starts[c.q0]) - start))
    source_end = int(src.end[c.e1]) + (end - int(f.ends[q_last]))
    return Aligned(Span(start, end, source_start, source_end), qa, qz, len(c.entries), c.e1 - c.e0 + 1)


def align(index: QueryIndex, src: Source, min_words: int) -> list[Aligned]:
    """The passages the text shares with one stored document, in text order, at least ``min_words``
    words each; where two overlap in the text, the one with more hits."""
    found = sorted(
        (_extend(c, index.features, src) for c in _chains(index, src)),
        key=lambda a: (-a.hits, a.first_word),
    )
    kept: list[Aligned] = []
    for a in found:
        if a.last_word - a.first_word + 1 < min_words:
            continue
        if any(a.first_word <= b.last_word and b.first_word <= a.last_word for b in kept):
            continue
        kept.append(a)
    return sorted(kept, key=lambda a: a.first_word)


def containment(index: QueryIndex, spans: list[Aligned]) -> float:
    """Estimated share of the text's k-grams found in the source: each span's k-grams times the share
    of the source's selected k-grams inside it that the text has (a winnowed sample of its k-grams)."""
    if not index.grams:
        return 0.0
    total = 0.0
    for a in spans:
        grams = max(0, a.last_word - a.first_word + 1 - (K - 1))
        total += grams * a.hits / max(a.entries, 1)
    return min(1.0, total / index.grams)


def coverage(length: int, spans: list[Span]) -> float:
    """Share of the text's ``length`` code points inside at least one span."""
    if not length or not spans:
        return 0.0
    marks = np.zeros(length + 1, np.int32)
    for s in spans:
        marks[s.start] += 1
        marks[s.end] -= 1
    return float(np.count_nonzero(np.cumsum(marks[:length]))) / length
