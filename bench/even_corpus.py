"""An evaluation corpus whose true pairs are spread evenly over Jaccard 0.5 .. 1.0, built from the
benchmark corpus and its exact truth: as many pairs from each 0.05-wide bucket of true Jaccard (the
last one, 0.95 .. 1.0, with identical sets), drawn at random among pairs whose two documents have no
other truth pair with a document already taken, so the pairs stay apart. The exact truth of the
subset is then recomputed (``truth.build``): any pair among the chosen documents counts.

    python bench/even_corpus.py          # writes bench/data/even_corpus.jsonl and even_truth.npz
    python bench/quality.py --corpus bench/data/even_corpus.jsonl --truth bench/data/even_truth.npz
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import corpus as corpus_module
import numpy as np
import truth as truth_module

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
EDGES = [round(0.5 + 0.05 * k, 2) for k in range(11)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-bucket", type=int, default=400)
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args()
    docs = corpus_module.load(DATA / "corpus.jsonl")
    loaded = truth_module.load_truth(DATA / "truth.npz")
    pi, pj = loaded["i"].astype(np.int64), loaded["j"].astype(np.int64)
    jac = loaded["inter"] / np.maximum(loaded["union"], 1)
    neighbours: dict[int, set[int]] = {}
    for a, b in zip(pi.tolist(), pj.tolist(), strict=True):
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    rng = np.random.default_rng(args.seed)
    taken: set[int] = set()
    blocked: set[int] = set()
    chosen: list[int] = []
    buckets = []
    for lo, hi in itertools.pairwise(EDGES):
        last = hi >= 1.0
        buckets.append(
            np.flatnonzero((jac >= lo - 1e-9) & ((jac <= hi + 1e-9) if last else (jac < hi - 1e-9)))
        )
    # Lowest Jaccard first: those pairs are the scarcest (at most 400 per bucket; fewer where pairs
    # apart from every one taken run out, see pairs_per_bucket_drawn).
    counts = [0] * len(buckets)
    for bucket in range(len(buckets)):
        inside = buckets[bucket]
        got = 0
        for p in rng.permutation(inside).tolist():
            a, b = int(pi[p]), int(pj[p])
            if a in taken or b in taken or a in blocked or b in blocked:
                continue
            chosen.append(p)
            taken.update((a, b))
            blocked.update(neighbours[a] | neighbours[b])
            got += 1
            if got == args.per_bucket:
                break
        counts[bucket] = got
    keep = sorted(taken)
    subset = [docs[k] for k in keep]
    with (DATA / "even_corpus.jsonl").open("w", encoding="utf-8") as out:
        for doc in subset:
            out.write(json.dumps(doc, ensure_ascii=False) + "\n")
    texts = [d["text"] for d in subset]
    ids = [d["id"] for d in subset]
    _, pairs, info = truth_module.build(texts, ids)
    sizes = np.zeros(len(texts), np.int64)
    info["pairs_per_bucket_drawn"] = dict(zip([f"{x:.2f}" for x in EDGES[:-1]], counts, strict=True))
    truth_module.save(DATA / "even_truth.npz", ids, sizes, pairs, info)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
