"""Benchmark the native sketch core against rensa, datasketch and numpy, side by side in one run.

Measures (k=128, word 5-shingles, one thread unless said otherwise) on the corpus of
``bench/corpus.py``: text-to-signature throughput in MB/s of UTF-8 input, similarity of one signature
against N stored ones, and the estimator's mean absolute error against the exact Jaccard of the
reference shingle sets. Prints one JSON object. Benchmarks are not tests: nothing here asserts; the
JSON says which of the performance targets (TARGETS) were met.

    python bench/bench_sketch.py            # full run, a few minutes
    python bench/bench_sketch.py --quick    # under a minute
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

# rensa parallelises its batch calls with rayon; this benchmark compares one thread with one thread.
# Must be set before rensa is imported. The process is also pinned to one CPU while timing (below).
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import numpy as np
import numpy.typing as npt
from datasketch import MinHash  # type: ignore[import-untyped]
from rensa import RMinHash  # type: ignore[import-untyped]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import corpus as corpus_module  # noqa: E402
from machine import cpu_model, git_commit  # noqa: E402

K = 128
SHINGLE_SIZE = 5
#: The service's sketches at the defaults (threshold 0.8, num_perm 128: 16 bands of 6 rows): 1,408 bins,
#: and only the 96 MinHash slots the band keys use, as the service computes them (app/domain/banding.py)
SERVICE_BINS, SERVICE_SLOTS = 1408, 96
SEED = 1
U32 = npt.NDArray[np.uint32]

#: The performance targets: ratio neardup / other, and MAE / binomial bound.
TARGETS = {
    "signature_vs_rensa": 1.0,
    "signature_vs_datasketch": 50.0,
    "similarity_vs_numpy_30k": 20.0,
    "similarity_vs_numpy_1m": 3.0,
    "estimator_mae_over_bound_max": 1.10,
}


@dataclass(frozen=True)
class Settings:
    repeats: int
    signature_bytes: int  # neardup and rensa: the same documents
    datasketch_bytes: int  # a subset of those: datasketch is ~100x slower
    similarity_repeats: int
    similarity_sizes: tuple[int, ...]
    accuracy_pairs: int
    accuracy_seeds: int  # seeds 1..n: with one seed, pairs that share text share their errors


QUICK = Settings(
    repeats=3,
    signature_bytes=4_000_000,
    datasketch_bytes=600_000,
    similarity_repeats=3,
    similarity_sizes=(30_000, 1_000_000),
    accuracy_pairs=600,
    accuracy_seeds=2,
)
FULL = Settings(
    repeats=7,
    signature_bytes=32_000_000,
    datasketch_bytes=4_000_000,
    similarity_repeats=9,
    similarity_sizes=(30_000, 1_000_000),
    accuracy_pairs=6_000,
    accuracy_seeds=8,
)


# --- helpers ---------------------------------------------------------------------------------------


@contextmanager
def one_cpu() -> Iterator[None]:
    """Pin the process to one CPU so a library that spawns threads behind our back cannot use more."""
    if not hasattr(os, "sched_setaffinity"):
        yield
        return
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(previous)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


def timed_rounds(
    cases: dict[str, tuple[Callable[[], object], int]], repeats: int
) -> dict[str, dict[str, Any]]:
    """Time several cases in interleaved rounds: each round runs every case once (``inner`` calls of
    its function), so a burst of other work on a shared machine hits all of them alike instead of
    all the repeats of one. Per case: seconds per call of each round, their median, CPU time, and
    the CPU/wall ratio (about 1.0 for one thread when nothing else took the CPU)."""
    for fn, _ in cases.values():
        fn()  # warm-up: page faults, lazy tables, caches
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in cases}
    cpu_ratios: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, (fn, inner) in cases.items():
            gc.collect()
            wall0, cpu0 = time.perf_counter(), time.process_time()
            for _ in range(inner):
                fn()
            wall = time.perf_counter() - wall0
            cpu = time.process_time() - cpu0
            seconds[name].append(wall / inner)
            cpu_seconds[name].append(cpu / inner)
            cpu_ratios[name].append(cpu / wall if wall > 0 else 0.0)
    return {
        name: {
            "median_s": statistics.median(seconds[name]),
            "repeats_s": [round(x, 6) for x in seconds[name]],
            # CPU time of this process: less sensitive than wall time to other work on the machine.
            "cpu_median_s": statistics.median(cpu_seconds[name]),
            "cpu_per_wall": round(statistics.median(cpu_ratios[name]), 2),
            "calls_per_repeat": cases[name][1],
        }
        for name in cases
    }


def throughput(result: dict[str, Any], nbytes: int) -> dict[str, Any]:
    result["mb_per_s"] = round(nbytes / result["median_s"] / 1e6, 2)
    result["repeats_mb_per_s"] = [round(nbytes / s / 1e6, 2) for s in result["repeats_s"]]
    result["mb_per_s_cpu"] = (
        round(nbytes / result["cpu_median_s"] / 1e6, 2) if result["cpu_median_s"] else None
    )
    result["median_s"] = round(result["median_s"], 6)
    result["cpu_median_s"] = round(result["cpu_median_s"], 6)
    return result


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


# --- the reference shingle sets --------------------------------------------------------------------

WORD = re.compile(r"[^\W_]+")


def load_reference() -> ModuleType | None:
    """neardup's own pure-Python reference (tests/reference.py) when the checkout has it."""
    path = ROOT / "tests" / "reference.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("neardup_reference", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = load_reference()


