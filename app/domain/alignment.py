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

from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from neardup.domain.fingerprints import BLOB_VERSION, Features, K, Source, W, truncated

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
    #: words of the extension past the chain's ends that differ in the two texts
    differing: int = 0


class QueryIndex:
    """The text's k-gram positions by key."""

    def __init__(self, f: Features, version: int = BLOB_VERSION) -> None:
        """``version``: the passage format of the sources it is aligned with (their keys' width)."""
        self.features = f
        #: letters[i]: code points in the words before word i (word lengths, separators left out)
        self.letters = np.concatenate(([0], np.cumsum(f.ends.astype(np.int64) - f.starts)))
        self.positions: dict[int, list[int]] = {}
        for q, key in enumerate(truncated(f.keys, version).tolist()):
            found = self.positions.setdefault(key, [])
            if len(found) < MAX_REPEATS:
                found.append(q)

    @property
    def grams(self) -> int:
        return len(self.features.grams)


def _gap_agrees(qn: npt.NDArray[np.uint8], sn: npt.NDArray[np.uint8], c: Chain, q: int, s: int) -> bool:
    """Whether the words between the chain's last hit and the hit (q, s), in neither k-gram, agree
    enough for both hits to be one passage: at least GAP_AGREEMENT of them, walked from the last hit
    (following words inserted or dropped). Two hits of a template repeated in both texts (a changelog's
    "https github com ... pull") have unrelated words between them."""
    words = q - (c.q1 + K)
    if words <= 0:
        return True
    agree, _, _ = _walk(qn, sn, c.q1 + K - 1, c.s1 + K - 1, 1, words, 0)
    return agree >= GAP_AGREEMENT * words


def _chains(index: QueryIndex, src: Source) -> list[Chain]:
    hits: list[tuple[int, int, int]] = []
    for e, key in enumerate(src.keys.tolist()):
        for q in index.positions.get(key, ()):
            hits.append((q, int(src.word[e]), e))
    hits.sort()
    qn, sn = index.features.nibbles, src.nibbles
    done: list[Chain] = []
    active: list[Chain] = []  # chains whose last hit is within GAP words of the current one
    for q, s, e in hits:
        if active and q - active[0].q1 > GAP:
            done += [c for c in active if q - c.q1 > GAP]
            active = [c for c in active if q - c.q1 <= GAP]
        reachable = sorted(
            (dq + abs(dq - ds), k)
            for k, c in enumerate(active)
            if (dq := q - c.q1) > 0 and 0 < (ds := s - c.s1) <= GAP and abs(dq - ds) <= DRIFT
        )
        # the nearest chains first, and at most TRIES of them walked (repetitive texts have many)
        best = next((active[k] for _, k in reachable[:TRIES] if _gap_agrees(qn, sn, active[k], q, s)), None)
        if best is None:
            active.append(Chain(q, s, e, q, s, e, {e}))
            if len(active) > MAX_ACTIVE:
                done.append(active.pop(0))
        else:
            best.q1, best.s1, best.e1 = q, s, e
            best.entries.add(e)
        active.sort(key=lambda c: c.q1)
    return done + active


def _walk(
    qn: npt.NDArray[np.uint8], sn: npt.NDArray[np.uint8], q: int, s: int, step: int, limit: int, stop: int
) -> tuple[int, int, int]:
    """Walk the words past q (text) and s (source) in direction ``step``, at most ``limit`` of them
    (0: no limit), following a word inserted or dropped (this word and the next agree one word off);
    stop after ``stop`` differing words in a row (0: never). Returns (words that agree, how far the
    span extends: up to the last word that agrees, past a differing word only where two agree in a
    row after it, and how many of the words up to there differ)."""
    agree = best = misses = run = i = shift = agreed_at_best = 0
    contiguous = True
    nq, ns = len(qn), len(sn)
    while not limit or i < limit:
        i += 1
        qi, si = q + step * i, s + step * (i + shift)
        if not (0 <= qi < nq and 0 <= si < ns):
            break
        if qn[qi] != sn[si] and 0 <= qi + step < nq:
            for d in (1, -1):
                sj = si + step * d
                if (
                    0 <= sj < ns
                    and 0 <= sj + step < ns
                    and qn[qi] == sn[sj]
                    and qn[qi + step] == sn[sj + step]
                ):
                    shift, si = shift + d, sj
                    break
        if qn[qi] == sn[si]:
            agree, misses, run = agree + 1, 0, run + 1
            if contiguous or run >= 2:
                best, agreed_at_best = i, agree
        else:
            misses, run, contiguous = misses + 1, 0, False
            if stop and misses >= stop:
                break
    return agree, best, best - agreed_at_best


def _extend(c: Chain, index: QueryIndex, src: Source) -> Aligned:
    f = index.features
    _, back, differ_back = _walk(f.nibbles, src.nibbles, c.q0, c.s0, -1, 0, STOP_AFTER)
    q_last = c.q1 + K - 1
    _, ahead, differ_ahead = _walk(f.nibbles, src.nibbles, q_last, c.s1 + K - 1, 1, 0, STOP_AFTER)
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
        qa, qz, len(c.entries), c.e1 - c.e0 + 1, differ_back + differ_ahead,
    )  # fmt: skip


def _evidenced(a: Aligned) -> bool:
    """Whether a span is a copy rather than a template both texts follow (see SINGLE_HIT_DIFFERING)."""
    return a.hits > 1 or a.differing <= SINGLE_HIT_DIFFERING


def align(index: QueryIndex, src: Source, min_words: int, common: set[int] | None = None) -> list[Aligned]:
    """The passages the text shares with one stored document, in text order, at least ``min_words``
    words each and each with a hit on a key not in ``common`` (keys that many stored documents hold:
    boilerplate), those resting on one hit only where their extension differs in at most
    SINGLE_HIT_DIFFERING words; where two overlap in the text, the one with more hits."""
    keys = src.keys.tolist()
    chains = [c for c in _chains(index, src) if not common or any(keys[e] not in common for e in c.entries)]
    found = sorted((_extend(c, index, src) for c in chains), key=lambda a: (-a.hits, a.first_word))
    kept: list[Aligned] = []
    for a in found:
        if a.last_word - a.first_word + 1 < min_words or not _evidenced(a):
            continue
        if any(a.first_word <= b.last_word and b.first_word <= a.last_word for b in kept):
            continue
        kept.append(a)
    return sorted(kept, key=lambda a: a.first_word)


#: A span is dropped where a span of another source covers at least half of it with this many times
#: its hits: a template line or a shared fragment of the passage, beside the document it was copied
#: from (documents holding the same passage, near-equal evidence, are all kept).
OVERSHADOW = 2.0


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
