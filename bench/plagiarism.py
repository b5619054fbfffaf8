"""A plagiarism corpus built the way PAN built theirs, and PAN's text-alignment measures.

Submitted texts: held-out text that shares nothing with the stored documents (checked: no run of
``CLEAN_RUN`` words in common), into which 0 to 3 passages of 25 to 500 words copied from stored
documents are put at word boundaries, at one obfuscation level per text:

- ``none``: verbatim;
- ``light``: ~3% of the words substituted, ~5% of the words re-cased, ~5% of the spaces doubled or
  turned into line breaks;
- ``medium``: ~8% of the words edited: substituted, inserted or dropped, one third each.

Scores (Potthast et al., "An Evaluation Framework for Plagiarism Detection", COLING 2010), on the
characters of the submitted text: ``precision`` and ``recall`` macro-averaged over detections and
cases, ``granularity`` (detections per detected case, counted for the source that detects most of it),
``plagdet = F1 / log2(1 + granularity)``. A detection detects a case when it overlaps it and its source
is acceptable: the document copied from, or a stored document containing the same passage word for word.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from neardup.domain import fingerprints

LEVELS = ("none", "light", "medium")
MIN_WORDS, MAX_WORDS = 25, 500
#: Held-out text sharing a run of this many words with a stored document is not used.
CLEAN_RUN = 10
#: ... nor more than this share of its word 5-grams (template text).
TEMPLATE_SHARE = 0.05


@dataclass(frozen=True)
class Case:
    """A copied passage: where it is in the submitted text, and in its source (code points)."""

    start: int
    end: int
    source: int  # index of the stored document
    source_start: int
    source_end: int
    words: list[str]  # the copied passage's words, lower-cased, before obfuscation


@dataclass
class Submitted:
    text: str
    level: str
    cases: list[Case] = field(default_factory=list)


@dataclass(frozen=True)
class Detection:
    start: int
    end: int
    source: int
    source_start: int
    source_end: int


def word_spans(text: str) -> list[tuple[int, int]]:
    f = fingerprints.features(text)
    return list(zip(f.starts.tolist(), f.ends.tolist(), strict=True))


def lower_words(text: str) -> list[str]:
    return [text[a:b].lower() for a, b in word_spans(text)]


class StoredKeys:
    """Every word 5-gram key of the stored documents, to keep held-out text that shares none of their
    runs of CLEAN_RUN words."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.keys = np.unique(np.concatenate([fingerprints.features(t).keys for t in texts] or [np.zeros(0)]))

    def clean(self, text: str) -> bool:
        keys = fingerprints.features(text).keys
        if not len(keys):
            return True
        at = np.minimum(np.searchsorted(self.keys, keys), max(len(self.keys) - 1, 0))
        present = self.keys[at] == keys if len(self.keys) else np.zeros(len(keys), bool)
        run = CLEAN_RUN - fingerprints.K + 1  # consecutive 5-grams making a run of CLEAN_RUN words
        window = np.convolve(present.astype(np.int32), np.ones(run, np.int32), "valid")
        # and no template text: a changelog's lines share most of their 5-grams with stored changelogs
        return not bool((window >= run).any()) and float(present.mean()) <= TEMPLATE_SHARE


def _obfuscate(words: list[str], level: str, vocabulary: list[str], rng: random.Random) -> list[str]:
    if level == "none":
        return list(words)
    out: list[str] = []
    for w in words:
        r = rng.random()
        if level == "light":
            if r < 0.03:
                w = rng.choice(vocabulary)
            elif rng.random() < 0.05:
                w = w.upper() if rng.random() < 0.5 else w.capitalize()
            out.append(w)
        else:
            if r < 0.08 / 3:
                out.append(rng.choice(vocabulary))  # substituted
            elif r < 0.16 / 3:
                out += [w, rng.choice(vocabulary)]  # a word inserted after it
            elif r < 0.08:
                continue  # dropped
            else:
                out.append(w)
    return out


def _join(words: list[str], level: str, rng: random.Random) -> str:
    if level != "light":
        return " ".join(words)
    parts = []
    for i, w in enumerate(words):
        if i:
            r = rng.random()
            parts.append("  " if r < 0.025 else "\n" if r < 0.05 else " ")
        parts.append(w)
    return "".join(parts)


