"""Benchmark the verification kernel of the estimate sketch (``sketch.adaptive_similarity``): the
dispatched SIMD path beside the portable serial path and a numpy implementation of the same estimate,
at 30,000 and 1,000,000 candidates; then the share of a check's CPU that verification takes.

Sketches are the service's defaults (num_perm 128, threshold 0.8: 16 bands of 6 rows, 1,408 bins, from
``CollectionParams.create``) of documents of 1-60 KB (log-uniform) cut from the Python standard
library's source and documentation on this machine, a third of them edited copies of others; a short
document's sketch is sparse (every shingle kept), a longer one's dense. The candidate pools repeat
those sketches in a random order; the numpy implementation (vectorized over the candidates) covers
dense candidates, so it is timed on the pool of those ("dense") beside the kernel, which is also
timed on the whole pool ("mixed"). The exact sketch's merge is timed per ISA too. Each figure is the
median of interleaved rounds (a shared machine:
ratios come from one run, each the median over the rounds of the two cases' times in the same round;
absolute times are context). Prints one JSON object.

    python bench/bench_verify.py                 # full run, a few minutes
    python bench/bench_verify.py --quick         # 30,000 candidates only, fewer rounds
    python bench/bench_verify.py --out bench/results/verify.json
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import platform
import statistics
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import cpu_model, git_commit  # noqa: E402

from neardup import sketch  # noqa: E402
from neardup.domain import CollectionParams  # noqa: E402

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]
THRESHOLD = 0.8


# --- documents -------------------------------------------------------------------------------------


def source_text(limit: int = 40_000_000) -> str:
    """The standard library's .py and .txt files, in sorted order, joined (up to ``limit`` chars)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    size = 0
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".txt", ".rst") or "site-packages" in path.parts or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(text)
        size += len(text)
        if size >= limit:
            break
    return "\n".join(parts)


def documents(count: int, seed: int = 7) -> list[str]:
    """``count`` documents: two thirds windows of 1-60 KB (log-uniform) at random places of
    ``source_text``, a third copies of earlier ones with 1-10% of their words replaced."""
    rng = np.random.default_rng(seed)
    text = source_text()
    unique = count - count // 3
    sizes = np.exp(rng.uniform(math.log(1_000), math.log(60_000), size=unique)).astype(int)
    starts = rng.integers(0, len(text) - 60_000, size=unique)
    docs = [text[s : s + n] for s, n in zip(starts.tolist(), sizes.tolist(), strict=True)]
    vocab = np.array(text[:2_000_000].split())
    for i in rng.integers(0, unique, size=count - unique).tolist():
        words = np.array(docs[i].split())
        edit = rng.random(len(words)) < rng.uniform(0.01, 0.10)
        words[edit] = rng.choice(vocab, size=int(edit.sum()))
        docs.append(" ".join(words.tolist()))
    return docs


def defaults() -> CollectionParams:
    return CollectionParams.create("bench", threshold=THRESHOLD)


