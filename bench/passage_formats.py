"""Passage formats side by side, without HTTP: the same documents checked into one collection per passage
format (and one without passages) of one embedded Valkey, then the same searches against each, one
format after the other for every text (so a busy moment of the machine hits every format alike).

Printed as JSON, per format: bytes per document by key family (``passage_memory.sizes``: ``MEMORY USAGE``
of every key) and extra bytes per KB of text over the collection without passages; documents checked
per second (one client, batches of 250, the whole ``Index.check``); and the latency of
``Index.passages`` for texts of ~1,500 words (the first 150 words of two stored documents between
held-out text), medians of the repeats' p50 and p99, and the server's own time per search (``INFO
commandstats``).

    python bench/passage_formats.py                          # 10,000 documents of ~2,600 bytes
    python bench/passage_formats.py --docs 100000 --texts 300 # the issue's scale
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_service  # noqa: E402
import passage_memory  # noqa: E402
import redis  # noqa: E402

from neardup.domain import CollectionParams, Document, Index  # noqa: E402
from neardup.storage import EmbeddedValkey, RedisStore  # noqa: E402


def texts_of(stored: list[str], held: list[str], n: int, words: int) -> list[str]:
    """Texts of about ``words`` words: held-out text with the first 150 words of two stored documents
    inside."""
    rng = random.Random(15)
    out = []
    for _ in range(n):
        parts = [" ".join(rng.choice(stored).split()[:150]) for _ in range(2)]
        filler: list[str] = []
        while len(filler) < words - 300:
            filler += rng.choice(held).split()
        cut = len(filler) // 3
        out.append(" ".join([" ".join(filler[:cut]), parts[0], " ".join(filler[cut : 2 * cut]), parts[1],
                             " ".join(filler[2 * cut : words - 300])]))  # fmt: skip
    return out


async def load(index: Index, name: str, docs: list[Document], batch: int) -> float:
    started = time.perf_counter()
    for start in range(0, len(docs), batch):
        await index.check(name, docs[start : start + batch])
    return len(docs) / (time.perf_counter() - started)


async def measure(
    url: str, docs: list[Document], texts: list[str], formats: list[int], args: Any
) -> dict[str, Any]:
    store = RedisStore.from_url(url, timeout=600)
    out: dict[str, Any] = {}
    try:
        index = Index(store)
        names = {f: f"f{f}" for f in [0, *formats]}
        for f, name in names.items():
            await index.create_collection(
                CollectionParams.create(name, threshold=0.8, passages=f > 0, passage_format=f or None)
            )
            out[name] = {
                "passage_format": f,
                "documents_per_s": round(await load(index, name, docs, args.batch), 1),
            }
            out[name]["base"] = (await index._collection(name)).keys.band_prefix.rsplit(":", 2)[0]
        p50s: dict[int, list[float]] = {f: [] for f in formats}
        p99s: dict[int, list[float]] = {f: [] for f in formats}
        server_us: dict[int, list[float]] = {f: [] for f in formats}
        for _ in range(args.repeats):
            times: dict[int, list[float]] = {f: [] for f in formats}
            usec: dict[int, float] = dict.fromkeys(formats, 0.0)
            for text in texts:
                for f in formats:
                    before = (await store.client.info("commandstats"))["cmdstat_evalsha"]["usec"]
                    started = time.perf_counter()
                    await index.passages(names[f], text)
                    times[f].append((time.perf_counter() - started) * 1000)
                    usec[f] += (await store.client.info("commandstats"))["cmdstat_evalsha"]["usec"] - before
            for f in formats:
                ordered = sorted(times[f])
                p50s[f].append(ordered[len(ordered) // 2])
                p99s[f].append(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))])
                server_us[f].append(usec[f] / len(texts))
        for f in formats:
            out[names[f]]["search_ms"] = {
                "p50": round(statistics.median(p50s[f]), 2),
                "p99": round(statistics.median(p99s[f]), 2),
                "server_ms": round(statistics.median(server_us[f]) / 1000, 2),
                "p50_runs": [round(x, 2) for x in p50s[f]],
                "p99_runs": [round(x, 2) for x in p99s[f]],
            }
    finally:
        await store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--chunk-bytes", type=int, default=2_600)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--formats", default="2,3", help="passage formats to compare, e.g. 1,2,3")
    parser.add_argument("--texts", type=int, default=100)
    parser.add_argument("--words", type=int, default=1_500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    formats = [int(f) for f in args.formats.split(",")]
    held_out = 200
    settings = bench_service.Settings(
        **{**bench_service.FULL.__dict__, "documents": args.docs + held_out, "chunk_bytes": args.chunk_bytes}
    )
    corpus, info = bench_service.build_documents(HERE / "data" / "corpus.jsonl", settings)
    docs = [Document(i, t) for i, t in zip(corpus.ids[: args.docs], corpus.texts[: args.docs], strict=True)]
    kb = sum(len(d.text.encode()) for d in docs) / 1000 / len(docs)
    texts = texts_of(corpus.texts[: args.docs], corpus.texts[args.docs :], args.texts, args.words)
    report: dict[str, Any] = {"benchmark": "passage_formats", "command": " ".join(sys.argv), "corpus": info}
    report |= {"documents": len(docs), "mean_kb": round(kb, 3), "texts": len(texts), "repeats": args.repeats}
    with tempfile.TemporaryDirectory(prefix="neardup-bench-formats-") as tmp:
        server = EmbeddedValkey(Path(tmp) / "data", fsync="everysec")
        server.start(timeout=120)
        try:
            collections = asyncio.run(measure(server.url, docs, texts, formats, args))
            client = redis.Redis.from_url(server.url)
            for entry in collections.values():
                total, encodings = passage_memory.sizes(client, entry.pop("base"))
                entry["bytes_per_doc"] = {k: round(b / len(docs), 1) for k, b in sorted(total.items())}
                entry["total_per_doc"] = round(sum(total.values()) / len(docs), 1)
                entry["encodings"] = dict(sorted(encodings.items()))
            client.close()
        finally:
            server.stop()
    off = collections["f0"]
    for entry in collections.values():
        if entry["passage_format"]:
            extra = entry["total_per_doc"] - off["total_per_doc"]
            entry["extra_bytes_per_kb"] = round(extra / kb, 1)
            entry["memory_ratio_on_off"] = round(entry["total_per_doc"] / off["total_per_doc"], 3)
            entry["throughput_ratio_on_off"] = round(entry["documents_per_s"] / off["documents_per_s"], 3)
    report["collections"] = collections
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