def make_texts(
    stored: Sequence[str],
    held_out: Sequence[str],
    count: int,
    seed: int = 15,
    total_words: int = 1500,
) -> list[Submitted]:
    """``count`` submitted texts of about ``total_words`` words, levels and copy counts in turn."""
    rng = random.Random(seed)
    vocabulary = sorted({w for t in held_out[:200] for w in t.split() if w.isalpha()}) or ["word"]
    base_words: list[str] = []
    for t in held_out:
        base_words += t.split()
    long_enough = [i for i, t in enumerate(stored) if len(t.split()) >= 60]
    out: list[Submitted] = []
    at = 0
    for n in range(count):
        level = LEVELS[n % 3]
        copies = (n // 3) % 4
        chosen: list[tuple[int, int, int, str]] = []  # (source, first word, last word, passage text)
        for _ in range(copies):
            source = rng.choice(long_enough)
            spans = word_spans(stored[source])
            length = min(rng.randint(MIN_WORDS, MAX_WORDS), len(spans))
            first = rng.randrange(0, len(spans) - length + 1)
            chosen.append((source, first, first + length - 1, stored[source]))
        copied_words = sum(c[2] - c[1] + 1 for c in chosen)
        own = max(300, total_words - copied_words)
        if at + own > len(base_words):
            at = 0
        own_words = base_words[at : at + own]
        at += own
        # Where the passages go: distinct word boundaries of the own text, in order.
        cuts = sorted(rng.sample(range(len(own_words) + 1), len(chosen)))
        text, cases = "", []
        previous = 0
        for (source, first, last, stored_text), cut in zip(chosen, cuts, strict=True):
            text += (" " if text else "") + " ".join(own_words[previous:cut])
            previous = cut
            spans = word_spans(stored_text)
            s_start, s_end = spans[first][0], spans[last][1]
            original = [stored_text[a:b] for a, b in spans[first : last + 1]]
            passage = _join(_obfuscate(original, level, vocabulary, rng), level, rng)
            text += " " if text else ""
            start = len(text)
            text += passage
            cases.append(Case(start, len(text), source, s_start, s_end, [w.lower() for w in original]))
        tail = " ".join(own_words[previous:])
        text += (" " if text and tail else "") + tail
        out.append(Submitted(text, level, cases))
    return out


class Words(Protocol):
    """Stored document index -> its lower-cased words joined by single spaces."""

    def get(self, i: int, default: str = "") -> str: ...


def acceptable(case: Case, source: int, stored_words: Words, part: tuple[int, int] | None = None) -> bool:
    """The copied document, or a stored one containing the passage: the passage word for word, or at
    least half of the word 5-grams of ``part`` of it (code points of the submitted text: the part a
    detection covers; the same passage is often in several stored documents, a licence footer, the
    same file in several releases, with small differences)."""
    if source == case.source:
        return True
    theirs = f" {stored_words.get(source, '')} "
    if f" {' '.join(case.words)} " in theirs:
        return True
    if part is None:
        return False
    n = len(case.words)
    length = max(case.end - case.start, 1)
    first = max(0, (max(part[0], case.start) - case.start) * n // length)
    last = min(n, -(-(min(part[1], case.end) - case.start) * n // length))
    grams = {" ".join(case.words[i : i + 5]) for i in range(first, max(first + 1, last - 4))}
    return sum(f" {g} " in theirs for g in grams) >= 0.5 * len(grams)


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def score(
    texts: Sequence[Submitted], found: Sequence[list[Detection]], stored_words: Words
) -> dict[str, Any]:
    """PAN's measures on the submitted texts' characters, plus source accuracy and source offsets."""
    case_recall: list[float] = []
    detection_precision: list[float] = []
    granularity: list[int] = []
    source_right = source_cases = 0
    source_overlap: list[float] = []
    for submitted, detections in zip(texts, found, strict=True):
        covered_by_detection = [np.zeros(0, bool) for _ in detections]
        for k, d in enumerate(detections):
            covered_by_detection[k] = np.zeros(d.end - d.start, bool)
        for case in submitted.cases:
            chars = np.zeros(case.end - case.start, bool)
            per_source: dict[int, int] = {}
            for k, d in enumerate(detections):
                if not _overlap(case.start, case.end, d.start, d.end):
                    continue
                if not acceptable(case, d.source, stored_words, (d.start, d.end)):
                    continue
                a, b = max(case.start, d.start), min(case.end, d.end)
                chars[a - case.start : b - case.start] = True
                covered_by_detection[k][a - d.start : b - d.start] = True
                per_source[d.source] = per_source.get(d.source, 0) + 1
            case_recall.append(float(chars.mean()) if len(chars) else 0.0)
            if per_source:
                best = max(per_source, key=lambda s: (s == case.source, per_source[s]))
                granularity.append(per_source[best])
            hits = [d for d in detections if _overlap(case.start, case.end, d.start, d.end)]
            if hits:
                source_cases += 1
                top = max(hits, key=lambda d: _overlap(case.start, case.end, d.start, d.end))
                source_right += acceptable(case, top.source, stored_words, (top.start, top.end))
                for d in hits:
                    if d.source == case.source:
                        both = _overlap(case.source_start, case.source_end, d.source_start, d.source_end)
                        union = max(case.source_end, d.source_end) - min(case.source_start, d.source_start)
                        source_overlap.append(both / union if union else 0.0)
        detection_precision += [float(c.mean()) if len(c) else 0.0 for c in covered_by_detection]
    precision = float(np.mean(detection_precision)) if detection_precision else 1.0
    recall = float(np.mean(case_recall)) if case_recall else 1.0
    gran = float(np.mean(granularity)) if granularity else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "cases": len(case_recall),
        "detections": len(detection_precision),
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "granularity": round(gran, 4),
        "plagdet": round(f1 / math.log2(1 + gran), 4),
        "source_accuracy": round(source_right / source_cases, 4) if source_cases else None,
        "source_offsets_jaccard_mean": round(float(np.mean(source_overlap)), 4) if source_overlap else None,
    }
