"""Crowded buckets: the cost of a check as thousands of near-copies of one template page pile up, and
whether a real near-duplicate is still found behind them.

A fresh collection (threshold 0.8, default parameters) takes light variants of one 400-word template
page (4 words changed each: the pages of one templated site), in batches, checked with insert; then
pairs (P, P2): P shares 60% of its words with the template and has 40% of its own, P2 is P with one
word changed (Jaccard ~0.98). Printed as JSON:

- ``windows``: documents/s of the checks around each crowd size (the 1,000 documents before it), and
  their ratio to the rate at 1,000 variants: a check's work should not grow with the crowd;
- ``pairs_found``: of the P2, how many had their P among the matches (neardup: verified matches;
  datasketch: among the LSH candidates, unverified);
- ``used_memory_per_doc``: the server's memory per stored document;
- the same workload through datasketch's ``MinHashLSH`` in memory (the same word 5-gram features,
  num_perm 128, threshold 0.8), side by side: query then insert per document.

    python bench/bench_crowds.py                     # 20,000 variants, 100 pairs (~2 min)
    python bench/bench_crowds.py --variants 5000 --no-datasketch
    python bench/bench_crowds.py --no-module         # the band step in Lua, as on an external server
    python bench/bench_crowds.py --cluster --no-datasketch   # on a 3-node Redis Cluster

Ratios come from one run; absolute rates only as context (a shared 2-core machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_service import process_cpu_seconds  # noqa: E402
from machine import cpu_model, git_commit  # noqa: E402

from neardup.domain import CollectionParams, Document, Index  # noqa: E402
from neardup.storage import ClusterStore, EmbeddedValkey, RedisStore, Store  # noqa: E402
from neardup.storage.keys import BUCKET_CAP  # noqa: E402
from neardup.testing import LocalCluster  # noqa: E402

WORDS = 400
WINDOW = 1000


def words(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [f"w{rng.randrange(100_000)}" for _ in range(n)]


def edited(text: list[str], seed: int, changes: int) -> list[str]:
    rng = random.Random(seed)
    out = list(text)
    for _ in range(changes):
        out[rng.randrange(len(out))] = f"x{rng.randrange(10**9)}"
    return out


def workload(variants: int, pairs: int) -> tuple[list[str], list[str], list[str]]:
    template = words(1, WORDS)
    crowd = [" ".join(edited(template, 10 + i, 4)) for i in range(variants)]
    ps = [template[: int(WORDS * 0.6)] + words(1000 + j, int(WORDS * 0.4)) for j in range(pairs)]
    return crowd, [" ".join(p) for p in ps], [" ".join(edited(p, 5000 + j, 1)) for j, p in enumerate(ps)]


def windows(times: list[tuple[int, float]], sizes: list[int]) -> dict[str, Any]:
    """Documents/s over the WINDOW documents before each size (times: (documents, seconds) per batch)."""
    done, ends = 0, []
    for n, t in times:
        done += n
        ends.append((done, n, t))
    rates: dict[str, Any] = {}
    for size in sizes:
        span = [(n, t) for end, n, t in ends if size - WINDOW < end <= size]
        if span:
            rates[str(size)] = round(sum(n for n, _ in span) / sum(t for _, t in span))
    base = rates.get(str(sizes[0]))
    return {
        "docs_per_s": rates,
        "vs_first": {k: round(v / base, 2) for k, v in rates.items()} if base else {},
    }


def used_memory(servers: list[EmbeddedValkey]) -> int:
    """The servers' used_memory together."""
    total = 0
    for server in servers:
        client = redis.Redis.from_url(server.url)
        try:
            total += int(client.info("memory")["used_memory"])
        finally:
            client.close()
    return total


