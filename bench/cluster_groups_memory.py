"""Bytes per document of a cluster collection created without ``expected_documents``, as it grows: a
3-node Redis Cluster with neardup's module (started here on 127.0.0.1, stopped at the end), one
collection of 16 bands, documents written straight through ``ClusterStore.check`` (mode ``put``,
random band keys, 482-byte sketches, short records: what the service sends, without sketching texts),
``used_memory`` summed over the nodes at each checkpoint, and at the end how many band and id groups
are listpacks and how many hashtables (``OBJECT ENCODING``). Prints JSON.

    .venv/bin/python bench/cluster_groups_memory.py [--docs 400000] [--every 100000] [--batch 1000]

Past ~250,000 documents a table of fixed groups (2^14 band groups) passes 256 fields per group, which
the nodes' ``hash-max-listpack-entries`` keeps in a listpack; this measures what that costs and what
groups that grow by linear hashing inside their family cost instead (docs/design.md, "Groups on a
cluster").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from neardup.storage import ClusterStore, keys
from neardup.storage.store import CheckBatch
from neardup.testing import LocalCluster

BANDS = 16
SKETCH_BYTES = 482


def used_memory(urls: list[str]) -> int:
    total = 0
    for url in urls:
        client = redis.Redis.from_url(url)
        try:
            total += int(client.info("memory")["used_memory"])
        finally:
            client.close()
    return total


def encodings(urls: list[str], pattern: str) -> dict[str, int]:
    """How many keys matching ``pattern`` each encoding has, over every node."""
    out: dict[str, int] = {}
    for url in urls:
        client = redis.Redis.from_url(url)
        try:
            for key in client.scan_iter(match=pattern, count=1000):
                if client.type(key) != b"hash":
                    continue
                encoding = client.object("encoding", key)
                name = encoding.decode() if isinstance(encoding, bytes) else str(encoding)
                out[name] = out.get(name, 0) + 1
        finally:
            client.close()
    return out


def batch(start: int, n: int) -> CheckBatch:
    ids = [f"doc-{i:09d}".encode() for i in range(start, start + n)]
    return CheckBatch(
        bands=BANDS,
        band_keys=os.urandom(8 * BANDS * n),
        signatures=os.urandom(SKETCH_BYTES * n),
        empties=b"0" * n,
        ids=ids,
        records=[b'0:%d:%s{"n":1}' % (len(i), i) for i in ids],
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp) / "c")
        cluster.start()
        try:
            store = ClusterStore.from_url(cluster.url, timeout=30)
            try:
                name, gen = "mem", secrets.token_hex(6)
                await store.create_collection(
                    name, b'{"format":1}', gen, bands=BANDS, sketch_bytes=SKETCH_BYTES
                )
                k = keys.CollectionKeys(name, gen)
                base = used_memory(cluster.urls)
                points: list[dict[str, Any]] = []
                started = time.perf_counter()
                done = 0
                while done < args.docs:
                    n = min(args.batch, args.docs - done)
                    await store.check(k, "put", batch(done, n), max_candidates=256)
                    done += n
                    if done % args.every == 0 or done == args.docs:
                        added = used_memory(cluster.urls) - base
                        last = points[-1] if points else {"documents": 0, "added_bytes": 0}
                        step = (added - last["added_bytes"]) / (done - last["documents"])
                        points.append(
                            {
                                "documents": done,
                                "added_bytes": added,
                                "bytes_per_document": round(added / done, 1),
                                # what each document of this step cost: the slope, not the average
                                "bytes_per_document_since_last": round(step, 1),
                            }
                        )
                        print(json.dumps(points[-1]), flush=True)
                elapsed = time.perf_counter() - started
                prefix = f"{keys.NAMESPACE}:{name}:{gen}"
                return {
                    "docs": args.docs,
                    "bands": BANDS,
                    "sketch_bytes": SKETCH_BYTES,
                    "nodes": len(cluster.urls),
                    "module": True,
                    "writes_per_second": round(args.docs / elapsed),
                    "points": points,
                    "band_group_encodings": encodings(cluster.urls, f"{prefix}:b:*"),
                    "id_group_encodings": encodings(cluster.urls, f"{prefix}:i:*"),
                }
            finally:
                await store.close()
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=400_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--label", default="", help="a name for the layout measured, kept in the output")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    result["label"] = args.label
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
