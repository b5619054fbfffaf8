"""Quality against the exact truth, side by side in one run: neardup through its running service,
datasketch ``MinHashLSH`` and rensa ``RMinHashLSH``; and the trade-off curve the defaults come from.

For each threshold t (0.5 ... 0.9):

- **neardup, service**: a real ``neardup serve`` (127.0.0.1, a free port, a temporary data directory,
  its embedded Valkey). One collection per threshold, created with only ``threshold`` given (so with the
  service's default banding, sketch and verification for it; ``--create`` adds fields, e.g.
  ``{"verify": "exact"}``). Every corpus document goes through ``check/batch`` in corpus order
  (*online*: each is compared with the ones before it); the reported matches are the predicted pairs.
  Then every document is sent to ``query`` (read-only, everything stored): the (query, match) pairs,
  itself left out, are scored as directed pairs. Then every mutant of the mutation set goes to
  ``query``: found when its base document is among the matches.
- **datasketch**: ``MinHash(num_perm=128)`` over the usual Python shingle strings (``update_batch``),
  ``MinHashLSH(threshold=t, num_perm=128)`` in memory with the (b, r) it picks and with neardup's; each
  document queried then inserted in the same order. Raw candidates, and candidates whose MinHash
  estimate is >= t.
- **rensa**: ``RMinHash(128, seed=1)`` over the same strings, ``RMinHashLSH(t, 128, num_bands)`` with 16
  bands (its documentation's setting) and with neardup's bands; raw and estimate-filtered.

Scores: precision and recall of the predicted pairs against the exact truth (``bench/truth.py``) at t,
overall and on pairs whose shingle sets are not identical; for mutants, recall per edit rate (found
among the mutants whose exact Jaccard with their base is >= t) and the plain detection rate.

The **curves** (threshold 0.8) run the service's check in this process with its own code: the
collection's sketches (``banding.sketch_texts``), candidates sharing a band key, and its verification
(``banding.candidate_scorer``) kept at a floor. The trade-off: the banding ``recall_bands`` picks for
several targets of P(t), with floors from t - 0.02 to t + 0.03 beside the service's own
(``index.collection_floor``); the seeds: the defaults' check with other hash seeds; the S-curve: the
empirical candidate rate per true-Jaccard bucket beside P(s) = 1 - (1 - s^r)^b.

    python bench/quality.py --output bench/results/quality.json     # full corpus, ~10-15 minutes
    python bench/quality.py --no-curves --thresholds 0.8 --output bench/results/quality.json  # headline
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import importlib.util
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
if importlib.util.find_spec("neardup") is None:
    sys.exit("bench needs the installed package: pip install '.[bench]' from the repository root")

import mutations  # noqa: E402
import truth as truth_module  # noqa: E402

from neardup import sketch  # noqa: E402
from neardup.domain.banding import candidate_scorer, sketch_texts  # noqa: E402
from neardup.domain.index import collection_floor  # noqa: E402
from neardup.domain.models import CollectionParams, max_bands  # noqa: E402

HOST = "127.0.0.1"
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
NUM_PERM = 128
HEADLINE = 0.8
#: Targets of P(t), the chance that a pair at the threshold becomes a candidate, whose banding
#: (``sketch.recall_bands``) the trade-off curve tries beside the service's own.
RECALL_TARGETS = (0.9, 0.95, 0.98, 0.99, 0.995, 0.999)
#: Verification floors tried: the threshold plus these (negative: a margin below t), and the service's
#: own (``neardup.domain.index.collection_floor``).
FLOOR_OFFSETS = (-0.02, -0.01, 0.0, 0.01, 0.02, 0.03)
TARGETS = {"precision": 0.99, "recall": 0.98, "recall_at_1pct_edits": 0.97}
#: Hash seeds for the robustness check: seed 1 is neardup's (part of the stored format); the others
#: show how much of a result is the luck of one draw of hash functions.
SEEDS = (1, 2, 3, 4, 5, 6)
I64 = npt.NDArray[np.int64]


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- pairs and scores ------------------------------------------------------------------------------


@dataclass
class Truth:
    """The exact truth pairs (i < j) as codes i * n + j, sorted, with their Jaccard."""

    n: int
    codes: I64
    jaccard: npt.NDArray[np.float64]
    identical: npt.NDArray[np.bool_]

    @classmethod
    def from_pairs(cls, n: int, pairs: dict[str, Any]) -> Truth:
        i, j = np.asarray(pairs["i"], np.int64), np.asarray(pairs["j"], np.int64)
        inter, union = np.asarray(pairs["inter"], np.int64), np.asarray(pairs["union"], np.int64)
        codes = np.minimum(i, j) * n + np.maximum(i, j)
        order = np.argsort(codes)
        return cls(n, codes[order], (inter / np.maximum(union, 1))[order], (inter == union)[order])

    def lookup(self, codes: I64) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """Jaccard of each pair code (0.0 when below the truth threshold) and whether it is identical."""
        pos = np.searchsorted(self.codes, codes)
        pos = np.minimum(pos, max(len(self.codes) - 1, 0))
        hit = (self.codes[pos] == codes) if len(self.codes) else np.zeros(len(codes), bool)
        jac = np.where(hit, self.jaccard[pos] if len(self.codes) else 0.0, 0.0)
        ident = np.where(hit, self.identical[pos] if len(self.codes) else False, False)
        return jac, ident


def pair_codes(i: Sequence[int] | I64, j: Sequence[int] | I64, n: int) -> I64:
    """Undirected pair codes min * n + max, unique, self-pairs dropped."""
    a, b = np.asarray(i, np.int64), np.asarray(j, np.int64)
    keep = a != b
    a, b = a[keep], b[keep]
    return np.unique(np.minimum(a, b) * n + np.maximum(a, b))


def _ratio(num: int, den: int) -> float:
    return round(num / den, 5) if den else 1.0


def score(truth: Truth, predicted: I64, threshold: float, directed: I64 | None = None) -> dict[str, Any]:
    """Precision and recall of predicted undirected pairs (or, with ``directed``, directed pairs
    q * n + m: each truth pair counts in both directions) against the truth at ``threshold``."""
    n = truth.n
    positive = truth.jaccard >= threshold - 1e-9
    if directed is not None:
        canon = np.minimum(directed // n, directed % n) * n + np.maximum(directed // n, directed % n)
        jac, ident = truth.lookup(canon)
        n_pos, n_pos_ni = 2 * int(positive.sum()), 2 * int((positive & ~truth.identical).sum())
    else:
        jac, ident = truth.lookup(predicted)
        n_pos, n_pos_ni = int(positive.sum()), int((positive & ~truth.identical).sum())
    tp = jac >= threshold - 1e-9
    fp_jac = jac[~tp]
    return {
        "predicted": len(jac),
        "positives": n_pos,
        "true_positives": int(tp.sum()),
        "precision": _ratio(int(tp.sum()), len(jac)),
        "recall": _ratio(int(tp.sum()), n_pos),
        "precision_non_identical": _ratio(int((tp & ~ident).sum()), int((~ident).sum())),
        "recall_non_identical": _ratio(int((tp & ~ident).sum()), n_pos_ni),
        "positives_non_identical": n_pos_ni,
        # where the false positives are: just under t (estimate noise) or far below
        "false_positives_within_0.05": int((fp_jac >= threshold - 0.05).sum()),
        "false_positives_below_0.5": int((fp_jac == 0.0).sum()),
    }


def mutation_scores(
    mutants: Sequence[mutations.Mutant], true_j: Sequence[float], found: Sequence[bool], threshold: float
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rate in sorted({m.rate for m in mutants}):
        idx = [k for k, m in enumerate(mutants) if m.rate == rate]
        pos = [k for k in idx if true_j[k] >= threshold - 1e-9]
        out[f"{rate:.2f}"] = {
            "mutants": len(idx),
            "mean_true_jaccard": round(float(np.mean([true_j[k] for k in idx])), 4) if idx else None,
            "at_or_above_threshold": len(pos),
            "recall": _ratio(sum(found[k] for k in pos), len(pos)) if pos else None,
            "detected": _ratio(sum(found[k] for k in idx), len(idx)),
        }
    return out


# --- buckets of equal keys -> pairs --------------------------------------------------------------------


def pairs_sharing_keys(keys: npt.NDArray[np.uint64], n: int) -> I64:
    """Undirected codes of every pair of documents that share at least one band key (key 0, the empty
    signature's, never collides). ``keys`` has shape (n, bands)."""
    codes: list[I64] = []
    for band in range(keys.shape[1]):
        col = keys[:, band]
        order = np.argsort(col, kind="stable")
        sorted_keys = col[order]
        bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
        starts = np.concatenate([[0], bounds])
        ends = np.concatenate([bounds, [len(col)]])
        lengths = ends - starts
        real = sorted_keys[starts] != 0
        two = starts[(lengths == 2) & real]
        if len(two):
            a, b = order[two], order[two + 1]
            codes.append(np.minimum(a, b) * n + np.maximum(a, b))
        for s, e in zip(
            starts[(lengths > 2) & real].tolist(), ends[(lengths > 2) & real].tolist(), strict=True
        ):
            members = np.sort(order[s:e])
            a, b = np.triu_indices(len(members), k=1)
            codes.append(members[a] * n + members[b])
    return np.unique(np.concatenate(codes)) if codes else np.empty(0, np.int64)


def estimates(sigs: npt.NDArray[Any], codes: I64, n: int) -> npt.NDArray[np.float64]:
    """MinHash estimate of each pair: the fraction of equal slots (chunked to bound memory)."""
    out = np.empty(len(codes), dtype=np.float64)
    for s in range(0, len(codes), 20000):
        c = codes[s : s + 20000]
        out[s : s + len(c)] = (sigs[c // n] == sigs[c % n]).mean(axis=1)
    return out


# --- the service ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class Service:
    """``neardup serve`` on 127.0.0.1 with a temporary data directory (embedded Valkey), in its own
    process group; stopped (and its Valkey with it) on exit."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="neardup-quality-"))
        self.log_path = self.tmp / "serve.log"
        self.port = 0
        self.redis_url = ""
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Service:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
        # the same `neardup` this process imports
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(sketch.__file__).resolve().parent.parent), env.get("PYTHONPATH", "")]
        )
        for _ in range(3):
            self.port = free_port()
            with self.log_path.open("wb") as log:
                self.process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "neardup.cli",
                        "serve",
                        "--host",
                        HOST,
                        "--port",
                        str(self.port),
                        "--workers",
                        "1",
                        "--data-dir",
                        str(self.tmp / "data"),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.tmp,
                    start_new_session=True,
                )
            if self._ready(90):
                return self
            self._stop()
        self.__exit__()
        raise RuntimeError(f"neardup serve did not start: {self.log_path.read_text()[-2000:]}")

    def _ready(self, timeout: float) -> bool:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            found = re.search(
                r"embedded valkey on (redis://\S+?),", self.log_path.read_text(errors="replace")
            )
            if found:
                self.redis_url = found.group(1)
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://{HOST}:{self.port}/readyz", timeout=2).status_code == 200:
                        return True
            time.sleep(0.2)
        return False

    def _stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # the CLI stops uvicorn, then its Valkey
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # anything left in its group
        pid_file = self.tmp / "data" / "valkey.pid"
        with contextlib.suppress(OSError, ValueError):
            valkey = int(pid_file.read_text().strip())
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(valkey):
                time.sleep(0.1)
            if _alive(valkey) and "valkey" in Path(f"/proc/{valkey}/cmdline").read_text(errors="replace"):
                os.kill(valkey, signal.SIGKILL)

    def __exit__(self, *exc: object) -> None:
        self._stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def used_memory(self) -> int:
        import redis

        client = redis.Redis.from_url(self.redis_url, socket_timeout=60)
        try:
            return int(client.info("memory")["used_memory"])
        finally:
            client.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _batches(texts: Sequence[str], max_docs: int = 200, max_bytes: int = 8_000_000) -> Iterator[range]:
    start, size = 0, 0
    for k, text in enumerate(texts):
        size += len(text) * 2 + 64
        if k > start and (k - start >= max_docs or size > max_bytes):
            yield range(start, k)
            start, size = k, len(text) * 2 + 64
    if start < len(texts):
        yield range(start, len(texts))


def _parallel_queries(
    base: str, name: str, texts: Sequence[str], workers: int = 4
) -> list[list[tuple[str, float]]]:
    """``query`` for each text (limit 1000): the (id, similarity) of its matches."""
    import httpx

    local = threading.local()

    def one(text: str) -> list[tuple[str, float]]:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(base_url=base, timeout=120)
        reply = client.post(f"/v1/collections/{name}/query", json={"text": text, "limit": 1000})
        reply.raise_for_status()
        return [(m["id"], m["similarity"]) for m in reply.json()["matches"]]

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, texts, chunksize=16))


def service_quality(
    ids: Sequence[str],
    texts: Sequence[str],
    truth: Truth,
    mutants: Sequence[mutations.Mutant],
    mutant_j: Sequence[float],
    thresholds: Sequence[float],
    create: dict[str, Any] | None = None,
) -> dict[str, Any]:
    import httpx

    index = {doc_id: k for k, doc_id in enumerate(ids)}
    n = len(ids)
    out: dict[str, Any] = {"thresholds": {}}
    with Service() as service:
        base = f"http://{HOST}:{service.port}"
        client = httpx.Client(base_url=base, timeout=300)
        for t in thresholds:
            name = f"quality-{round(t * 100)}"
            reply = client.post("/v1/collections", json={"name": name, "threshold": t, **(create or {})})
            reply.raise_for_status()
            params = reply.json()
            memory_before = service.used_memory()
            started = time.perf_counter()
            pi: list[int] = []
            pj: list[int] = []
            for batch in _batches(texts):
                body = {"documents": [{"id": ids[k], "text": texts[k]} for k in batch]}
                answer = client.post(f"/v1/collections/{name}/check/batch", json=body)
                answer.raise_for_status()
                for k, result in zip(batch, answer.json()["results"], strict=True):
                    for match in result["matches"]:
                        pi.append(index[match["id"]])
                        pj.append(k)
            check_s = time.perf_counter() - started
            bytes_per_doc = (service.used_memory() - memory_before) / max(n, 1)
            started = time.perf_counter()
            answers = _parallel_queries(base, name, texts)
            query_s = time.perf_counter() - started
            directed = np.unique(
                np.array(
                    [q * n + index[m] for q, ms in enumerate(answers) for m, _ in ms if index[m] != q],
                    dtype=np.int64,
                )
            )
            found_answers = _parallel_queries(base, name, [m.text for m in mutants])
            found = [
                any(mid == ids[m.base] for mid, _ in ms) for m, ms in zip(mutants, found_answers, strict=True)
            ]
            client.delete(f"/v1/collections/{name}")
            out["thresholds"][f"{t:.1f}"] = {
                "bands": params["bands"],
                "rows": params["rows"],
                "verify": params.get("verify", "estimate"),
                "bins": params.get("bins", 0),
                "check": score(truth, pair_codes(pi, pj, n), t),
                "query": score(truth, np.empty(0, np.int64), t, directed=directed),
                "mutations": mutation_scores(mutants, mutant_j, found, t),
                "check_seconds": round(check_s, 2),
                "query_seconds": round(query_s, 2),
                "redis_bytes_per_document": round(bytes_per_doc, 1),
            }
        client.close()
    return out


# --- datasketch and rensa -----------------------------------------------------------------------------


def shingle_strings(text: str) -> list[str]:
    """The reference word 5-grams as space-joined strings (the usual Python shingling)."""
    toks = truth_module.words(text)
    if not toks:
        return []
    if len(toks) < 5:
        return [" ".join(toks)]
    return list({" ".join(g) for g in zip(toks, toks[1:], toks[2:], toks[3:], toks[4:], strict=False)})


@dataclass
class LibrarySketches:
    datasketch: list[Any] = field(default_factory=list)
    datasketch_matrix: npt.NDArray[np.uint64] = field(
        default_factory=lambda: np.empty((0, NUM_PERM), np.uint64)
    )
    rensa: list[Any] = field(default_factory=list)
    rensa_matrix: npt.NDArray[np.uint64] = field(default_factory=lambda: np.empty((0, NUM_PERM), np.uint64))
    seconds: dict[str, float] = field(default_factory=dict)


def library_sketches(texts: Sequence[str]) -> LibrarySketches:
    from datasketch import MinHash  # type: ignore[import-untyped]
    from rensa import RMinHash  # type: ignore[import-untyped]

    out = LibrarySketches()
    ds_s = rs_s = 0.0
    for text in texts:
        strings = shingle_strings(text)
        t0 = time.perf_counter()
        m = MinHash(num_perm=NUM_PERM)
        m.update_batch([s.encode("utf-8", "surrogatepass") for s in strings])
        t1 = time.perf_counter()
        r = RMinHash(NUM_PERM, 1)
        r.update(strings)
        t2 = time.perf_counter()
        ds_s += t1 - t0
        rs_s += t2 - t1
        out.datasketch.append(m)
        out.rensa.append(r)
    out.datasketch_matrix = np.array([m.hashvalues for m in out.datasketch], dtype=np.uint64).reshape(
        -1, NUM_PERM
    )
    out.rensa_matrix = np.array([r.digest() for r in out.rensa], dtype=np.uint64).reshape(-1, NUM_PERM)
    out.seconds = {"datasketch_minhash": round(ds_s, 2), "rensa_minhash": round(rs_s, 2)}
    return out


def _online(
    n: int,
    insert: Callable[[int], None],
    query: Callable[[int], list[int]],
) -> tuple[list[int], list[int]]:
    """Each document queried against the ones before it, then inserted: candidate pairs (earlier, k)."""
    ci: list[int] = []
    cj: list[int] = []
    for k in range(n):
        for c in query(k):
            ci.append(int(c))
            cj.append(k)
        insert(k)
    return ci, cj


def _library_run(
    label: str,
    make: Callable[[], Any],
    insert: Callable[[Any, int], None],
    query: Callable[[Any, Any], list[int]],
    items: Sequence[Any],
    mutant_items: Sequence[Any],
    matrix: npt.NDArray[Any],
    mutant_matrix: npt.NDArray[Any],
    truth: Truth,
    mutants: Sequence[mutations.Mutant],
    mutant_j: Sequence[float],
    t: float,
) -> dict[str, Any]:
    n = len(items)
    lsh = make()
    started = time.perf_counter()
    ci, cj = _online(n, lambda k: insert(lsh, k), lambda k: query(lsh, items[k]))
    online_s = time.perf_counter() - started
    raw = pair_codes(ci, cj, n)
    est = estimates(matrix, raw, n)
    filtered = raw[est >= t - 1e-9]
    found_raw, found_filtered = [], []
    for m, item, row in zip(mutants, mutant_items, mutant_matrix, strict=True):
        hit = m.base in set(query(lsh, item))
        found_raw.append(hit)
        found_filtered.append(hit and float((row == matrix[m.base]).mean()) >= t - 1e-9)
    return {
        "tool": label,
        "raw": {
            "check": score(truth, raw, t),
            "mutations": mutation_scores(mutants, mutant_j, found_raw, t),
        },
        "estimate_filtered": {
            "check": score(truth, filtered, t),
            "mutations": mutation_scores(mutants, mutant_j, found_filtered, t),
        },
        "candidates_per_document": round(len(raw) / max(n, 1), 3),
        "online_seconds": round(online_s, 2),
    }


def library_quality(
    texts: Sequence[str],
    truth: Truth,
    mutants: Sequence[mutations.Mutant],
    mutant_j: Sequence[float],
    thresholds: Sequence[float],
) -> dict[str, Any]:
    from datasketch import MinHashLSH
    from rensa import RMinHashLSH

    docs = library_sketches(texts)
    muts = library_sketches([m.text for m in mutants])
    out: dict[str, Any] = {"minhash_seconds": docs.seconds, "thresholds": {}}
    for t in thresholds:
        nb, nr = (
            CollectionParams.create("x", threshold=t).bands,
            CollectionParams.create("x", threshold=t).rows,
        )
        runs: dict[str, Any] = {}
        ds_default = MinHashLSH(threshold=t, num_perm=NUM_PERM)
        variants = {
            f"datasketch (b={ds_default.b}, r={ds_default.r})": (ds_default.b, ds_default.r),
            f"datasketch (neardup's b={nb}, r={nr})": (nb, nr),
        }
        for label, (b, r) in variants.items():
            runs[label] = _library_run(
                label,
                functools.partial(MinHashLSH, threshold=t, num_perm=NUM_PERM, params=(b, r)),
                lambda lsh, k: lsh.insert(k, docs.datasketch[k], check_duplication=False),
                lambda lsh, item: list(lsh.query(item)),
                docs.datasketch,
                muts.datasketch,
                docs.datasketch_matrix,
                muts.datasketch_matrix,
                truth,
                mutants,
                mutant_j,
                t,
            )
            runs[label].update(bands=b, rows=r)
        for bands in sorted({16, nb} if NUM_PERM % nb == 0 else {16}):  # rensa needs b | num_perm
            label = f"rensa (b={bands}, r={NUM_PERM // bands})"
            runs[label] = _library_run(
                label,
                functools.partial(RMinHashLSH, t, NUM_PERM, bands),
                lambda lsh, k: lsh.insert(k, docs.rensa[k]),
                lambda lsh, item: list(lsh.query(item)),
                docs.rensa,
                muts.rensa,
                docs.rensa_matrix,
                muts.rensa_matrix,
                truth,
                mutants,
                mutant_j,
                t,
            )
            runs[label].update(bands=bands, rows=NUM_PERM // bands)
        out["thresholds"][f"{t:.1f}"] = runs
    return out


# --- the curves (in process, the service's own code) ----------------------------------------------


@dataclass
class ServiceRule:
    """The service's check of a corpus in this process: candidate pairs (codes i * n + j, sharing a band
    key) with the verification's similarity of each; for each mutant, whether it shares a band key
    with its base and its similarity to it."""

    candidates: I64
    similarity: npt.NDArray[np.float64]
    mutant_shares: npt.NDArray[np.bool_]
    mutant_similarity: npt.NDArray[np.float64]


def service_rule(
    params: CollectionParams, texts: Sequence[str], mutants: Sequence[mutations.Mutant]
) -> ServiceRule:
    n = len(texts)
    batch = sketch_texts(params, [*texts, *(m.text for m in mutants)])
    keys = batch.band_keys
    cand = pairs_sharing_keys(keys[:n], n)
    score = candidate_scorer(params, batch, [])
    sim = np.empty(len(cand), dtype=np.float64)
    first, second = cand // n, cand % n
    # the codes are sorted, so each document's candidates are one run
    starts = np.flatnonzero(np.r_[True, first[1:] != first[:-1]]) if len(cand) else np.empty(0, np.int64)
    for s, e in zip(starts.tolist(), [*starts[1:].tolist(), len(cand)], strict=True):
        sim[s:e] = score(int(first[s]), second[s:e].tolist(), 0.0)
    shares = np.array(
        [bool(np.any((keys[n + q] == keys[m.base]) & (keys[m.base] != 0))) for q, m in enumerate(mutants)],
        dtype=bool,
    )
    msim = np.array([score(n + q, [m.base], 0.0)[0] for q, m in enumerate(mutants)], dtype=np.float64)
    return ServiceRule(cand, sim, shares, msim)


def tradeoff(
    texts: Sequence[str],
    truth: Truth,
    mutants: Sequence[mutations.Mutant],
    mutant_j: Sequence[float],
    threshold: float = HEADLINE,
) -> dict[str, Any]:
    """Precision/recall of the service's check (candidates sharing a band, kept when the verification's
    similarity is >= a floor) for the banding ``recall_bands`` picks at each target of P(t) and the
    service's own, with the floor at t plus each offset and at the service's ``collection_floor``."""
    n = len(texts)
    service = CollectionParams.create("x", threshold=threshold)
    k = service.num_perm
    shapes: dict[tuple[int, int], list[float]] = {(service.bands, service.rows): []}
    for target in RECALL_TARGETS:
        shapes.setdefault(sketch.recall_bands(threshold, k, target, max_bands(k)), []).append(target)
    rows_out = []
    for (b, r), targets in sorted(
        shapes.items(), key=lambda s: sketch.collision_probability(threshold, *s[0])
    ):
        params = CollectionParams.create("x", threshold=threshold, bands=b, rows=r)
        rule = service_rule(params, texts, mutants)
        fp_p, fn_p = sketch.error_probabilities(threshold, b, r)
        floors: list[tuple[float | str, float]] = [(o, threshold + o) for o in FLOOR_OFFSETS]
        floors.append(("service", collection_floor(params)))
        for offset, floor in floors:
            keep = rule.similarity >= floor - 1e-6
            s = score(truth, rule.candidates[keep], threshold)
            found = list(rule.mutant_shares & (rule.mutant_similarity >= floor - 1e-6))
            rows_out.append(
                {
                    "recall_targets": targets,
                    "service_banding": (b, r) == (service.bands, service.rows),
                    "bands": b,
                    "rows": r,
                    "bins": params.bins,
                    "offset": offset,
                    "floor": round(floor, 5),
                    "p_candidate_at_threshold": round(
                        float(sketch.collision_probability(threshold, b, r)), 4
                    ),
                    "fp_probability": round(fp_p, 4),
                    "fn_probability": round(fn_p, 4),
                    "candidates_per_document": round(len(rule.candidates) / max(n, 1), 3),
                    "precision": s["precision"],
                    "recall": s["recall"],
                    "precision_non_identical": s["precision_non_identical"],
                    "recall_non_identical": s["recall_non_identical"],
                    "recall_at_1pct_edits": mutation_scores(mutants, mutant_j, found, threshold)
                    .get("0.01", {})
                    .get("recall"),
                }
            )
    return {"threshold": threshold, "points": rows_out}


def seed_robustness(texts: Sequence[str], truth: Truth, threshold: float = HEADLINE) -> dict[str, Any]:
    """The defaults' check with the sketches of other hash seeds: the same pairs, other draws of hash
    functions."""
    rows = []
    for seed in SEEDS:
        params = CollectionParams.create("x", threshold=threshold, seed=seed)
        floor = collection_floor(params)
        rule = service_rule(params, texts, [])
        s = score(truth, rule.candidates[rule.similarity >= floor - 1e-6], threshold)
        rows.append(
            {
                "seed": seed,
                "bands": params.bands,
                "rows": params.rows,
                "floor": round(floor, 5),
                **{
                    key: s[key]
                    for key in ("precision", "recall", "precision_non_identical", "recall_non_identical")
                },
            }
        )
    return {"threshold": threshold, "seeds": list(SEEDS), "rows": rows}


def s_curve(texts: Sequence[str], truth: Truth, params: CollectionParams) -> dict[str, Any]:
    """Empirical candidate rate per true-Jaccard bucket of the truth pairs, beside P(s)."""
    n = len(texts)
    cand = pairs_sharing_keys(sketch_texts(params, texts).band_keys, n)
    bands, rows = params.bands, params.rows
    is_cand = np.isin(truth.codes, cand)
    edges = np.round(np.arange(0.5, 1.0001, 0.05), 2)
    buckets = []
    for lo, hi in itertools.pairwise(edges):
        last = hi >= 1.0
        sel = (truth.jaccard >= lo - 1e-9) & ((truth.jaccard < hi - 1e-9) | (last & (truth.jaccard < 1.0)))
        buckets.append(
            {
                "low": float(lo),
                "high": float(hi),
                "pairs": int(sel.sum()),
                "candidate_rate": round(float(is_cand[sel].mean()), 4) if sel.any() else None,
                "mean_jaccard": round(float(truth.jaccard[sel].mean()), 4) if sel.any() else None,
            }
        )
    ident = truth.jaccard >= 1.0
    buckets.append(
        {
            "low": 1.0,
            "high": 1.0,
            "pairs": int(ident.sum()),
            "candidate_rate": round(float(is_cand[ident].mean()), 4) if ident.any() else None,
            "mean_jaccard": 1.0,
        }
    )
    grid = np.round(np.linspace(0, 1, 101), 3)
    return {
        "bands": bands,
        "rows": rows,
        "buckets": buckets,
        "curve": {
            "s": grid.tolist(),
            "p": np.round(sketch.collision_probability(grid, bands, rows), 5).tolist(),
        },
    }


# --- the whole run -----------------------------------------------------------------------------------


def run(
    docs: Sequence[dict[str, str]],
    *,
    truth_path: Path | None = None,
    mutation_count: int = 300,
    thresholds: Sequence[float] = THRESHOLDS,
    with_service: bool = True,
    with_libraries: bool = True,
    with_curves: bool = True,
    create: dict[str, Any] | None = None,
) -> dict[str, Any]:
    started = time.perf_counter()
    ids = [d["id"] for d in docs]
    texts = [d["text"] for d in docs]
    n = len(docs)
    truth_info: dict[str, Any]
    if truth_path is not None and truth_path.exists():
        loaded = truth_module.load_truth(truth_path)
        if loaded["ids"] != list(ids):
            raise SystemExit(f"{truth_path} is for another corpus: rebuild it with bench/truth.py")
        pairs = loaded
        truth_info = {**loaded["info"], "source": str(truth_path)}
    else:
        _, pairs, truth_info = truth_module.build(texts, ids)
    truth = Truth.from_pairs(n, pairs)
    mutants = mutations.mutation_set(texts, mutation_count)
    mutant_j = [
        truth_module.exact_jaccard(truth_module.shingle_set(texts[m.base]), truth_module.shingle_set(m.text))
        for m in mutants
    ]
    default = CollectionParams.create("default")
    report: dict[str, Any] = {
        "documents": n,
        "corpus_bytes": sum(len(t.encode("utf-8", "surrogatepass")) for t in texts),
        "truth": truth_info,
        "mutation_set": {
            "bases": len({m.base for m in mutants}),
            "rates": list(mutations.EDIT_RATES),
            "mutants": len(mutants),
        },
        "defaults": {
            "threshold": default.threshold,
            "num_perm": default.num_perm,
            "bands": default.bands,
            "rows": default.rows,
            "verify": default.verify,
            "bins": default.bins,
            "floor": round(collection_floor(default), 5),
            "stored_bytes": default.stored_bytes,
        },
        "thresholds": list(thresholds),
        "targets": TARGETS,
        "load_average_at_start": load_average(),
    }
    if with_curves:
        report["s_curve"] = s_curve(texts, truth, default)
        report["tradeoff"] = tradeoff(texts, truth, mutants, mutant_j)
        report["seeds"] = seed_robustness(texts, truth)
    if with_service:
        report["collection_options"] = create or {}
        report["neardup_service"] = service_quality(ids, texts, truth, mutants, mutant_j, thresholds, create)
    if with_libraries:
        report["libraries"] = library_quality(texts, truth, mutants, mutant_j, thresholds)
    report["load_average_at_end"] = load_average()
    report["seconds"] = round(time.perf_counter() - started, 1)
    if with_service:
        head = report["neardup_service"]["thresholds"].get(f"{HEADLINE:.1f}")
        if head:
            report["targets_met"] = {
                "precision": head["check"]["precision"] >= TARGETS["precision"],
                "recall": head["check"]["recall"] >= TARGETS["recall"],
                "recall_at_1pct_edits": (head["mutations"].get("0.01", {}).get("recall") or 0)
                >= TARGETS["recall_at_1pct_edits"],
            }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=HERE / "data" / "corpus.jsonl")
    parser.add_argument("--truth", type=Path, default=HERE / "data" / "truth.npz")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N documents")
    parser.add_argument("--mutations", type=int, default=300, help="base documents of the mutation set")
    parser.add_argument("--no-service", action="store_true")
    parser.add_argument("--no-libraries", action="store_true")
    parser.add_argument("--no-curves", action="store_true", help="skip the S-curve, trade-off and seeds")
    parser.add_argument("--thresholds", default="", help="comma-separated thresholds (default 0.5..0.9)")
    parser.add_argument(
        "--create",
        default="{}",
        help='JSON merged into each collection\'s creation body, e.g. {"verify": "exact"}',
    )
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    import corpus as corpus_module

    docs = corpus_module.load(args.corpus)
    truth_path: Path | None = args.truth
    if args.limit:
        docs = docs[: args.limit]
        truth_path = None
    report = run(
        docs,
        truth_path=truth_path,
        mutation_count=args.mutations,
        with_service=not args.no_service,
        with_libraries=not args.no_libraries,
        with_curves=not args.no_curves,
        thresholds=[float(x) for x in args.thresholds.split(",")] if args.thresholds else THRESHOLDS,
        create=json.loads(args.create),
    )
    text = json.dumps(report, indent=1)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