async def neardup(
    crowd: list[str], ps: list[str], p2s: list[str], batch: int, module: bool, cluster: bool = False
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store: Store
        if cluster:  # 3 nodes; the server CPU below is theirs together
            local = LocalCluster(Path(tmp) / "cluster", module=module)
            store = ClusterStore.from_url(local.start(), timeout=600)
            servers = local.nodes
        else:
            server = EmbeddedValkey(Path(tmp) / "valkey", fsync="everysec", module=module)
            store = RedisStore.from_url(server.start(), timeout=600)
            servers = [server]
        index = Index(store)
        try:
            await index.create_collection(CollectionParams.create("crowd", threshold=0.8))
            memory0 = used_memory(servers)
            times: list[tuple[int, float]] = []
            server_cpu: list[tuple[int, float]] = []
            pids = [s.pid for s in servers if s.pid is not None]

            def server_seconds() -> float:
                return sum(process_cpu_seconds(pid) for pid in pids)

            for start in range(0, len(crowd), batch):
                docs = [Document(f"v{i}", t) for i, t in enumerate(crowd[start : start + batch], start)]
                began, cpu = time.perf_counter(), server_seconds()
                await index.check("crowd", docs)
                times.append((len(docs), time.perf_counter() - began))
                server_cpu.append((len(docs), server_seconds() - cpu))
            memory = used_memory(servers) - memory0
            await index.check("crowd", [Document(f"p{j}", t) for j, t in enumerate(ps)])
            results = await index.check(
                "crowd", [Document(f"q{j}", t) for j, t in enumerate(p2s)], insert=False
            )
            found = sum(f"p{j}" in [m.id for m in r.matches] for j, r in enumerate(results))
        finally:
            await store.close()
            if cluster:
                local.stop()
            else:
                server.stop()
    return {
        "times": times,
        "server_cpu": server_cpu,
        "pairs_found": found,
        "used_memory_per_doc": round(memory / len(crowd)),
    }


def datasketch_run(crowd: list[str], ps: list[str], p2s: list[str]) -> dict[str, Any]:
    from datasketch import MinHash, MinHashLSH

    def minhash(text: str) -> MinHash:
        tokens = text.split()
        m = MinHash(num_perm=128)
        m.update_batch([" ".join(tokens[i : i + 5]).encode() for i in range(len(tokens) - 4)])
        return m

    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    times: list[tuple[int, float]] = []
    for start in range(0, len(crowd), 500):
        began = time.perf_counter()
        for i, text in enumerate(crowd[start : start + 500], start):
            m = minhash(text)
            lsh.query(m)
            lsh.insert(f"v{i}", m)
        times.append((len(crowd[start : start + 500]), time.perf_counter() - began))
    for j, text in enumerate(ps):
        lsh.insert(f"p{j}", minhash(text))
    found = sum(f"p{j}" in lsh.query(minhash(text)) for j, text in enumerate(p2s))
    return {"times": times, "pairs_found": found}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--no-module", action="store_true", help="the band step in Lua")
    parser.add_argument("--no-datasketch", action="store_true")
    parser.add_argument("--cluster", action="store_true", help="a 3-node Redis Cluster instead of one server")
    args = parser.parse_args()
    sizes = [s for s in (1000, 2000, 5000, 10_000, 20_000, 50_000) if s <= args.variants]
    crowd, ps, p2s = workload(args.variants, args.pairs)
    ours = asyncio.run(neardup(crowd, ps, p2s, args.batch, module=not args.no_module, cluster=args.cluster))
    out: dict[str, Any] = {
        "benchmark": "crowds",
        "git_commit": git_commit(),
        "cpu": cpu_model(),
        "variants": args.variants,
        "pairs": args.pairs,
        "batch": args.batch,
        "bucket_cap": BUCKET_CAP,
        "module": not args.no_module,
        "store": "3-node cluster" if args.cluster else "one server",
        "neardup": {
            **windows(ours["times"], sizes),
            "valkey_cpu_us_per_doc": {
                k: round(1e6 / v) for k, v in windows(ours["server_cpu"], sizes)["docs_per_s"].items()
            },
            "median_batch_s": round(statistics.median(t for _, t in ours["times"]), 3),
            "pairs_found": ours["pairs_found"],
            "used_memory_per_doc": ours["used_memory_per_doc"],
        },
    }
    if not args.no_datasketch:
        theirs = datasketch_run(crowd, ps, p2s)
        out["datasketch_minhashlsh_in_memory"] = {
            **windows(theirs["times"], sizes),
            "pairs_found_among_candidates": theirs["pairs_found"],
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
