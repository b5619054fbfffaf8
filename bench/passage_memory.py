"""Where a collection's memory goes, by key family: bytes per document and per KB of text, with passages
on and off, for documents of the size given.

Passages of the corpus (``bench_service.py``'s, cut to ``--chunk-bytes``) go through ``Index.check`` into a
fresh embedded Valkey, once into a collection with passages on and once into one without; then every key of
each collection is sized with ``MEMORY USAGE <key> SAMPLES 0`` (the value, its key and the keyspace entry)
and summed per family: band groups (``b:``), id groups (``i:``), signature groups (``s:``), records
(``d:``), the passage index (``f:``) and the passage blobs (``p:``). The blobs' and the index's encodings are
counted too (a group over the server's listpack limits becomes a hashtable). Printed as JSON, with the
growth of the server's ``used_memory`` while each collection was filled beside it (bench_passages.py
measures memory that way): that also counts memory outside the collection's keys, such as the
keyspace's own table.

    python bench/passage_memory.py                       # 10,000 documents of ~2,600 bytes
    python bench/passage_memory.py --chunk-bytes 4000     # ~4 KB documents
    python bench/passage_memory.py --valkey-config hash-max-listpack-value=2048   # blobs kept in listpacks
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_service  # noqa: E402
import redis  # noqa: E402

from neardup.domain import CollectionParams, Document, Index, fingerprints  # noqa: E402
from neardup.storage import EmbeddedValkey, RedisStore  # noqa: E402
from neardup.storage.keys import REGISTRY, CollectionKeys  # noqa: E402

FAMILIES = {"b": "band groups", "i": "id groups", "s": "signature groups", "d": "records"}
FAMILIES |= {"f": "passage index", "p": "passage blobs"}


def sizes(client: redis.Redis, base: str) -> tuple[Counter[str], Counter[str]]:
    """Bytes and keys per family of the data keys starting with ``base`` (a generation's, ending in
    ":"), and the encodings seen (family:encoding)."""
    total: Counter[str] = Counter()
    encodings: Counter[str] = Counter()
    for key in client.scan_iter(match=f"{base}*", count=1000):
        family = key.decode()[len(base) :].split(":", 1)[0]
        name = FAMILIES.get(family, family)
        total[name] += int(client.memory_usage(key, samples=0) or 0)
        encodings[f"{name}: {client.object('encoding', key).decode()}"] += 1
    return total, encodings


async def fill(url: str, docs: list[Document], batch: int) -> tuple[dict[str, str], dict[str, int]]:
    """Both collections filled; the prefix of their data keys by name ("off", "on"), and the growth
    of the server's ``used_memory`` while each was filled (see the module docstring)."""
    store = RedisStore.from_url(url, timeout=60.0)
    bases, grown = {}, {}
    try:
        index = Index(store)
        for name in ("off", "on"):
            before = (await store.client.info("memory"))["used_memory"]
            await index.create_collection(CollectionParams.create(name, threshold=0.8, passages=name == "on"))
            for start in range(0, len(docs), batch):
                await index.check(name, docs[start : start + batch])
            entry = await store.client.hget(REGISTRY, name)
            assert entry is not None, f"no collection {name}"
            bases[name] = CollectionKeys(name, json.loads(entry)["gen"]).data_pattern.removesuffix("*")
            grown[name] = (await store.client.info("memory"))["used_memory"] - before
    finally:
        await store.close()
    return bases, grown


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--chunk-bytes", type=int, default=2_600, help="target size of a document")
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument(
        "--valkey-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting of the embedded Valkey for an experiment (repeatable)",
    )
    args = parser.parse_args()
    settings = bench_service.Settings(
        **{**bench_service.FULL.__dict__, "documents": args.docs, "chunk_bytes": args.chunk_bytes}
    )
    corpus, info = bench_service.build_documents(HERE / "data" / "corpus.jsonl", settings)
    docs = [Document(i, t) for i, t in zip(corpus.ids, corpus.texts, strict=True)]
    kb = corpus.total_bytes / 1000 / len(docs)
    report: dict[str, Any] = {"benchmark": "passage_memory", "corpus": info, "mean_kb": round(kb, 3)}
    # bytes of a key in the blob as stored (runs without it kept 3: report.py tells them apart)
    report["stored_key_bytes"] = fingerprints.KEY_BYTES
    # what the blobs hold before the server's encoding: a nibble a word; a key, a word step, a start step
    # and a length per selected k-gram; and their bytes as sent (and stored)
    blobs = [fingerprints.blob(d.text) for d in docs]
    heads = [fingerprints.header(b)[:2] for b in blobs if b]
    report["blobs"] = {
        "words_per_doc": round(sum(w for w, _ in heads) / len(docs), 1),
        "selected_per_doc": round(sum(m for _, m in heads) / len(docs), 1),
        "bytes_per_doc": round(sum(map(len, blobs)) / len(docs), 1),
    }
    with tempfile.TemporaryDirectory(prefix="neardup-bench-memory-") as tmp:
        extra = dict(item.split("=", 1) for item in args.valkey_config)
        report["valkey_config"] = extra
        server = EmbeddedValkey(Path(tmp) / "data", fsync="everysec", extra_config=extra)
        server.start(timeout=120)
        try:
            bases, grown = asyncio.run(fill(server.url, docs, args.batch))
            client = redis.Redis.from_url(server.url)
            for name, base in bases.items():
                total, encodings = sizes(client, base)
                report[name] = {
                    "bytes_per_doc": {family: round(b / len(docs), 1) for family, b in sorted(total.items())},
                    "total_per_doc": round(sum(total.values()) / len(docs), 1),
                    "used_memory_growth_per_doc": round(grown[name] / len(docs), 1),
                    "encodings": dict(sorted(encodings.items())),
                }
            client.close()
        finally:
            server.stop()
    extra = report["on"]["total_per_doc"] - report["off"]["total_per_doc"]
    report["extra_bytes_per_doc"] = round(extra, 1)
    report["extra_bytes_per_kb"] = round(extra / kb, 1)
    report["ratio_on_off"] = round(report["on"]["total_per_doc"] / report["off"]["total_per_doc"], 3)
    growth = report["on"]["used_memory_growth_per_doc"] - report["off"]["used_memory_growth_per_doc"]
    report["extra_used_memory_per_kb"] = round(growth / kb, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
