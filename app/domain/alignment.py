"""From shared fingerprints to passages: the hits of a text's k-grams on a stored document's selected
ones, chained along the diagonal into spans, each extended to its estimated edges, and the text's
containment and coverage (docs/design.md, "Passages").

A hit pairs a k-gram of the text (index q, words q .. q+K-1) with a selected k-gram of the source
(its first word s) of the same key. A copied passage makes hits on one diagonal q - s; light edits
move the diagonal a little (a word inserted or dropped) and remove some hits (a substituted word
breaks the K k-grams that hold it), so consecutive hits of one passage are chained when both texts
move forward by at most GAP words and the diagonal by at most DRIFT.

Edges: the source's selected k-grams are up to W words apart, so the first and last hits of a span
can be W words inside the passage. The passage blob keeps 4 bits of every word's hash, so a span is
extended word by word from its first hit backwards and from its last hit forwards while the words of
both texts agree, past an isolated differing word (a substitution) where two agree in a row after it,
until two differ in a row: a word of unrelated text agrees by chance one time in 16, so an edge
overshoots by about 0.07 words on average. In the source, the extension's words are the text's, and
between them the text's own gaps where they are the source's inside the span (a plain copy), else the
source's mean gap. A span is reported when it covers at least ``min_words`` words of the text: a chance
match of one k-gram (a common phrase) extends by no more than chance and stays below; and, when it rests
on a single hit, when at most SINGLE_HIT_DIFFERING words of its extension differ (a template both texts
follow, a listing, agrees through its repeated words and differs in the rest).
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from neardup import _native
from neardup.domain.fingerprints import Features, K, Source, W, key_values

T = TypeVar("T")

#: Most words between consecutive hits of one passage, in either text.
GAP = 3 * W
#: Most words the diagonal may move between consecutive hits.
DRIFT = 8
#: Occurrences of one key in the text that are paired with a source k-gram (a phrase repeated more
#: often than this only pairs its first occurrences).
MAX_REPEATS = 8
#: Share of the words between two hits that must agree (4-bit word hashes) to chain them.
GAP_AGREEMENT = 0.5
#: Chains a hit may join, tried nearest first; chains kept open at once (the oldest close first).
TRIES = 3
MAX_ACTIVE = 64
#: Differing words in a row that end the word-by-word extension of an edge.
STOP_AFTER = 2
#: Most words of a span's extension (past its chain's first and last hit) that may differ in the two
#: texts when the span rests on one hit. A copy long enough to be reported holds a selected k-gram
#: every ~11 words, so one with a single hit is short and, if lightly edited, differs in a word or two;
#: a template or a listing both texts follow (a man page's index of properties, each line the same
#: four words and one that differs; a dump whose numbers differ) shares one k-gram by chance and then
#: agrees word by word through most of its repeated words only.
SINGLE_HIT_DIFFERING = 2


@dataclass(frozen=True)
class Span:
    """Code points, ``end`` exclusive, in the text (``start``/``end``) and the stored one."""

    start: int
    end: int
    source_start: int
    source_end: int


@dataclass(frozen=True)
class Chain:
    """Hits chained into one passage: the first (q0, s0, entry e0) and the last (q1, s1, e1); ``hits``
    of them; the words its edges extend by (``back`` from the first
    hit, ``ahead`` past the last hit's k-gram) and how many of them differ in the two texts."""

    q0: int
    s0: int
    e0: int
    q1: int
    s1: int
    e1: int
    hits: int
    back: int
    differ_back: int
    ahead: int
    differ_ahead: int


@dataclass(frozen=True)
class Aligned:
    """A span with the query words it covers (first, last) and the evidence behind it."""

    span: Span
    first_word: int
    last_word: int
    hits: int
    entries: int
    #: words of the extension past the chain's ends that differ in the two texts
    differing: int = 0


class QueryIndex:
    """The text's k-gram positions by key: ``keys`` sorted, ``positions`` the words of each key's first
    MAX_REPEATS occurrences (in text order within a key)."""

    def __init__(self, f: Features) -> None:
        self.features = f
        #: letters[i]: code points in the words before word i (word lengths, separators left out)
        self.letters = np.concatenate(([0], np.cumsum(f.ends.astype(np.int64) - f.starts)))
        keys = key_values(f.keys)  # 32 bits, as a stored blob holds them
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else order
        rank = np.arange(len(ordered)) - np.repeat(first, np.diff(np.r_[first, len(ordered)]))
        kept = rank < MAX_REPEATS
        self.keys = np.ascontiguousarray(ordered[kept], np.uint64)
        self.positions = np.ascontiguousarray(order[kept], np.int64)

    @property
    def grams(self) -> int:
        return len(self.features.grams)


def _chains(index: QueryIndex, src: Source, min_words: int) -> list[Chain]:
    """The chains reported, in text order (native/alignment.cpp). The text's hits on the source's
    selected k-grams, in text order, each join the nearest of at most TRIES open chains it can continue
    (both texts forward by at most GAP words, the diagonal moved by at most DRIFT, the words between
    agreeing: GAP_AGREEMENT), else open one; at most MAX_ACTIVE are open at once, the oldest closing
    first. Then, most hits first (ties: the earliest first hit), a chain is walked past its ends word by
    word (STOP_AFTER differing words in a row end a walk) and kept when it covers ``min_words`` words,
    is evidenced (SINGLE_HIT_DIFFERING) and overlaps no chain kept before it; one whose hits overlap a
    kept chain is not walked."""
    params = _native.AlignParams(
        K, GAP, DRIFT, TRIES, MAX_ACTIVE, GAP_AGREEMENT, STOP_AFTER, min_words, SINGLE_HIT_DIFFERING
    )
    rows = _native.passage_align(
        index.keys, index.positions, src.keys, src.word, index.features.nibbles, src.nibbles, params
    )
    return [Chain(*row) for row in rows.tolist()]


def _extend(c: Chain, index: QueryIndex, src: Source) -> Aligned:
    f = index.features
    back, ahead = c.back, c.ahead
    q_last = c.q1 + K - 1
    qa, qz = c.q0 - back, q_last + ahead
    start, end = int(f.starts[qa]), int(f.ends[qz])
    # In the source the extension's words are the text's. Between words: the text's own characters
    # where its gaps are the source's inside the span (a plain copy), else the source's mean gap (white
    # space the text changed).
    letters = index.letters
    before = int(f.starts[c.q0]) - start
    after = end - int(f.ends[q_last])
    if c.s1 > c.s0:
        words = c.s1 - c.s0
        text_gap = (int(f.starts[c.q1]) - int(f.starts[c.q0]) - int(letters[c.q1] - letters[c.q0])) / max(
            c.q1 - c.q0, 1
        )
        gap = (int(src.start[c.e1]) - int(src.start[c.e0]) - int(letters[c.q1] - letters[c.q0])) / words
        if abs(text_gap - gap) > 0.25:
            before = int(letters[c.q0] - letters[qa]) + round(back * max(gap, 0.0))
            after = int(letters[qz + 1] - letters[q_last + 1]) + round(ahead * max(gap, 0.0))
    source_start = max(0, int(src.start[c.e0]) - before)
    source_end = int(src.end[c.e1]) + after
    return Aligned(
        Span(start, end, source_start, source_end),
        qa, qz, c.hits, c.e1 - c.e0 + 1, c.differ_back + c.differ_ahead,
    )  # fmt: skip


def align(index: QueryIndex, src: Source, min_words: int) -> list[Aligned]:
    """The passages the text shares with one stored document, in text order, at least ``min_words``
    words each, those resting on one hit only where their extension differs in at most
    SINGLE_HIT_DIFFERING words; where two overlap in the text, the one with more hits."""
    return [_extend(c, index, src) for c in _chains(index, src, min_words)]


#: A span is dropped where a span of another source covers at least half of it with this many times
#: its hits: a template line or a shared fragment of the passage, beside the document it was copied
#: from (documents holding the same passage, near-equal evidence, are all kept).
OVERSHADOW = 2.0
#: Attribution: sources whose gains differ by less than this many words (counted as _CHARS_PER_WORD code
#: points each) are near ties, taken in order of edges that differ least from the text.
NEAR_TIE_WORDS = 16
_CHARS_PER_WORD = 6


def drop_overshadowed(found: list[tuple[T, list[Aligned]]]) -> list[tuple[T, list[Aligned]]]:
    """Per source (any payload ``T``) its spans, without those another source's spans overshadow;
    sources left without a span are dropped."""
    every = [(i, a) for i, (_, spans) in enumerate(found) for a in spans]
    out: list[tuple[T, list[Aligned]]] = []
    for i, (payload, spans) in enumerate(found):
        kept = [
            a
            for a in spans
            if not any(
                j != i
                and b.hits >= OVERSHADOW * a.hits
                and 2 * (min(a.span.end, b.span.end) - max(a.span.start, b.span.start))
                >= a.span.end - a.span.start
                for j, b in every
            )
        ]
        if kept:
            out.append((payload, kept))
    return out


@dataclass(frozen=True)
class Found(Generic[T]):
    """A source (any payload ``T``) with its spans, its containment and a key that breaks ties."""

    payload: T
    containment: float
    key: str
    spans: list[Aligned]


@dataclass(frozen=True)
class Attributed(Generic[T]):
    """A span attributed to its source, and the spans of other sources holding the same passage
    (``copies``, one per source, most hits first)."""

    span: Aligned
    copies: list[tuple[Found[T], Aligned]]


def attribute(found: list[Found[T]]) -> list[tuple[Found[T], list[Attributed[T]]]]:
    """Each passage to its best source, as plagiarism reports do: greedily, the source whose new spans
    cover the most text not covered yet (ties: higher containment, then key) comes next, with those
    spans; a span is new when at least half of it is not covered yet. A source that brings no new span
    is not a source of its own: each of its spans (and every span of a source that was not new when
    the source came) is a copy, grouped under the attributed span it overlaps most (the earliest
    attributed on ties; one place per source under a span), so that ten copies of one passage take
    one place, not ten. Sources in attribution order, each with its attributed spans in text order.

    A source's gain only shrinks as the covered text grows, so the greedy is lazy (Minoux): a source
    is scored again only when its stale gain is the best left; a long text with 64 sources of many
    spans each costs a few thousand span scores."""
    ranked = sorted(found, key=lambda f: (-f.containment, f.key))
    covered: list[tuple[int, int]] = []
    order: list[tuple[Found[T], list[Attributed[T]]]] = []
    heap = [(-sum(a.span.end - a.span.start for a in f.spans), rank) for rank, f in enumerate(ranked)]
    heapq.heapify(heap)

    def new_spans(rank: int) -> tuple[int, list[Aligned]]:
        new = [a for a in ranked[rank].spans if 2 * _uncovered(covered, a.span) >= a.span.end - a.span.start]
        return sum(_uncovered(covered, a.span) for a in new), new

    while heap:
        _, rank = heapq.heappop(heap)
        gain, new = new_spans(rank)
        if not gain:
            continue
        if heap and (-gain, rank) > heap[0]:  # another source may gain more now: score it first
            heapq.heappush(heap, (-gain, rank))
            continue
        # Near ties: copies of one passage gain the same but for their edges, where the text's words
        # agree with a copy's by chance (one word in 16) and the span runs on a few words; the best
        # source is the one whose edges differ least from the text and that ran least far (then the
        # most hits), not the one that ran furthest.
        close = [(gain, rank, new)]
        while heap and -heap[0][0] >= gain - NEAR_TIE_WORDS * _CHARS_PER_WORD:
            _, other = heapq.heappop(heap)
            g, n = new_spans(other)
            if g and g >= gain - NEAR_TIE_WORDS * _CHARS_PER_WORD:
                close.append((g, other, n))
            elif g:
                heapq.heappush(heap, (-g, other))
        winner = min(
            close, key=lambda c: (sum(a.differing for a in c[2]), c[0], -sum(a.hits for a in c[2]), c[1])
        )
        for g, other, _ in close:
            if other != winner[1]:
                heapq.heappush(heap, (-g, other))
        _, rank, new = winner
        order.append((ranked[rank], [Attributed(a, []) for a in new]))
        covered = _union(covered, [(a.span.start, a.span.end) for a in new])
    targets = sorted(
        ((t.span.span.start, i, t) for i, t in enumerate(t for _, spans in order for t in spans)),
        key=lambda x: x[:2],
    )
    starts = [start for start, _, _ in targets]
    longest = max((t.span.span.end - start for start, _, t in targets), default=0)
    owners = {id(t.span) for _, _, t in targets}
    for f in ranked:
        grouped: set[int] = set()
        for a in f.spans:
            if id(a) in owners:
                continue
            # attributed spans overlapping a start less than ``longest`` before it
            near = targets[
                bisect.bisect_left(starts, a.span.start - longest) : bisect.bisect_left(starts, a.span.end)
            ]
            best = max(near, key=lambda x: (_overlap(x[2].span.span, a.span), -x[1]), default=None)
            if best is None or not _overlap(best[2].span.span, a.span) or best[1] in grouped:
                continue
            grouped.add(best[1])
            best[2].copies.append((f, a))
    for _, _, t in targets:
        t.copies.sort(key=lambda c: (-c[1].hits, -c[0].containment, c[0].key))
    return order


def _overlap(a: Span, b: Span) -> int:
    return max(0, min(a.end, b.end) - max(a.start, b.start))


def _uncovered(covered: list[tuple[int, int]], span: Span) -> int:
    """Code points of ``span`` outside ``covered`` (disjoint intervals in order)."""
    inside = 0
    i = max(0, bisect.bisect_left(covered, (span.start,)) - 1)
    while i < len(covered) and covered[i][0] < span.end:
        inside += max(0, min(covered[i][1], span.end) - max(covered[i][0], span.start))
        i += 1
    return span.end - span.start - inside


def _union(covered: list[tuple[int, int]], more: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint intervals in order covering both lists."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(covered + more):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def containment(index: QueryIndex, spans: list[Aligned]) -> float:
    """Estimated share of the text's k-grams found in the source: each span's k-grams times the share
    of the source's selected k-grams inside it that the text has (a sample of its k-grams)."""
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
