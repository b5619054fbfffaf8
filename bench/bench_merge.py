"""Exact mode's sorted-set intersection kernel, per instruction set: pair comparisons per second.

Pairs are real candidates: every truth pair of the corpus (``bench/truth.py``, Jaccard >= 0.5; the
sets are the 32-bit shingle hashes exact mode stores). Two measures, one thread, median of repeats:

- ``floor_*``: every truth pair in both directions, grouped per query document, one call per query
  (as verification does it: a Python call per document, its candidates in one native call), with
  the floor at the threshold (early abort: a pair that cannot reach it stops) and at 0 (every merge
  runs to the end);
- ``kernel_one_call``: 40 random documents each against 2,000 random others in one native call each,
  floor 0: the merge itself, with no Python between pairs.

    python bench/bench_merge.py --output bench/results/merge.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus as corpus_module  # noqa: E402
import truth as truth_module  # noqa: E402

from neardup import sketch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=HERE / "data" / "corpus.jsonl")
    parser.add_argument("--truth", type=Path, default=HERE / "data" / "truth.npz")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    docs = corpus_module.load(args.corpus)
    loaded = truth_module.load_truth(args.truth)
    texts = [d["text"] for d in docs]
    _, flat, offsets = sketch.exact_sketches(texts)
    pi, pj = loaded["i"].astype(np.int64), loaded["j"].astype(np.int64)
    # Each pair in both directions, grouped by query document: one call per query.
    qa, qb = np.concatenate([pi, pj]), np.concatenate([pj, pi])
    order = np.argsort(qa, kind="stable")
    qa, qb = qa[order], qb[order]
    starts = np.flatnonzero(np.r_[True, qa[1:] != qa[:-1]])
    groups = [(int(qa[s]), qb[s:e]) for s, e in zip(starts, np.r_[starts[1:], len(qa)], strict=True)]
    queries = [(flat[offsets[q] : offsets[q + 1]], rows) for q, rows in groups]
    sizes = np.diff(offsets)
    report: dict[str, Any] = {
        "pairs": len(qa),
        "queries": len(groups),
        "mean_set_size": round(float(sizes.mean()), 1),
        "mean_pair_elements": round(float((sizes[qa] + sizes[qb]).mean()), 1),
        "isa": {},
    }
    for isa in sketch.available_isas():
        entry = {}
        for floor in (0.8, 0.0):
            runs = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                for q, rows in queries:
                    sketch.exact_similarity(q, flat, offsets, rows, floor=floor, isa=isa)  # type: ignore[arg-type]
                runs.append(time.perf_counter() - started)
            seconds = statistics.median(runs)
            entry[f"floor_{floor}"] = {
                "seconds": round(seconds, 4),
                "pairs_per_second": round(len(qa) / seconds),
                "elements_per_second": round(float((sizes[qa] + sizes[qb]).sum()) / seconds),
            }
        # The kernel alone: 40 query documents, each against 2,000 others in one call (no early abort,
        # no Python between pairs).
        rng = np.random.default_rng(1)
        picks = [
            (int(q), rng.choice(len(sizes), size=2000, replace=False)) for q in rng.choice(len(sizes), 40)
        ]
        runs = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            for q, rows in picks:
                sketch.exact_similarity(flat[offsets[q] : offsets[q + 1]], flat, offsets, rows, isa=isa)  # type: ignore[arg-type]
            runs.append(time.perf_counter() - started)
        seconds = statistics.median(runs)
        elements = float(sum((sizes[q] + sizes[rows]).sum() for q, rows in picks))
        entry["kernel_one_call"] = {
            "pairs_per_second": round(40 * 2000 / seconds),
            "elements_per_second": round(elements / seconds),
            "mean_pair_elements": round(elements / 80000, 1),
        }
        report["isa"][isa] = entry
        print(isa, json.dumps(entry), flush=True)
    serial = report["isa"]["serial"]["floor_0.8"]["pairs_per_second"]
    kernel = report["isa"]["serial"]["kernel_one_call"]["elements_per_second"]
    report["over_serial"] = {
        isa: {
            "truth_pairs_floor_0.8": round(e["floor_0.8"]["pairs_per_second"] / serial, 2),
            "kernel_one_call": round(e["kernel_one_call"]["elements_per_second"] / kernel, 2),
        }
        for isa, e in report["isa"].items()
    }
    text = json.dumps(report, indent=1)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