def plain_words(text: str) -> list[str]:
    """The issue's definition: NFKC, lower, runs of letters and digits."""
    return WORD.findall(unicodedata.normalize("NFKC", text).lower())


def exact_words(text: str) -> list[str]:
    """Words as neardup defines them. tests/reference.py walks characters in Python (slow); its own
    docstring says it equals ``plain_words`` on text without combining marks or space-less scripts,
    so it is only called on the texts that have one of those."""
    if REFERENCE is None:
        return plain_words(text)
    prepared = unicodedata.normalize("NFKC", text).lower()
    if any(REFERENCE._is_mark(ch) or REFERENCE._nospace(ch) for ch in set(prepared) if not ch.isascii()):
        return list(REFERENCE.words(text))
    return WORD.findall(prepared)


def shingle_strings(words: Sequence[str]) -> set[str]:
    """Space-joined word 5-grams; fewer than 5 words: one shingle of all of them; no words: none."""
    if not words:
        return set()
    if len(words) < SHINGLE_SIZE:
        return {" ".join(words)}
    return {" ".join(words[i : i + SHINGLE_SIZE]) for i in range(len(words) - SHINGLE_SIZE + 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


# --- the tools -------------------------------------------------------------------------------------


def import_neardup() -> ModuleType:
    try:
        import neardup.sketch as sketch
    except ImportError as error:
        sys.exit(f"cannot import neardup.sketch ({error}): install the project (pip install -e .) first")
    return sketch


def datasketch_signatures(texts: Sequence[str]) -> list[Any]:
    """datasketch as users write it: Python shingling, then update_batch of the encoded shingles."""
    out = []
    for text in texts:
        m = MinHash(num_perm=K, seed=SEED)
        m.update_batch([s.encode("utf-8") for s in shingle_strings(plain_words(text))])
        out.append(m.hashvalues)
    return out


def rensa_signatures_batch(shingle_lists: Sequence[list[str]]) -> Any:
    return RMinHash.digest_matrix_from_token_sets(shingle_lists, K, SEED)


def rensa_signatures_objects(shingle_lists: Sequence[list[str]]) -> list[list[int]]:
    out = []
    for shingles in shingle_lists:
        m = RMinHash(K, SEED)
        m.update(shingles)
        out.append(m.digest())
    return out


# --- 1. text to signature --------------------------------------------------------------------------


def sample_documents(documents: list[dict[str, str]], budget: int, seed: int) -> list[str]:
    """Documents drawn at random (fixed seed) until ``budget`` bytes of UTF-8: every source is in it."""
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    texts: list[str] = []
    total = 0
    for index in order:
        if total >= budget:
            break
        text = documents[index]["text"]
        texts.append(text)
        total += len(text.encode("utf-8", "surrogatepass"))
    return texts


def utf8_bytes(texts: Sequence[str]) -> int:
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)


def bench_signatures(
    sketch: ModuleType, documents: list[dict[str, str]], settings: Settings
) -> dict[str, Any]:
    texts = sample_documents(documents, settings.signature_bytes, seed=1)
    nbytes = utf8_bytes(texts)
    # Pre-made shingle lists for rensa, built outside the timed region (generous to rensa): the same
    # reference shingling datasketch does inside its timed region, deduplicated.
    shingle_lists = [list(shingle_strings(plain_words(t))) for t in texts]
    subset = texts[: max(1, len(texts) * settings.datasketch_bytes // max(nbytes, 1))]
    subset_bytes = utf8_bytes(subset)

    results: dict[str, Any] = {
        "documents": len(texts),
        "mb": round(nbytes / 1e6, 2),
        "shingles": sum(len(s) for s in shingle_lists),
    }
    with one_cpu():
        timings = timed_rounds(
            {
                "neardup": (lambda: sketch.signatures(texts, num_perm=K, size=SHINGLE_SIZE), 1),
                # the estimate sketch: the slots of its band keys and the adaptive one-permutation bins
                "neardup_estimate": (
                    lambda: sketch.adaptive_sketches(
                        texts, num_perm=SERVICE_SLOTS, size=SHINGLE_SIZE, bins=SERVICE_BINS
                    ),
                    1,
                ),
                "neardup_exact": (
                    lambda: sketch.exact_sketches(texts, num_perm=SERVICE_SLOTS, size=SHINGLE_SIZE),
                    1,
                ),
                "rensa_batch": (lambda: rensa_signatures_batch(shingle_lists), 1),
                "rensa_objects": (lambda: rensa_signatures_objects(shingle_lists), 1),
                "datasketch": (lambda: datasketch_signatures(subset), 1),
            },
            settings.repeats,
        )
    for name in ("neardup", "neardup_estimate", "neardup_exact", "rensa_batch", "rensa_objects"):
        results[name] = throughput(timings[name], nbytes)
    results["rensa_batch"]["api"] = "RMinHash.digest_matrix_from_token_sets(shingle_lists, 128, seed)"
    results["rensa_objects"]["api"] = "RMinHash(128, seed).update(shingles); .digest() per document"
    datasketch = throughput(timings["datasketch"], subset_bytes)
    datasketch.update({"documents": len(subset), "mb": round(subset_bytes / 1e6, 2)})
    datasketch["api"] = "MinHash(128, seed).update_batch([s.encode() for s in shingles]) per document"
    results["datasketch"] = datasketch
    # Context only: the same batch over every core there is (this machine: os.cpu_count()), not
    # pinned; on a machine busy with other work this shows the contention more than the threading.
    threads = min(2, os.cpu_count() or 1)
    results[f"neardup_threads_{threads}"] = throughput(
        timed_rounds(
            {
                "threads": (
                    lambda: sketch.signatures(texts, num_perm=K, size=SHINGLE_SIZE, threads=threads),
                    1,
                )
            },
            settings.repeats,
        )["threads"],
        nbytes,
    )
    # rensa's best path is the reference: whichever of its two APIs was faster in this run.
    best_rensa = max(results["rensa_batch"]["mb_per_s"], results["rensa_objects"]["mb_per_s"])
    neardup = results["neardup"]["mb_per_s"]
    results["ratios"] = {
        "neardup_over_rensa_best": round(neardup / best_rensa, 2),
        "neardup_estimate_over_rensa_best": round(results["neardup_estimate"]["mb_per_s"] / best_rensa, 2),
        "neardup_exact_over_rensa_best": round(results["neardup_exact"]["mb_per_s"] / best_rensa, 2),
        "neardup_over_rensa_batch": round(neardup / results["rensa_batch"]["mb_per_s"], 2),
        "neardup_over_rensa_objects": round(neardup / results["rensa_objects"]["mb_per_s"], 2),
        "neardup_over_datasketch": round(neardup / results["datasketch"]["mb_per_s"], 1),
    }
    cpu = {
        name: results[name]["mb_per_s_cpu"]
        for name in ("neardup", "rensa_batch", "rensa_objects", "datasketch")
    }
    results["ratios_cpu_time"] = {
        "neardup_over_rensa_best": round(cpu["neardup"] / max(cpu["rensa_batch"], cpu["rensa_objects"]), 2),
        "neardup_estimate_over_rensa_best": round(
            results["neardup_estimate"]["mb_per_s_cpu"] / max(cpu["rensa_batch"], cpu["rensa_objects"]), 2
        ),
        "neardup_over_datasketch": round(cpu["neardup"] / cpu["datasketch"], 1),
    }
    return results


# --- 2. similarity ---------------------------------------------------------------------------------


def stored_signatures(n: int, seed: int) -> tuple[U32, U32]:
    """N random signatures plus a query that shares a spread of slots with some of them, so the
    results are not all zero (the kernels are branch-free, so content does not change their speed)."""
    rng = np.random.default_rng(seed)
    candidates = rng.integers(0, 2**32 - 1, size=(n, K), dtype=np.uint32)
    query = rng.integers(0, 2**32 - 1, size=K, dtype=np.uint32)
    similar = rng.choice(n, size=min(n, 1000), replace=False)
    for row in similar:
        shared = rng.random(K) < rng.random()
        candidates[row, shared] = query[shared]
    return query, candidates


def numpy_similarity(query: U32, candidates: U32) -> npt.NDArray[np.float64]:
    return np.asarray((candidates == query).sum(axis=1) / K)


#: A plain C loop that XORs every 8-byte word of a buffer (vectorized by the compiler): the speed of
#: merely reading N signatures once on this core, from cache at 30k and from memory at 1M. It says
#: what speedup over numpy any similarity kernel could reach here. Built with the system C compiler
#: (-march=native is fine for a probe that never ships); skipped when there is none.
READ_PROBE_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
__attribute__((noinline)) static uint64_t pass(const uint64_t* p, size_t n) {
  uint64_t a[16] = {0};
  for (size_t i = 0; i < n; i += 16)
    for (int j = 0; j < 16; ++j) a[j] ^= p[i + j];
  uint64_t x = 0;
  for (int j = 0; j < 16; ++j) x ^= a[j];
  return x;
}
int main(int argc, char** argv) {
  if (argc != 4) return 2;
  size_t bytes = strtoull(argv[1], 0, 10), calls = strtoull(argv[2], 0, 10);
  size_t rounds = strtoull(argv[3], 0, 10);
  size_t n = bytes / 8 / 16 * 16;
  uint64_t* p = aligned_alloc(64, n * 8);
  for (size_t i = 0; i < n; ++i) p[i] = i * 0x9E3779B97F4A7C15ull;
  uint64_t x = pass(p, n);
  for (size_t r = 0; r < rounds; ++r) {
    double t = now();
    for (size_t c = 0; c < calls; ++c) { __asm__ volatile("" : "+r"(p)::"memory"); x += pass(p, n); }
    printf("%.9f\n", (now() - t) / calls);
  }
  fprintf(stderr, "%llu\n", (unsigned long long)x);
  return 0;
}
"""


def read_probe(nbytes: int, calls: int, rounds: int) -> dict[str, Any] | None:
    """Median seconds for one read pass over ``nbytes`` (run pinned by the caller), or None."""
    import shutil
    import tempfile

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        source, binary = Path(folder) / "probe.c", Path(folder) / "probe"
        source.write_text(READ_PROBE_C)
        build = subprocess.run(
            [compiler, "-O3", "-march=native", "-o", str(binary), str(source)], capture_output=True
        )
        if build.returncode != 0:
            return None
        run = subprocess.run(
            [str(binary), str(nbytes), str(calls), str(rounds)], capture_output=True, text=True
        )
    seconds = [float(line) for line in run.stdout.split()]
    if not seconds:
        return None
    median = statistics.median(seconds)
    return {
        "median_s": median,
        "repeats_s": [round(x, 6) for x in seconds],
        "gb_per_s": round(nbytes / median / 1e9, 2),
    }


def similarity_at(sketch: ModuleType, n: int, repeats: int) -> dict[str, Any]:
    query, candidates = stored_signatures(n, seed=n)
    nbytes = candidates.nbytes
    expected = numpy_similarity(query, candidates)
    # Enough calls per repeat that a repeat reads ~2 GB through the fast kernels (tens of ms), so one
    # descheduling does not decide a repeat; numpy, ~10x slower, gets a tenth of the calls.
    inner = max(1, 2_000_000_000 // nbytes)
    wide = candidates.view(np.uint64)

    def run_numpy() -> object:
        return numpy_similarity(query, candidates)

    def run_read_pass() -> object:
        return wide.max()

    def run_neardup(isa: str | None = None) -> object:
        return sketch.similarity(query, candidates, isa=isa)

    entry: dict[str, Any] = {"n": n, "k": K, "mb": round(nbytes / 1e6, 1)}
    cases: dict[str, tuple[Callable[[], object], int]] = {
        "numpy": (run_numpy, max(1, inner // 10)),
        # Context for the targets: one SIMD pass over the same bytes with numpy (max of a uint64
        # view), a rough floor for any kernel that has to read every stored signature.
        "numpy_read_pass": (run_read_pass, inner),
        "neardup": (run_neardup, inner),
    }
    for isa in sketch.available_isas():
        cases[f"isa_{isa}"] = (functools.partial(run_neardup, isa), inner)
    with one_cpu():
        timings = timed_rounds(cases, repeats)
        ceiling = read_probe(nbytes, inner, repeats)
    entry["numpy"] = timings["numpy"]
    entry["numpy_read_pass"] = timings["numpy_read_pass"]
    entry["neardup"] = timings["neardup"]
    per_isa: dict[str, Any] = {}
    for isa in sketch.available_isas():
        measured = timings[f"isa_{isa}"]
        got = np.asarray(run_neardup(isa), dtype=np.float64)
        measured["gb_per_s"] = round(nbytes / measured["median_s"] / 1e9, 2)
        measured["max_abs_diff_vs_numpy"] = float(np.max(np.abs(got - expected)))
        measured["speedup_vs_numpy"] = round(entry["numpy"]["median_s"] / measured["median_s"], 2)
        per_isa[isa] = measured
    entry["neardup_per_isa"] = per_isa
    for key in ("numpy", "numpy_read_pass", "neardup"):
        entry[key]["gb_per_s"] = round(nbytes / entry[key]["median_s"] / 1e9, 2)
    entry["active_isa"] = sketch.active_isa()
    entry["speedup_vs_numpy"] = round(entry["numpy"]["median_s"] / entry["neardup"]["median_s"], 2)
    if ceiling is not None:
        ceiling["speedup_vs_numpy"] = round(entry["numpy"]["median_s"] / ceiling["median_s"], 2)
    entry["c_read_pass"] = ceiling
    entry["read_pass_speedup_vs_numpy"] = round(
        entry["numpy"]["median_s"] / entry["numpy_read_pass"]["median_s"], 2
    )
    return entry


def bench_similarity(sketch: ModuleType, settings: Settings) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for n in settings.similarity_sizes:
        results[str(n)] = similarity_at(sketch, n, settings.similarity_repeats)
        gc.collect()  # the 1M matrix is 512 MB
    return results


# --- 3. estimator accuracy -------------------------------------------------------------------------


def pypi_group(doc_id: str) -> str | None:
    """``pypi/<name>/<version>/<path>`` -> ``<name>/<path>``: the same file in another release."""
    parts = doc_id.split("/", 3)
    if len(parts) == 4 and parts[0] == "pypi":
        return f"{parts[1]}/{parts[3]}"
    return None


def man_group(doc_id: str) -> str | None:
    """The same man page rendered from different packages/sections: ``man/<pkg>/<...>/<name>``."""
    if doc_id.startswith("man/"):
        return doc_id.rsplit("/", 1)[-1].split(".", 1)[0]
    return None


JACCARD_BINS = ((0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.0))


def candidate_pairs(documents: list[dict[str, str]], cap: int, seed: int) -> dict[str, list[tuple[int, int]]]:
    """Real pairs of the corpus, by kind: the same file in two releases of a PyPI project (mostly
    near-duplicates), the same man page name in two packages or languages, two copyright files
    (shared licence texts: low to middling Jaccard) and random pairs (about 0). At most ``cap`` each."""
    rng = random.Random(seed)
    pypi: dict[str, list[int]] = defaultdict(list)
    man: dict[str, list[int]] = defaultdict(list)
    copyrights: list[int] = []
    for index, doc in enumerate(documents):
        if (group := pypi_group(doc["id"])) is not None:
            pypi[group].append(index)
        elif (group := man_group(doc["id"])) is not None:
            man[group].append(index)
        elif doc["source"] == "copyright":
            copyrights.append(index)
    kinds: dict[str, list[tuple[int, int]]] = {}
    for kind, groups in (("pypi_versions", pypi), ("man_same_name", man)):
        pairs = [(m[i], m[j]) for m in groups.values() for i in range(len(m)) for j in range(i + 1, len(m))]
        rng.shuffle(pairs)
        kinds[kind] = pairs[:cap]
    kinds["copyright_random"] = [tuple(rng.sample(copyrights, 2)) for _ in range(cap)]  # type: ignore[misc]
    kinds["random"] = [tuple(rng.sample(range(len(documents)), 2)) for _ in range(cap // 4)]  # type: ignore[misc]
    return kinds


def stratified(pairs: list[tuple[int, int]], truth: list[float], per_bin: int) -> list[int]:
    """Indices of up to ``per_bin`` pairs in each Jaccard bin (in the given, shuffled, order), so the
    error is measured over a spread of similarities and not only over the many pairs near 0 or 1.
    Equal sets (J = 1) and disjoint ones (J = 0) are left out: their bound is 0 and every MinHash
    gets them exactly (up to rare hash collisions), so they say nothing about the estimator."""
    taken: dict[int, int] = defaultdict(int)
    chosen: list[int] = []
    for index, j in enumerate(truth):
        if not 0.0 < j < 1.0:
            continue
        b = next(n for n, (lo, hi) in enumerate(JACCARD_BINS) if lo < j <= hi)
        if taken[b] < per_bin:
            taken[b] += 1
            chosen.append(index)
    return chosen


def estimator_errors(estimates: npt.NDArray[np.float64], truth: npt.NDArray[np.float64]) -> dict[str, float]:
    bound = np.sqrt(truth * (1 - truth) / K)
    error = estimates - truth
    mae = float(np.mean(np.abs(error)))
    mean_bound = float(np.mean(bound))
    return {
        "mae": round(mae, 5),
        "mean_binomial_bound": round(mean_bound, 5),
        "mae_over_bound": round(mae / mean_bound, 3) if mean_bound else float("nan"),
        # For an unbiased estimate RMSE equals the RMS of the bound, and MAE is about 0.80 of it
        # (E|X - p| of a binomial fraction is ~sqrt(2/pi) sigma): both ratios say how close to ideal.
        "rmse": round(float(np.sqrt(np.mean(error**2))), 5),
        "rms_bound": round(float(np.sqrt(np.mean(bound**2))), 5),
        "bias": round(float(np.mean(error)), 5),
    }


def equal_fraction(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    return np.asarray((a == b).mean(axis=1), dtype=np.float64)


def bench_accuracy(sketch: ModuleType, documents: list[dict[str, str]], settings: Settings) -> dict[str, Any]:
    kinds = candidate_pairs(documents, cap=2 * settings.accuracy_pairs, seed=7)
    needed = sorted({i for pairs in kinds.values() for pair in pairs for i in pair})
    shingles = {i: shingle_strings(exact_words(documents[i]["text"])) for i in needed}
    pool: list[tuple[int, int]] = []
    pool_kind: list[str] = []
    for kind in sorted(kinds):
        pool += kinds[kind]
        pool_kind += [kind] * len(kinds[kind])
    order = list(range(len(pool)))
    random.Random(11).shuffle(order)  # mix the kinds before taking the first ones of each bin
    pool = [pool[i] for i in order]
    pool_kind = [pool_kind[i] for i in order]
    pool_truth = [jaccard(shingles[a], shingles[b]) for a, b in pool]
    chosen = stratified(pool, pool_truth, settings.accuracy_pairs // len(JACCARD_BINS))
    pairs = [pool[i] for i in chosen]
    truth = np.array([pool_truth[i] for i in chosen])
    kind_counts: dict[str, int] = defaultdict(int)
    for i in chosen:
        kind_counts[pool_kind[i]] += 1

    # Signatures only of the documents in measured pairs (datasketch is slow).
    measured = sorted({i for pair in pairs for i in pair})
    row = {i: n for n, i in enumerate(measured)}
    texts = [documents[i]["text"] for i in measured]
    lists = [list(shingles[i]) for i in measured]
    encoded = [[s.encode("utf-8") for s in shingle_list] for shingle_list in lists]
    left = [row[a] for a, _ in pairs]
    right = [row[b] for _, b in pairs]

    def neardup_for(seed: int) -> npt.NDArray[Any]:
        return np.asarray(sketch.signatures(texts, num_perm=K, size=SHINGLE_SIZE, seed=seed))

    def rensa_for(seed: int) -> npt.NDArray[Any]:
        return np.array(RMinHash.digests_from_token_sets(lists, K, seed), dtype=np.uint64)

    def datasketch_for(seed: int) -> npt.NDArray[Any]:
        # The same shingles as rensa; permutations drawn once per seed (not timed here).
        first = MinHash(num_perm=K, seed=seed)
        out = []
        for shingle_bytes in encoded:
            m = MinHash(num_perm=K, seed=seed, permutations=first.permutations, scheme=first.scheme)
            m.update_batch(shingle_bytes)
            out.append(m.hashvalues)
        return np.array(out, dtype=np.uint64)

    results: dict[str, Any] = {
        "pairs_candidates": len(pool),
        "pairs_candidates_equal_sets": sum(1 for j in pool_truth if j == 1.0),
        "pairs_candidates_disjoint_sets": sum(1 for j in pool_truth if j == 0.0),
        "pairs_measured": len(pairs),
        "pairs_measured_by_kind": dict(sorted(kind_counts.items())),
        "jaccard_reference": "tests/reference.py words" if REFERENCE is not None else "re [^\\W_]+ words",
        "jaccard_quantiles": [
            round(float(q), 3) for q in np.quantile(truth, [0, 0.1, 0.25, 0.5, 0.75, 0.9, 1])
        ]
        if len(truth)
        else [],
    }
    results["seeds"] = list(range(1, settings.accuracy_seeds + 1))
    tools: dict[str, Callable[[int], npt.NDArray[Any]]] = {
        "neardup": neardup_for,
        "rensa": rensa_for,
        "datasketch": datasketch_for,
    }
    for name, signatures_for in tools.items():
        per_seed: list[dict[str, float]] = []
        entry: dict[str, Any] = {}
        for seed in results["seeds"]:
            signatures = signatures_for(seed)
            estimates = equal_fraction(signatures[left], signatures[right])
            per_seed.append(estimator_errors(estimates, truth))
            if seed == SEED:
                # The headline is the default seed: it is part of neardup's stored format, so it is the
                # hash family every user gets.
                entry.update(per_seed[-1])
                entry["by_jaccard"] = {}
                for lo, hi in JACCARD_BINS:
                    mask = (truth > lo) & (truth <= hi)
                    if mask.any():
                        by = estimator_errors(estimates[mask], truth[mask])
                        entry["by_jaccard"][f"{lo}-{hi}"] = {"pairs": int(mask.sum()), **by}
        ratios = [e["mae_over_bound"] for e in per_seed]
        entry["over_seeds"] = {
            "mae_over_bound_mean": round(float(np.mean(ratios)), 3),
            "mae_over_bound_max": max(ratios),
            "mae_over_bound_per_seed": ratios,
            "rmse_over_rms_bound_mean": round(
                float(np.mean([e["rmse"] / e["rms_bound"] for e in per_seed])), 3
            ),
            "bias_per_seed": [e["bias"] for e in per_seed],
        }
        results[name] = entry
    return results


# --- the one run -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller samples and fewer repeats (< 1 min)")
    parser.add_argument("--corpus", type=Path, default=corpus_module.DATA / "corpus.jsonl")
    parser.add_argument(
        "--only",
        choices=["signatures", "similarity", "accuracy"],
        action="append",
        help="run only these sections (repeatable)",
    )
    args = parser.parse_args()
    settings = QUICK if args.quick else FULL
    sections = set(args.only or ["signatures", "similarity", "accuracy"])

    started = time.perf_counter()
    sketch = import_neardup()
    documents = corpus_module.load(args.corpus)
    corpus_bytes = sum(len(d["text"].encode("utf-8", "surrogatepass")) for d in documents)
    report: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "active_isa": sketch.active_isa(),
            "available_isas": sketch.available_isas(),
            "neardup_commit": git_commit(),
            "unicode_version": getattr(sketch, "UNICODE_VERSION", ""),
            "versions": {name: version(name) for name in ("numpy", "rensa", "datasketch")},
            "force_isa": os.environ.get("NEARDUP_FORCE_ISA", ""),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "corpus": {"path": str(args.corpus), "documents": len(documents), "mb": round(corpus_bytes / 1e6, 1)},
        "parameters": {
            "num_perm": K,
            "shingle": f"word {SHINGLE_SIZE}-grams",
            "seed": SEED,
            "timed_threads": 1,
            "statistic": "median of repeats",
        },
        "settings": settings.__dict__,
    }
    if "signatures" in sections:
        report["signatures"] = bench_signatures(sketch, documents, settings)
    if "similarity" in sections:
        report["similarity"] = bench_similarity(sketch, settings)
    if "accuracy" in sections:
        report["accuracy"] = bench_accuracy(sketch, documents, settings)

    targets: dict[str, Any] = {}
    if "signatures" in report:
        ratios = report["signatures"]["ratios"]
        targets["signature_vs_rensa"] = {
            "ratio": ratios["neardup_over_rensa_best"],
            "target": TARGETS["signature_vs_rensa"],
        }
        targets["signature_vs_datasketch"] = {
            "ratio": ratios["neardup_over_datasketch"],
            "target": TARGETS["signature_vs_datasketch"],
        }
    if "similarity" in report:
        for n, key in ((30_000, "similarity_vs_numpy_30k"), (1_000_000, "similarity_vs_numpy_1m")):
            if str(n) in report["similarity"]:
                targets[key] = {
                    "ratio": report["similarity"][str(n)]["speedup_vs_numpy"],
                    "target": TARGETS[key],
                }
    if "accuracy" in report:
        targets["estimator_mae_over_bound"] = {
            "ratio": report["accuracy"]["neardup"]["mae_over_bound"],
            "seed": SEED,
            "mean_over_seeds": report["accuracy"]["neardup"]["over_seeds"]["mae_over_bound_mean"],
            "target_max": TARGETS["estimator_mae_over_bound_max"],
        }
    for entry in targets.values():
        entry["met"] = (
            entry["ratio"] >= entry["target"] if "target" in entry else entry["ratio"] <= entry["target_max"]
        )
    report["targets"] = targets
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
