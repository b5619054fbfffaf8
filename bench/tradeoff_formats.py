"""Precision and recall per threshold for each sketch format at its defaults, in this process with the
service's own code: the collection's band keys (a pair is a candidate when it shares one), its
verification (``banding.candidate_scorer``) and its floor (``index.collection_floor``), against the
exact truth (``bench/truth.py``). Pairs below the truth threshold 0.5 are not scored (they cannot be
predicted at 0.5 and above without an estimate that far off: none was in the service runs).

Sets: the **natural** truth pairs, and the **even-spread** pairs of ``bench_estimators.even_spread``
(the same number from each 0.05-wide bucket of Jaccard 0.5 .. 1.0).

    python bench/tradeoff_formats.py --output bench/results/tradeoff_formats.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus as corpus_module  # noqa: E402
import truth as truth_module  # noqa: E402
from bench_estimators import even_spread  # noqa: E402

from neardup.domain.banding import candidate_scorer, sketch_texts  # noqa: E402
from neardup.domain.index import collection_floor  # noqa: E402
from neardup.domain.models import CollectionParams  # noqa: E402

THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
FORMATS: dict[str, dict[str, Any]] = {
    "v1": {"sketch_format": 1},
    "v2": {"sketch_format": 2},
    "v3": {"sketch_format": 3},
    "exact": {"verify": "exact"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=HERE / "data" / "corpus.jsonl")
    parser.add_argument("--truth", type=Path, default=HERE / "data" / "truth.npz")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    docs = corpus_module.load(args.corpus)
    texts = [d["text"] for d in docs]
    loaded = truth_module.load_truth(args.truth)
    pi, pj = loaded["i"].astype(np.int64), loaded["j"].astype(np.int64)
    jac = loaded["inter"] / np.maximum(loaded["union"], 1)
    sets = {"natural": np.arange(len(pi)), "even": even_spread(jac, 1500)}
    report: dict[str, Any] = {
        "documents": len(texts),
        "pairs": {k: len(v) for k, v in sets.items()},
        "rows": [],
    }
    for fmt, options in FORMATS.items():
        for t in THRESHOLDS:
            params = CollectionParams.create("t", threshold=t, **options)
            batch = sketch_texts(params, texts)
            score = candidate_scorer(params, batch, [])
            floor = collection_floor(params)
            keys = batch.band_keys
            shared = ((keys[pi] == keys[pj]) & (keys[pi] != 0)).any(axis=1)
            est = np.zeros(len(pi))
            for a in np.unique(pi):
                rows = np.flatnonzero(pi == a)
                est[rows] = score(int(a), pj[rows].tolist(), floor - 1e-6)
            row: dict[str, Any] = {
                "format": fmt,
                "threshold": t,
                "bands": params.bands,
                "rows": params.rows,
                "bins": params.bins,
                "floor": round(floor, 5),
            }
            for name, sel in sets.items():
                pred = shared[sel] & (est[sel] >= floor - 1e-6)
                pos = jac[sel] >= t - 1e-9
                tp = int((pred & pos).sum())
                row[name] = {
                    "precision": round(tp / max(int(pred.sum()), 1), 5),
                    "recall": round(tp / max(int(pos.sum()), 1), 5),
                    "banding_recall": round(float(shared[sel][pos].mean()), 5),
                }
            report["rows"].append(row)
            print(json.dumps(row), flush=True)
    text = json.dumps(report, indent=1)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