def sketches(params: CollectionParams, texts: list[str]) -> U8:
    # The slots of the band keys only, as the service computes them; the bins do not depend on them.
    slots = max(16, -(-params.bands * params.rows // 8) * 8)
    _, bins = sketch.adaptive_sketches(
        texts,
        num_perm=min(params.num_perm, slots),
        shingle=params.shingle,
        size=params.size,
        seed=params.seed,
        bins=params.bins,
        threads=2,
    )
    return bins


# --- the numpy implementation ----------------------------------------------------------------------


def residue_planes(query: U8, bins: int) -> npt.NDArray[np.uint64]:
    """A sketch's bins' minima mod 3 as two planes of dense codes (2, bins / 64) uint64: a dense
    sketch's own planes; a sparse one's decoded from its bit stream (once per query)."""
    words = bins // 64
    body = query[1:]
    if query[0] == 0:
        return np.frombuffer(body.tobytes(), dtype="<u8").reshape(2, words).astype(np.uint64)
    width = int(query[0])
    filled = np.frombuffer(body[: 8 * words].tobytes(), dtype="<u8").astype(np.uint64)
    stream = int.from_bytes(body[8 * words :].tobytes(), "little")
    planes = np.zeros((2, words), dtype=np.uint64)
    pos, size = 0, 8 * (bins // 8)
    for w in range(words):
        m = int(filled[w])
        while m:
            t = (m & -m).bit_length() - 1
            m &= m - 1
            first, more = True, True
            while more and pos + width < size:
                code = (stream >> pos) & ((1 << (width + 1)) - 1)
                pos += width + 1
                more = bool(code >> width)
                if first:
                    c = (code & ((1 << width) - 1)) % 3 + 1
                    planes[0, w] |= np.uint64((c & 1) << t)
                    planes[1, w] |= np.uint64((c >> 1) << t)
                    first = False
    return planes


def numpy_estimate(query: U8, candidates: U8, bins: int) -> F32:
    """The estimate of ``query`` with each dense candidate (a sparse query on its residue planes),
    vectorized over the candidates: XOR, OR and numpy's popcount on 64-bit words, then the same float
    arithmetic as the kernel. Sparse candidates are not handled here (NaN)."""
    words = bins // 64
    out = np.full(len(candidates), np.nan, dtype=np.float32)
    dense = np.flatnonzero(candidates[:, 0] == 0)
    q = residue_planes(query, bins)
    c = np.ascontiguousarray(candidates[dense, 1:]).view("<u8").reshape(-1, 2, words)
    qf = q[0] | q[1]
    cf = c[:, 0] | c[:, 1]
    both_mask = qf & cf
    equal = np.bitwise_count(~((c[:, 0] ^ q[0]) | (c[:, 1] ^ q[1])) & both_mask).sum(axis=1, dtype=np.int64)
    both = np.bitwise_count(both_mask).sum(axis=1, dtype=np.int64)
    either = np.bitwise_count(qf | cf).sum(axis=1, dtype=np.int64)
    chance = 1.0 / 3.0
    with np.errstate(divide="ignore", invalid="ignore"):
        j = (equal.astype(np.float64) - chance * both) / (1.0 - chance) / either
    j = np.where(either > 0, j, 0.0)
    out[dense] = np.clip(j, 0.0, 1.0).astype(np.float32)
    return out


# --- timing ----------------------------------------------------------------------------------------


def estimate(query: U8, candidates: U8, bins: int, isa: str) -> F32:
    return sketch.adaptive_similarity(query, candidates, bins=bins, isa=isa)  # type: ignore[arg-type]


def rounds(cases: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each case in each of ``repeats`` interleaved rounds (after a warm-up): a burst of
    other work on a shared machine hits every case of a round alike."""
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    return times


def ratio(times: dict[str, list[float]], slow: str, fast: str) -> float:
    """The median over the rounds of slow's time over fast's in the same round."""
    return round(statistics.median(a / b for a, b in zip(times[slow], times[fast], strict=True)), 2)


def kernel_section(
    pool: U8, queries: list[int], total: int, bins: int, repeats: int, numpy_too: bool
) -> dict[str, Any]:
    rng = np.random.default_rng(total)
    candidates = pool[rng.integers(0, len(pool), size=total)]
    dense_rows = np.flatnonzero(candidates[:, 0] == 0)
    dense_only = np.ascontiguousarray(candidates[dense_rows])
    out: dict[str, Any] = {
        "candidates": total,
        "bytes_per_candidate": int(candidates.shape[1]),
        "dense_share": round(len(dense_rows) / total, 3),
        "queries": {},
    }
    isas = sketch.available_isas()
    for qi in queries:
        query = pool[qi]
        label = "dense" if query[0] == 0 else f"sparse (width {int(query[0])})"
        cases: dict[str, Callable[[], object]] = {}
        for isa in isas:
            cases[f"mixed/{isa}"] = functools.partial(estimate, query, candidates, bins, isa)
            cases[f"dense/{isa}"] = functools.partial(estimate, query, dense_only, bins, isa)
        if numpy_too:
            cases["dense/numpy"] = functools.partial(numpy_estimate, query, dense_only, bins)
        # the same floats on every path, and numpy's on the dense candidates
        want = sketch.adaptive_similarity(query, candidates, bins=bins, isa="serial")
        for isa in isas[1:]:
            assert estimate(query, candidates, bins, isa).tobytes() == want.tobytes()
        numpy_agrees = bool(np.array_equal(numpy_estimate(query, dense_only, bins), want[dense_rows]))
        times = rounds(cases, repeats)
        medians = {name: statistics.median(t) for name, t in times.items()}
        result: dict[str, Any] = {"numpy_equals_kernel_on_dense": numpy_agrees}
        for pool_name, n in (("mixed", total), ("dense", len(dense_rows))):
            row: dict[str, Any] = {}
            for name, seconds in medians.items():
                if name.startswith(pool_name + "/"):
                    impl = name.split("/", 1)[1]
                    row[impl] = {
                        "ms": round(1e3 * seconds, 2),
                        "ns_per_candidate": round(1e9 * seconds / n, 1),
                    }
            best = sketch.active_isa()
            row["active"] = best
            row["serial_over_active"] = round(
                medians[f"{pool_name}/serial"] / medians[f"{pool_name}/{best}"], 2
            )
            if f"{pool_name}/numpy" in medians:
                row["numpy_over_active"] = round(
                    medians[f"{pool_name}/numpy"] / medians[f"{pool_name}/{best}"], 2
                )
            result[pool_name] = row
        out["queries"][label] = result
    return out


def exact_section(params: CollectionParams, texts: list[str], total: int, repeats: int) -> dict[str, Any]:
    """The exact sketch's merge (``sketch.exact_similarity``) of a few queries with ``total`` random
    sets of the same documents, per ISA: with no floor (every merge to its end), and at the
    threshold (the service's floor: a merge stops once the floor is out of reach)."""
    _, flat, offsets = sketch.exact_sketches(
        texts, num_perm=16, shingle=params.shingle, size=params.size, seed=params.seed, threads=2
    )
    rng = np.random.default_rng(total + 1)
    rows = rng.integers(0, len(texts), size=total)
    queries = [flat[offsets[i] : offsets[i + 1]] for i in rng.integers(0, len(texts), size=4).tolist()]
    isas = sketch.available_isas()

    def merge(floor: float, isa: str) -> None:
        for q in queries:
            sketch.exact_similarity(q, flat, offsets, rows, floor=floor, isa=isa)  # type: ignore[arg-type]

    cases: dict[str, Callable[[], object]] = {}
    for floor in (0.0, THRESHOLD):
        for isa in isas:
            cases[f"{floor}/{isa}"] = functools.partial(merge, floor, isa)
    times = rounds(cases, repeats)
    medians = {name: statistics.median(t) for name, t in times.items()}
    out: dict[str, Any] = {
        "candidates": total,
        "queries": len(queries),
        "mean_set_size": round(float(np.diff(offsets).mean()), 1),
    }
    for floor in (0.0, THRESHOLD):
        row: dict[str, Any] = {
            isa: {
                "ms": round(1e3 * medians[f"{floor}/{isa}"], 2),
                "ns_per_candidate": round(1e9 * medians[f"{floor}/{isa}"] / (total * len(queries)), 1),
            }
            for isa in isas
        }
        best = sketch.active_isa()
        row["serial_over_active"] = ratio(times, f"{floor}/serial", f"{floor}/{best}")
        out[f"floor_{floor}"] = row
    return out


# --- the share of a check ----------------------------------------------------------------------------


async def check_share(texts: list[str], batch: int, isa: str | None = None) -> dict[str, Any]:
    """Checks (with insert) of ``texts`` in batches through the in-process Index on an embedded Valkey:
    the time spent in ``sketch.adaptive_similarity`` (every candidate's estimate, on ``isa``: the
    dispatched one when None) and in building the scorer's pool, against the whole check's wall time
    and this process's CPU time (the server's CPU, another process, is given beside)."""
    import neardup.domain.index as index_module
    from neardup.domain import Document, Index
    from neardup.storage import EmbeddedValkey, RedisStore

    spent = {"kernel": 0.0, "scorer": 0.0, "calls": 0, "candidates": 0}
    kernel = sketch.adaptive_similarity
    make_scorer = index_module.candidate_scorer  # type: ignore[attr-defined]

    def timed_kernel(*args: Any, **kwargs: Any) -> F32:
        if isa is not None:
            kwargs["isa"] = isa
        started = time.perf_counter()
        out = kernel(*args, **kwargs)
        spent["kernel"] += time.perf_counter() - started
        spent["calls"] += 1
        spent["candidates"] += len(out)
        return out

    def timed_scorer(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        out = make_scorer(*args, **kwargs)
        spent["scorer"] += time.perf_counter() - started
        return out

    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedValkey(Path(tmp) / "valkey", fsync="everysec")
        server.start(timeout=120)
        try:
            store = RedisStore.from_url(server.url, timeout=600)
            index = Index(store)
            params = CollectionParams.create("share", threshold=THRESHOLD)
            await index.create_collection(params)
            sketch.adaptive_similarity = timed_kernel
            index_module.candidate_scorer = timed_scorer  # type: ignore[attr-defined]
            cpu_before = await store.client.info("cpu")
            wall0, cpu0 = time.perf_counter(), time.process_time()
            duplicates = 0
            for start in range(0, len(texts), batch):
                docs = [Document(f"d{i}", t) for i, t in enumerate(texts[start : start + batch], start=start)]
                results = await index.check("share", docs)
                duplicates += sum(r.duplicate for r in results)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            cpu_after = await store.client.info("cpu")
            await index.close()
            await store.close()
        finally:
            sketch.adaptive_similarity = kernel
            index_module.candidate_scorer = make_scorer  # type: ignore[attr-defined]
            server.stop()
    server_cpu = sum(float(cpu_after[k]) - float(cpu_before[k]) for k in ("used_cpu_user", "used_cpu_sys"))
    verification = spent["kernel"] + spent["scorer"]
    return {
        "isa": isa or sketch.active_isa(),
        "documents": len(texts),
        "batch": batch,
        "duplicates_found": duplicates,
        "verified_candidates": spent["candidates"],
        "kernel_calls": spent["calls"],
        "check_wall_s": round(wall, 3),
        "client_cpu_s": round(cpu, 3),
        "server_cpu_s": round(server_cpu, 3),
        "kernel_s": round(spent["kernel"], 4),
        "kernel_us_per_call": round(1e6 * spent["kernel"] / max(1, int(spent["calls"])), 1),
        "scorer_pool_s": round(spent["scorer"], 4),
        "kernel_share_of_client_cpu": round(spent["kernel"] / cpu, 4),
        "verification_share_of_client_cpu": round(verification / cpu, 4),
        "verification_share_of_client_and_server_cpu": round(verification / (cpu + server_cpu), 4),
        "how": "sketch.adaptive_similarity and banding.candidate_scorer wrapped with perf_counter during "
        "Index.check (insert) of every batch",
    }


# --- main ------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    params = defaults()
    bins = params.bins
    started = time.perf_counter()
    texts = documents(3_000 if args.quick else 6_000)
    pool = sketches(params, texts)
    modes = pool[:, 0]
    rng = np.random.default_rng(1)
    dense_ids = np.flatnonzero(modes == 0)
    sparse_ids = np.flatnonzero(modes >= 3)
    queries = [int(rng.choice(dense_ids)), int(rng.choice(sparse_ids))]
    result: dict[str, Any] = {
        "benchmark": "bench/bench_verify.py" + (" --quick" if args.quick else ""),
        "machine": {"cpu": cpu_model(), "python": platform.python_version(), "numpy": np.__version__},
        "commit": git_commit(),
        "isas": sketch.available_isas(),
        "active_isa": sketch.active_isa(),
        "params": {
            "num_perm": params.num_perm,
            "threshold": THRESHOLD,
            "bands": params.bands,
            "rows": params.rows,
            "bins": bins,
        },
        "documents": {
            "count": len(texts),
            "kb_median": round(statistics.median(len(t.encode()) for t in texts) / 1e3, 1),
            "dense_share": round(float((modes == 0).mean()), 3),
            "sparse_widths": {str(w): int((modes == w).sum()) for w in sorted(set(modes.tolist())) if w},
        },
        "repeats": repeats,
        "kernel": {},
    }
    for total in (30_000,) if args.quick else (30_000, 1_000_000):
        # the calls at 30,000 candidates take milliseconds: more rounds of them, against the noise
        rounds_here = repeats * (3 if total < 100_000 else 1)
        result["kernel"][str(total)] = kernel_section(pool, queries, total, bins, rounds_here, numpy_too=True)
        result["kernel"][str(total)]["rounds"] = rounds_here
        print(json.dumps(result["kernel"][str(total)]), file=sys.stderr)
    # a sample with its share of edited copies (near-duplicates: candidates to verify), in a random order
    order = np.random.default_rng(2).permutation(len(texts))[: 1_500 if args.quick else 3_000]
    share_docs = [texts[i] for i in order.tolist()]
    result["exact"] = exact_section(params, texts, 30_000, repeats)
    result["exact"]["rounds"] = repeats
    print(json.dumps(result["exact"]), file=sys.stderr)
    result["check_share"] = asyncio.run(check_share(share_docs, batch=100))
    result["check_share_serial"] = asyncio.run(check_share(share_docs, batch=100, isa="serial"))
    result["seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
