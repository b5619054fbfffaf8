"""The native alignment (native/alignment.cpp, through neardup.domain.alignment) answers exactly as a
plain Python reference of the same rules does: hits chained along the diagonal, each chain walked past
its ends, the reportable chains kept most hits first, kept chains one right after the other in both texts
joined. The reference walks every chain; the native code
skips chains whose hits overlap a kept one, which must change nothing. Texts: copies with substitutions,
insertions and deletions, repeated phrases and periodic runs (many chains on many diagonals)."""

from __future__ import annotations

import random

import pytest

from neardup.domain import alignment, fingerprints
from neardup.domain.alignment import (
    DRIFT,
    GAP,
    GAP_AGREEMENT,
    MAX_ACTIVE,
    SINGLE_HIT_DIFFERING,
    STOP_AFTER,
    TRIES,
)
from neardup.domain.fingerprints import K

Nibbles = list[int]


def walk(qn: Nibbles, sn: Nibbles, q: int, s: int, step: int, limit: int, stop: int) -> tuple[int, int, int]:
    agree = best = misses = run = i = shift = agreed_at_best = 0
    contiguous = True
    while not limit or i < limit:
        i += 1
        qi, si = q + step * i, s + step * (i + shift)
        if not (0 <= qi < len(qn) and 0 <= si < len(sn)):
            break
        if qn[qi] != sn[si] and 0 <= qi + step < len(qn):
            for d in (1, -1):
                sj = si + step * d
                if (
                    0 <= sj < len(sn)
                    and 0 <= sj + step < len(sn)
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


def reference(text: str, source: str, min_words: int, join: bool = True) -> tuple[list[tuple[int, ...]], int]:
    """The rows kept (``join``: those one right after the other joined), and how many chains were
    reportable before overlapping ones were left out."""
    f = fingerprints.features(text)
    src = fingerprints.unpack(fingerprints.blob(source))
    positions: dict[int, list[int]] = {}
    for q, key in enumerate(fingerprints.key_values(f.keys).tolist()):
        if len(found := positions.setdefault(key, [])) < alignment.MAX_REPEATS:
            found.append(q)
    keys, words = src.keys.tolist(), src.word.tolist()
    hits = sorted((q, words[e], e) for e, key in enumerate(keys) for q in positions.get(key, ()))
    qn, sn = f.nibbles.tolist(), src.nibbles.tolist()
    done: list[list[int]] = []  # q0, s0, e0, q1, s1, e1, hits
    active: list[list[int]] = []
    for q, s, e in hits:
        done += [c for c in active if q - c[3] > GAP]
        active = [c for c in active if q - c[3] <= GAP]
        reachable = sorted(
            (dq + abs(dq - ds), k)
            for k, c in enumerate(active)
            if (dq := q - c[3]) > 0 and 0 < (ds := s - c[4]) <= GAP and abs(dq - ds) <= DRIFT
        )
        best = None
        for _, k in reachable[:TRIES]:
            c = active[k]
            between = q - (c[3] + K)
            if (
                between <= 0
                or walk(qn, sn, c[3] + K - 1, c[4] + K - 1, 1, between, 0)[0] >= GAP_AGREEMENT * between
            ):
                best = c
                break
        if best is None:
            active.append([q, s, e, q, s, e, 1])
            if len(active) > MAX_ACTIVE:
                done.append(active.pop(0))
        else:
            best[3:7] = [q, s, e, best[6] + 1]
        active.sort(key=lambda c: c[3])
    found = []
    for c in done + active:
        _, back, differ_back = walk(qn, sn, c[0], c[1], -1, 0, STOP_AFTER)
        _, ahead, differ_ahead = walk(qn, sn, c[3] + K - 1, c[4] + K - 1, 1, 0, STOP_AFTER)
        first, last = c[0] - back, c[3] + K - 1 + ahead
        if last - first + 1 >= min_words and (c[6] > 1 or differ_back + differ_ahead <= SINGLE_HIT_DIFFERING):
            found.append((first, last, (*c, back, differ_back, ahead, differ_ahead)))
    kept: list[tuple[int, int, tuple[int, ...]]] = []
    for first, last, row in sorted(found, key=lambda x: (-x[2][6], x[2][0])):
        if not any(first <= b_last and b_first <= last for b_first, b_last, _ in kept):
            kept.append((first, last, row))
    joined: list[tuple[int, int, tuple[int, ...]]] = []
    for first, last, row in sorted(kept):
        if joined and join:
            a_first, a_last, a = joined[-1]
            text_gap = first - a_last - 1
            source_gap = (row[1] - row[7]) - (a[4] + K - 1 + a[9]) - 1
            if 0 <= source_gap <= GAP and text_gap <= GAP and abs(text_gap - source_gap) <= DRIFT:
                # the first's start and walk back, the second's end and walk ahead, the hits of both
                joined[-1] = (a_first, last, (*a[:3], *row[3:6], a[6] + row[6], *a[7:9], *row[9:]))
                continue
        joined.append((first, last, row))
    return [row for _, _, row in joined], len(found)


def native(text: str, source: str, min_words: int) -> list[tuple[int, ...]]:
    query = alignment.QueryIndex(fingerprints.features(text))
    src = fingerprints.unpack(fingerprints.blob(source))
    return [
        (c.q0, c.s0, c.e0, c.q1, c.s1, c.e1, c.hits, c.back, c.differ_back, c.ahead, c.differ_ahead)
        for c in alignment._chains(query, src, min_words)
    ]


def edited(rng: random.Random, words: list[str], vocab: list[str], rate: float) -> list[str]:
    out: list[str] = []
    for w in words:
        r = rng.random()
        if r < rate / 3:
            out.append(rng.choice(vocab))  # substituted
        elif r < 2 * rate / 3:
            out += [w, rng.choice(vocab)]  # a word inserted
        elif r >= rate:
            out.append(w)  # else dropped
    return out


def case(seed: int) -> tuple[str, str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(rng.choice([8, 40, 3000]))]
    source = [rng.choice(vocab) for _ in range(rng.randint(100, 900))]
    if rng.random() < 0.5:  # a periodic run or a repeated phrase in the source
        unit = [rng.choice(vocab) for _ in range(rng.randint(1, 6))]
        at = rng.randrange(len(source))
        source[at:at] = unit * rng.randint(5, 60)
    text = [rng.choice(vocab) for _ in range(rng.randint(50, 300))]
    for _ in range(rng.randint(1, 4)):  # copied passages, edited
        start = rng.randrange(len(source))
        passage = source[start : start + rng.randint(10, 300)]
        at = rng.randrange(len(text))
        text[at:at] = edited(rng, passage, vocab, rng.choice([0.0, 0.03, 0.08, 0.2]))
    return " ".join(text), " ".join(source)


@pytest.mark.parametrize("seed", range(120))
def test_the_native_alignment_answers_as_the_reference(seed: int) -> None:
    text, source = case(seed)
    for min_words in (1, 20):
        expected, _ = reference(text, source, min_words)
        assert native(text, source, min_words) == expected


def test_the_cases_hold_copies_and_repetitions() -> None:
    """The comparison above is not vacuous: its cases have spans, multi-hit chains, overlapping
    reportable chains of which only one is kept (what the native code skips walking), and joined ones."""
    spans = multi = overlapped = 0
    for seed in range(120):
        rows, reportable = reference(*case(seed), 20)
        spans += len(rows)
        multi += sum(r[6] > 1 for r in rows)
        overlapped += reportable > len(rows)
    assert spans > 150 and multi > 100 and overlapped > 20
    joined = sum(
        len(reference(*case(seed), 20)[0]) < len(reference(*case(seed), 20, join=False)[0])
        for seed in range(240)
    )
    assert joined > 5
