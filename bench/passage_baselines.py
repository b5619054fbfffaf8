"""What a plagiarism-check user would otherwise run, for bench_passages.py's comparison:

- ``pairwise``: a MOSS-style comparison (winnowing, Schleimer et al. 2003; what MOSS and copydetect do):
  the winnowed fingerprints of the text against those of every stored document, one pair at a time; a
  document sharing at least ``PAIRWISE_MIN_SHARED`` fingerprints is reported. The same k-grams as
  neardup's (word 5-grams, its hashes) winnowed with a window of 21 (neardup itself samples every 21st
  k-gram of a stored document and reads every k-gram of the text), so the difference is the index and
  the pairing, not the words.
- ``lsh_ensemble``: datasketch's LSH Ensemble (Zhu et al. 2016) over MinHash signatures of every stored
  document's word 5-grams, queried with the text's for containment >= ``LSH_THRESHOLD``: documents, no
  passages, no offsets; built once in bulk.

Both answer at document level; they are scored as such (source recall and false sources per text).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from datasketch import MinHash, MinHashLSHEnsemble  # type: ignore[import-untyped]

from neardup.domain import fingerprints

PAIRWISE_MIN_SHARED = 2
LSH_THRESHOLD = 0.05
LSH_PERM = 128


WINDOW = fingerprints.W


def winnowed(text: str) -> np.ndarray:
    """The text's winnowed k-gram hashes: in every window of WINDOW consecutive k-grams the smallest
    (the rightmost on ties)."""
    keys = fingerprints.features(text).keys
    if len(keys) <= WINDOW:
        return np.unique(keys[len(keys) - 1 - np.argmin(keys[::-1])]) if len(keys) else keys
    windows = np.lib.stride_tricks.sliding_window_view(keys, WINDOW)
    picks = np.arange(len(windows)) + WINDOW - 1 - np.argmin(windows[:, ::-1], axis=1)
    return np.unique(keys[picks])


def pairwise(stored: Sequence[str], texts: Sequence[str]) -> tuple[list[set[int]], dict[str, Any]]:
    started = time.perf_counter()
    prints = [winnowed(t) for t in stored]
    build = time.perf_counter() - started
    found, times = [], []
    for text in texts:
        started = time.perf_counter()
        mine = winnowed(text)
        hits = {
            i
            for i, theirs in enumerate(prints)
            if len(np.intersect1d(mine, theirs, assume_unique=True)) >= PAIRWISE_MIN_SHARED
        }
        times.append(time.perf_counter() - started)
        found.append(hits)
    return found, {
        "fingerprint_s": round(build, 2),
        "query_ms_median": round(float(np.median(times)) * 1e3, 1),
    }


def _minhash(text: str) -> tuple[MinHash, int]:
    keys = np.unique(fingerprints.features(text).keys)
    m = MinHash(num_perm=LSH_PERM, seed=1)
    m.update_batch([int(k).to_bytes(8, "little") for k in keys])
    return m, max(1, len(keys))


def lsh_ensemble(stored: Sequence[str], texts: Sequence[str]) -> tuple[list[set[int]], dict[str, Any]]:
    started = time.perf_counter()
    entries = [(i, *_minhash(t)) for i, t in enumerate(stored)]
    index = MinHashLSHEnsemble(threshold=LSH_THRESHOLD, num_perm=LSH_PERM, num_part=16)
    index.index(entries)
    build = time.perf_counter() - started
    found, times = [], []
    for text in texts:
        started = time.perf_counter()
        m, size = _minhash(text)
        found.append(set(index.query(m, size)))
        times.append(time.perf_counter() - started)
    return found, {"build_s": round(build, 2), "query_ms_median": round(float(np.median(times)) * 1e3, 2)}


def document_scores(truth: Sequence[list[Any]], found: Sequence[set[int]], acceptable: Any) -> dict[str, Any]:
    """``truth[t]``: the cases of text t (plagiarism.Case); ``acceptable(case, source)``: whether a
    reported source is right for that case."""
    cases = hit = false = 0
    clean_texts = clean_with_any = 0
    for cases_of, reported in zip(truth, found, strict=True):
        for case in cases_of:
            cases += 1
            hit += any(acceptable(case, s) for s in reported)
        false += sum(not any(acceptable(c, s) for c in cases_of) for s in reported)
        if not cases_of:
            clean_texts += 1
            clean_with_any += bool(reported)
    return {
        "source_recall": round(hit / cases, 4) if cases else None,
        "false_sources_per_text": round(false / len(found), 3) if found else None,
        "clean_texts_with_a_source": round(clean_with_any / clean_texts, 4) if clean_texts else None,
    }
