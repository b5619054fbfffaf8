"""The server's work per passage search, and how it grows with the text's size, on both paths: with
neardup's module (``ND.POSTINGS``) and in Lua (a server without the module). Prints JSON; writes
bench/results/passage_search_cost.json.

    python bench/passage_search_cost.py                      # 20,000 stored documents, texts to 1 MB
    python bench/passage_search_cost.py --documents 5000     # quicker

Two embedded Valkey servers (one with the module, one without) each hold the same collection with
passages on (documents of real_mix.py's size mix). Texts of growing size are made of stored documents'
text (so most of their keys have postings) and searched through the domain (``Index.passages``); the
server's time comes from ``INFO commandstats`` (the scripts' ``usec`` and calls), medians of repeats.
A search's server work is split into calls of at most ``keys.PASSAGE_KEYS_PER_CALL`` keys: the figure
to read is the longest single call, which is what other clients of the server wait for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_service as bs  # noqa: E402
from machine import cpu_model, git_commit  # noqa: E402

from neardup.domain import CollectionParams, Document, Index  # noqa: E402
from neardup.storage import EmbeddedValkey, RedisStore, keys  # noqa: E402

SIZES_KB = (4, 16, 64, 256, 1000)


async def fill(store: RedisStore, docs: list[tuple[str, str]]) -> Index:
    index = Index(store)
    await index.create_collection(CollectionParams.create("p", passages=True))
    for at in range(0, len(docs), 250):
        await index.check("p", [Document(i, t) for i, t in docs[at : at + 250]])
    return index


async def search_cost(store: RedisStore, index: Index, text: str, repeats: int) -> dict[str, Any]:
    """Median over repeats of one search's server time (the two scripts' usec) and its calls."""
    totals, longest, calls, walls = [], [], [], []
    for _ in range(repeats):
        await store.client.config_resetstat()
        started = time.perf_counter()
        await index.passages("p", text)
        walls.append(time.perf_counter() - started)
        stats = await store.client.info("commandstats")
        scripts = stats.get("cmdstat_evalsha", {"usec": 0, "calls": 0})
        postings = await postings_call_max(store)
        totals.append(scripts["usec"] / 1e3)
        calls.append(scripts["calls"])
        longest.append(postings)
    return {
        "server_ms": round(statistics.median(totals), 2),
        "calls": int(statistics.median(calls)),
        "longest_call_ms": round(statistics.median(longest), 2),
        "wall_ms": round(statistics.median(walls) * 1e3, 1),
    }


async def postings_call_max(store: RedisStore) -> float:
    """The longest script call since the last reset (the slow log keeps every call here)."""
    entries = await store.client.slowlog_get(1000)
    times = [e["duration"] / 1e3 for e in entries if b"evalsha" in bytes(e["command"][:7]).lower()]
    await store.client.slowlog_reset()
    return max(times, default=0.0)


async def run(documents: int, repeats: int) -> dict[str, Any]:
    settings = bs.Settings(documents, 0, 250, 4, 1, 1, 1.0, 1.0, 1, 1)
    corpus, info = bs.build_documents(bs.HERE / "data" / "corpus.jsonl", settings)
    docs = list(zip(corpus.ids, corpus.texts, strict=True))
    text_all = "\n\n".join(corpus.texts)
    out: dict[str, Any] = {
        "machine": {"cpu": cpu_model(), "cores": bs.os.cpu_count(), "commit": git_commit()},
        "command": " ".join(["python bench/passage_search_cost.py", *sys.argv[1:]]),
        "corpus": info,
        "keys_per_call": keys.PASSAGE_KEYS_PER_CALL,
        "paths": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for path, module in (("module", True), ("lua", False)):
            server = EmbeddedValkey(Path(tmp) / path, module=module)
            server.start()
            try:
                store = RedisStore.from_url(server.url, timeout=60)
                await store.client.config_set("slowlog-log-slower-than", 0)
                await store.client.config_set("slowlog-max-len", 4096)
                index = await fill(store, docs)
                await store.client.slowlog_reset()
                rows = []
                for kb in SIZES_KB:
                    text = text_all[: kb * 1000]
                    row = {"text_kb": kb, "words": len(text.split())}
                    row |= await search_cost(store, index, text, repeats)
                    rows.append(row)
                    print(path, row, file=sys.stderr)
                out["paths"][path] = rows
                await store.close()
            finally:
                server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "passage_search_cost.json")
    args = parser.parse_args()
    result = asyncio.run(run(args.documents, args.repeats))
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
