"""Verification estimators side by side at (about) equal stored bytes: how sharply each one tells a
pair's Jaccard, how fast it sketches, and what precision and recall it gives at a threshold.

Pairs come from the exact truth (``bench/truth.py``): the **natural** set (every truth pair) and an
**even-spread** set (the same number of pairs drawn at random from each 0.05-wide bucket of true
Jaccard from 0.5 to 1.0, so as many pairs lie just above the threshold as just below it). For each
estimator: bytes per document; bias and standard error of the estimate per bucket; precision and
recall at the threshold with every pair a candidate ("banding aside") and with the collection's
banding (a pair must share a band key); verification floors t + 0, 1, 2 standard errors; sketching
speed in MB/s of text (one thread, after the run's first pass warmed the caches).

Estimators: MinHash 128 x 32 bits (the fraction of equal slots: what datasketch and rensa keep),
b-bit minwise hashing (the low bits of more MinHash slots), the service's estimate sketch (2-bit
one-permutation bins, or for a document of at most bins / 4 shingles a filled-bin bitmap and every
shingle's code; at the service's bins and at the most that fit in MinHash's 512 bytes), and exact mode
(sorted 32-bit shingle hashes, merge). Every estimator is scored with the service's banding (its band
keys come from a 128-slot MinHash whatever verifies the candidates).

    python bench/bench_estimators.py --output bench/results/estimators.json      # ~2-4 minutes
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus as corpus_module  # noqa: E402
import truth as truth_module  # noqa: E402

from neardup import sketch  # noqa: E402
from neardup.domain.index import collection_floor  # noqa: E402
from neardup.domain.models import CollectionParams  # noqa: E402

BUCKETS = np.round(np.arange(0.5, 1.0001, 0.05), 2)
#: (slots, bits) of b-bit minwise hashing over k permutations tried (bytes: slots * bits / 8, and band
#: keys beside them, since b bits of a slot cannot make a band key).
BBIT_MINHASH = [(320, 12), (256, 16)]
#: Bins of the estimate sketches tried beside the service's own (2-bit bins; bytes per document =
#: 1 + bins / 4 + band keys): 1,472 is the most that fit beside the band keys in MinHash's 512 bytes.
EXTRA_BINS = [1472]


def even_spread(jac: npt.NDArray[np.float64], per_bucket: int, seed: int = 0) -> npt.NDArray[np.int64]:
    """Positions of pairs drawn evenly from the 0.05-wide buckets of Jaccard over [0.5, 1.0]."""
    rng = np.random.default_rng(seed)
    edges = list(BUCKETS)
    chosen: list[npt.NDArray[np.int64]] = []
    for lo, hi in itertools.pairwise(edges):
        last = hi >= 1.0
        inside = np.flatnonzero((jac >= lo - 1e-9) & ((jac <= hi + 1e-9) if last else (jac < hi - 1e-9)))
        take = min(per_bucket, len(inside))
        chosen.append(np.sort(rng.choice(inside, size=take, replace=False)))
    return np.concatenate(chosen)


def per_bucket(est: npt.NDArray[np.float64], jac: npt.NDArray[np.float64]) -> dict[str, Any]:
    out = {}
    for lo in BUCKETS[:-1]:
        inside = (
            (jac >= lo - 1e-9) & (jac < lo + 0.05 - 1e-9) if lo < 0.95 else (jac >= lo - 1e-9) & (jac < 1.0)
        )
        if inside.sum() < 10:
            continue
        err = est[inside] - jac[inside]
        out[f"{lo:.2f}"] = {"pairs": int(inside.sum()), "bias": round(float(err.mean()), 4),
                            "std_error": round(float(err.std()), 4)}  # fmt: skip
    return out


#: Shingles in a pair's union: the groups of ``by_union_size`` (the estimate sketch compares short
#: documents shingle by shingle, up to ~200 shingles at the default bins).
UNION_SIZES = [(0, 200), (200, 400), (400, 700), (700, 10**9)]


def by_union_size(est: npt.NDArray[np.float64], jac: npt.NDArray[np.float64], union: Any, t: float,
                  floor: float) -> dict[str, Any]:  # fmt: skip
    """Near the threshold (true J 0.7 .. 0.9), per group of union size: pairs, standard error, false
    positives and misses at the floor (every pair a candidate)."""
    near = (jac > 0.7) & (jac < 0.9)
    out = {}
    for lo, hi in UNION_SIZES:
        inside = near & (union >= lo) & (union < hi)
        if not inside.any():
            continue
        pred = est[inside] >= floor - 1e-6
        pos = jac[inside] >= t - 1e-9
        out[f"{lo}-{hi if hi < 10**9 else ''}"] = {
            "pairs": int(inside.sum()),
            "std_error": round(float((est[inside] - jac[inside]).std()), 4),
            "false_positives": int((pred & ~pos).sum()),
            "missed": int((pos & ~pred).sum()),
        }
    return out


def pr(est: npt.NDArray[np.float64], jac: npt.NDArray[np.float64], found: npt.NDArray[np.bool_],
       t: float, floor: float, ident: npt.NDArray[np.bool_]) -> dict[str, float]:  # fmt: skip
    pred = found & (est >= floor - 1e-6)
    pos = jac >= t - 1e-9
    tp = pred & pos
    ni = ~ident
    return {
        "precision": round(float(tp.sum() / max(pred.sum(), 1)), 5),
        "recall": round(float(tp.sum() / max(pos.sum(), 1)), 5),
        "precision_non_identical": round(float((tp & ni).sum() / max((pred & ni).sum(), 1)), 5),
        "recall_non_identical": round(float((tp & ni).sum() / max((pos & ni).sum(), 1)), 5),
    }


def shared_band(keys: npt.NDArray[np.uint64], i: npt.NDArray[np.int64], j: npt.NDArray[np.int64]) -> Any:
    return ((keys[i] == keys[j]) & (keys[i] != 0)).any(axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=HERE / "data" / "corpus.jsonl")
    parser.add_argument("--truth", type=Path, default=HERE / "data" / "truth.npz")
    parser.add_argument("--per-bucket", type=int, default=1500)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--speed-docs", type=int, default=3000)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    t = args.threshold
    docs = corpus_module.load(args.corpus)
    texts = [d["text"] for d in docs]
    loaded = truth_module.load_truth(args.truth)
    if loaded["ids"] != [d["id"] for d in docs]:
        raise SystemExit("truth is for another corpus")
    pi, pj = loaded["i"].astype(np.int64), loaded["j"].astype(np.int64)
    jac = loaded["inter"] / np.maximum(loaded["union"], 1)
    ident = loaded["inter"] == loaded["union"]
    sets = {"natural": np.arange(len(pi)), "even": even_spread(jac, args.per_bucket)}
    speed_texts = texts[: args.speed_docs]
    mb = sum(len(x.encode("utf-8", "surrogatepass")) for x in speed_texts) / 1e6

    params = CollectionParams.create("estimators", threshold=t)
    report: dict[str, Any] = {
        "documents": len(texts),
        "threshold": t,
        "pairs": {k: len(v) for k, v in sets.items()},
        "per_bucket": args.per_bucket,
        "speed_documents": len(speed_texts),
        "service": {
            "bands": params.bands,
            "rows": params.rows,
            "bins": params.bins,
            "stored_bytes": params.stored_bytes,
            "floor": round(collection_floor(params), 5),
        },
        "estimators": {},
    }

    def timed(fn: Any) -> float:
        fn()  # warm
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - started)
        return float(np.median(runs))

    sigs = sketch.signatures(texts)
    # the service's band keys: which pairs share one does not depend on the verification
    keys = sketch.band_keys(sigs, params.bands, params.rows)
    estimators: dict[str, tuple[int, Any, float, float]] = {}
    # label -> (bytes per document, estimates of the pairs, sketch seconds, floor)
    est1 = np.empty(len(pi))
    for s in range(0, len(pi), 20000):
        est1[s : s + 20000] = (sigs[pi[s : s + 20000]] == sigs[pj[s : s + 20000]]).mean(axis=1)
    seconds = timed(lambda: sketch.signatures(speed_texts))
    estimators["minhash 128x32 (datasketch, rensa)"] = (512, est1, seconds, t)
    # b-bit minwise hashing over k permutations (Li and Koenig): the low b bits of k MinHash slots, the
    # fraction of equal ones corrected for chance (2^-b); more slots of fewer bits in about the bytes
    for slots, bits in BBIT_MINHASH:
        many = sketch.signatures(texts, num_perm=slots) & np.uint32((1 << bits) - 1)
        equal = np.empty(len(pi))
        for s in range(0, len(pi), 20000):
            equal[s : s + 20000] = (many[pi[s : s + 20000]] == many[pj[s : s + 20000]]).mean(axis=1)
        chance = 2.0**-bits
        est_b = np.clip((equal - chance) / (1 - chance), 0, 1)
        seconds = timed(lambda k=slots: sketch.signatures(speed_texts, num_perm=k))
        estimators[f"b-bit minhash {slots}x{bits}"] = (slots * bits // 8, est_b, seconds, t)
    for bins in [params.bins, *EXTRA_BINS]:
        _, packed = sketch.adaptive_sketches(texts, bins=bins)
        est = np.empty(len(pi))
        for a in np.unique(pi):
            rows = np.flatnonzero(pi == a)
            est[rows] = sketch.adaptive_similarity(packed[a], packed, pj[rows], bins=bins)
        seconds = timed(lambda b=bins: sketch.adaptive_sketches(speed_texts, bins=b))
        own = bins == params.bins
        floor = collection_floor(params) if own else t
        label = f"estimate sketch {bins}x2" + (" (the service's)" if own else "")
        estimators[label] = (1 + bins // 4, est, seconds, floor)
    _, flat, offsets = sketch.exact_sketches(texts)
    est = np.empty(len(pi))
    merge_started = time.perf_counter()
    for a in np.unique(pi):
        rows = np.flatnonzero(pi == a)
        est[rows] = sketch.exact_similarity(flat[offsets[a] : offsets[a + 1]], flat, offsets, pj[rows])
    merge_seconds = time.perf_counter() - merge_started
    seconds = timed(lambda: sketch.exact_sketches(speed_texts))
    exact_bytes = int(4 * len(flat) / len(texts))
    estimators["exact sorted u32 (verify: exact)"] = (exact_bytes, est, seconds, t)
    report["exact_merge"] = {
        "pairs": len(pi),
        "seconds": round(merge_seconds, 3),
        "pairs_per_second": round(len(pi) / merge_seconds),
        "mean_set_size": round(float(len(flat) / len(texts)), 1),
        "note": "whole merges (floor 0: no early abort) over every truth pair, one thread",
    }
    for label, (nbytes, est, seconds, floor) in estimators.items():
        entry: dict[str, Any] = {"bytes_per_document": nbytes, "sketch_mb_per_s": round(mb / seconds, 1)}
        for name, sel in sets.items():
            e, jj, idn = est[sel], jac[sel], ident[sel]
            found_all = np.ones(len(sel), bool)
            banded = shared_band(keys, pi[sel], pj[sel])
            entry[name] = {
                "mean_abs_error": round(float(np.abs(e - jj).mean()), 4),
                "buckets": per_bucket(e, jj) if name == "even" else None,
                "by_union_size": by_union_size(e, jj, loaded["union"][sel], t, floor)
                if name == "even"
                else None,
                "floor": round(floor, 5),
                "all_candidates": pr(e, jj, found_all, t, floor, idn),
                "all_candidates_floor_t": pr(e, jj, found_all, t, t, idn),
                "banded": pr(e, jj, banded, t, floor, idn),
                "banding_recall_at_t": round(float(banded[jj >= t - 1e-9].mean()), 5),
            }
        report["estimators"][label] = entry
        print(label, json.dumps({k: entry[k] for k in ("bytes_per_document", "sketch_mb_per_s")}),
              "even", entry["even"]["banded"], "natural", entry["natural"]["banded"], flush=True)  # fmt: skip
    text = json.dumps(report, indent=1)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
