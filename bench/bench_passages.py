"""Passage search (docs/design.md, "Passages"): quality on a PAN-style plagiarism corpus built from the
real-text corpus, latency of a search of a ~1,500-word text, memory and check throughput with passages
on beside off; and, on one sub-corpus in the same run, what a user would otherwise run: a MOSS-style
pairwise winnowing comparison of the text with every stored document, and datasketch's LSH Ensemble
for document-level containment. Prints JSON; writes bench/results/passages.json.

    python bench/bench_passages.py            # 100,000 stored documents of 1-60 KB, 600 submitted texts
    python bench/bench_passages.py --quick    # 10,000 documents, 150 texts (a minute or two)
    python bench/bench_passages.py --chunk-bytes 4000   # documents cut into ~4 KB chunks instead

Everything goes through a real ``neardup serve`` (1 worker, the embedded Valkey) over HTTP, as in
bench_service.py; the stored documents have the size mix of real text, with near-duplicate groups among
them (real_mix.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_service as bs  # noqa: E402
import passage_baselines as pb  # noqa: E402
import plagiarism as pl  # noqa: E402
from machine import cpu_model, git_commit  # noqa: E402

from neardup.domain import fingerprints  # noqa: E402

COMPARE_DOCUMENTS = 5_000
CARRIER_CHARS = 2_000
COMPARE_TEXTS = 45


class StoredWords:
    """The stored texts' lower-cased words joined by spaces, computed when first asked."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.cache: dict[int, str] = {}

    def get(self, i: int, default: str = "") -> str:
        if i < 0 or i >= len(self.texts):
            return default
        if i not in self.cache:
            self.cache[i] = " ".join(pl.lower_words(self.texts[i]))
        return self.cache[i]


def create(port: int, name: str, passages: bool) -> None:
    import httpx

    body = {"name": name, "passages": passages}
    reply = httpx.post(f"http://{bs.HOST}:{port}/v1/collections", json=body, timeout=30)
    if reply.status_code not in (200, 201):
        raise RuntimeError(f"creating {name}: {reply.status_code} {reply.text[:300]}")


def load(service: bs.Service, name: str, corpus: bs.Corpus, passages: bool) -> dict[str, Any]:
    client = service.redis()
    try:
        bs.wait_for_lazyfree(client)
        before = bs.used_memory(client)["used_memory"]
        create(service.port, name, passages)
        sent = bs.run_async(
            bs.send_batches(
                service.port, f"/v1/collections/{name}/check/batch", bs.batch_bodies(corpus, 250), 4
            )
        )
        after = bs.used_memory(client)["used_memory"]
    finally:
        client.close()
    return {
        "documents_per_s": round(len(corpus) / sent["wall_s"], 1),
        "bytes_per_document": round((after - before) / len(corpus), 1),
        "bytes_per_kb_of_text": round((after - before) / (corpus.total_bytes / 1000), 1),
    }


def memory_and_throughput(service: bs.Service, corpus: bs.Corpus, repeats: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for r in range(repeats):
        for mode in ("off", "on"):  # alternated, so drift of the shared machine hits both
            name = f"mem-{mode}-{r}"
            runs[mode].append(load(service, name, corpus, mode == "on"))
            client = service.redis()
            try:
                bs.delete_collection(service.port, name, client)
            finally:
                client.close()
    out: dict[str, Any] = {
        "documents": len(corpus),
        "mean_document_bytes": round(corpus.total_bytes / len(corpus)),
    }
    for mode, found in runs.items():
        out[mode] = {k: statistics.median(run[k] for run in found) for k in found[0]}
    out["memory_ratio_on_off"] = round(out["on"]["bytes_per_document"] / out["off"]["bytes_per_document"], 3)
    out["extra_bytes_per_kb_of_text"] = round(
        out["on"]["bytes_per_kb_of_text"] - out["off"]["bytes_per_kb_of_text"], 1
    )
    out["throughput_ratio_on_off"] = round(out["on"]["documents_per_s"] / out["off"]["documents_per_s"], 3)
    out["repeats"] = repeats
    return out


async def search_all(port: int, name: str, texts: list[str]) -> tuple[list[dict[str, Any]], list[float]]:
    connection = await bs.HttpConnection.open(port)
    replies, latencies = [], []
    try:
        for text in texts[:5]:  # warm-up
            await connection.post(f"/v1/collections/{name}/passages", orjson.dumps({"text": text}))
        for text in texts:
            body = orjson.dumps({"text": text, "limit": 100})
            started = time.perf_counter()
            status, reply = await connection.post(f"/v1/collections/{name}/passages", body)
            latencies.append(time.perf_counter() - started)
            if status != 200:
                raise RuntimeError(f"passages answered {status}: {reply[:300]!r}")
            replies.append(orjson.loads(reply))
    finally:
        await connection.close()
    return replies, latencies


def detections(reply: dict[str, Any], index_of: dict[str, int]) -> list[pl.Detection]:
    """Every passage the answer attributes, to its source and to each stored copy listed under it."""
    return [
        pl.Detection(s["start"], s["end"], index_of[doc["id"]], doc["source_start"], doc["source_end"])
        for src in reply["sources"]
        for s in src["spans"]
        for doc in [{**s, "id": src["id"]}, *s.get("also_in", ())]
    ]


def found_sources(reply: dict[str, Any], index_of: dict[str, int]) -> set[int]:
    """The stored documents an answer names: its sources and the copies listed under their passages."""
    return {
        index_of[doc["id"]]
        for src in reply["sources"]
        for doc in [src, *(copy for s in src["spans"] for copy in s.get("also_in", ()))]
    }


def exact_containment(text: str, stored: str) -> float:
    a = np.unique(fingerprints.features(text).keys)
    b = np.unique(fingerprints.features(stored).keys)
    return float(np.isin(a, b).sum() / len(a)) if len(a) else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument(
        "--chunk-bytes", type=int, default=0, help="0: the size mix of real text (real_mix.py); else chunks"
    )
    parser.add_argument("--texts", type=int, default=600)
    parser.add_argument("--memory-documents", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "passages.json")
    parser.add_argument("--corpus", type=Path, default=bs.HERE / "data" / "corpus.jsonl")
    parser.add_argument("--held-out", type=int, default=4_000, help="chunks kept out for submitted texts")
    args = parser.parse_args()
    if args.quick:
        args.documents, args.texts, args.memory_documents, args.repeats = 10_000, 150, 3_000, 1
    held_out = args.held_out
    settings = bs.Settings(args.documents + held_out, args.chunk_bytes, 250, 4, 1, 1, 1.0, 1.0, 1, 1)
    corpus, corpus_info = bs.build_documents(args.corpus, settings, held_out=held_out)
    stored = bs.Corpus(
        corpus.ids[: args.documents], corpus.texts[: args.documents], corpus.utf8_bytes[: args.documents]
    )
    started = time.perf_counter()
    keys = pl.StoredKeys(stored.texts)
    # carrier text for the submitted texts: the held-out documents in paragraphs of ~2,000 characters,
    # those that share nothing with the stored documents (whole real documents often share a template:
    # a man page's sections, a licence header)
    carriers = [p for t in corpus.texts[args.documents :] for p in bs.passages(t, CARRIER_CHARS)]
    held = [t for t in carriers if keys.clean(t)]
    print(f"held-out text: {len(held)} clean chunks ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    texts = pl.make_texts(stored.texts, held, args.texts)
    index_of = {doc_id: i for i, doc_id in enumerate(stored.ids)}
    result: dict[str, Any] = {
        "machine": {"cpu": cpu_model(), "cores": bs.os.cpu_count(), "commit": git_commit()},
        "command": " ".join(["python bench/bench_passages.py", *sys.argv[1:]]),
        # bytes of a key in the blob as stored (runs without it kept 3: report.py tells them apart)
        "stored_key_bytes": fingerprints.KEY_BYTES,
        "corpus": corpus_info
        | {"stored_documents": len(stored), "stored_mean_bytes": round(stored.total_bytes / len(stored))},
    }
    service = bs.Service(workers=1)
    try:
        service.start()
        print("memory and throughput, passages off vs on", file=sys.stderr)
        result["memory_throughput"] = memory_and_throughput(
            service, stored.head(args.memory_documents), args.repeats
        )
        print(f"loading {len(stored)} documents with passages on", file=sys.stderr)
        result["full_load"] = load(service, "plag", stored, True)
        replies, latencies = bs.run_async(search_all(service.port, "plag", [t.text for t in texts]))
        compared = stored.head(min(COMPARE_DOCUMENTS, len(stored)))
        compare_texts = pl.make_texts(compared.texts, held, COMPARE_TEXTS, seed=16)
        load(service, "cmp", compared, True)
        started = time.perf_counter()
        compare_replies, _ = bs.run_async(search_all(service.port, "cmp", [t.text for t in compare_texts]))
        ours_s = time.perf_counter() - started
    finally:
        service.close()
    result["comparison"] = compare(compared.texts, compare_texts, compare_replies, index_of, ours_s)
    words = [len(pl.word_spans(t.text)) for t in texts]
    slowest = max(range(len(latencies)), key=latencies.__getitem__)
    latencies.sort()
    result["latency_ms"] = {
        "texts": len(texts),
        "mean_words": round(sum(words) / len(words)),
        "p50": round(bs.percentile(latencies, 50) * 1e3, 2),
        "p99": round(bs.percentile(latencies, 99) * 1e3, 2),
        "max": round(latencies[-1] * 1e3, 2),
        "slowest_text": {"words": words[slowest], "sources": len(replies[slowest]["sources"])},
    }
    result.update(score_all(texts, replies, stored.texts, index_of))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


def compare(
    stored: list[str],
    texts: list[pl.Submitted],
    replies: list[dict[str, Any]],
    index_of: dict[str, int],
    ours_s: float,
) -> dict[str, Any]:
    """neardup's passages beside the baselines on one sub-corpus, at document level (and ours at
    character level too)."""
    words = StoredWords(stored)

    def acceptable(case: pl.Case, source: int) -> bool:
        return pl.acceptable(case, source, words, (case.start, case.end))

    truth = [t.cases for t in texts]
    ours = [found_sources(r, index_of) for r in replies]
    out: dict[str, Any] = {
        "stored_documents": len(stored),
        "texts": len(texts),
        "neardup_passages": pb.document_scores(truth, ours, acceptable)
        | {"query_ms_mean": round(ours_s / len(texts) * 1e3, 2)}
        | {
            "plagdet_all_levels": pl.score(texts, [detections(r, index_of) for r in replies], words)[
                "plagdet"
            ]
        },
    }
    print("baselines: pairwise winnowing, LSH Ensemble", file=sys.stderr)
    found, info = pb.pairwise(stored, [t.text for t in texts])
    out["pairwise_winnowing"] = pb.document_scores(truth, found, acceptable) | info
    found, info = pb.lsh_ensemble(stored, [t.text for t in texts])
    out["datasketch_lsh_ensemble"] = pb.document_scores(truth, found, acceptable) | info
    return out


#: keys.POSTING_CAP: what a verbatim case's holders are compared with.
POSTING_CAP = 64


def holders(cases: list[pl.Case], stored: list[str]) -> list[int]:
    """Per case, the stored documents holding its passage's middle word 5-gram (as a passage search
    hashes it): how many documents hold the copied text."""
    middle = []
    for c in cases:
        grams = fingerprints.features(" ".join(c.words)).grams
        middle.append(int(grams[len(grams) // 2]) if len(grams) else -1)
    wanted = np.array(sorted({m for m in middle if m >= 0}), np.uint64)
    counts: dict[int, int] = {}
    for text in stored:
        for g in np.intersect1d(fingerprints.features(text).grams, wanted).tolist():
            counts[g] = counts.get(g, 0) + 1
    return [counts.get(m, 0) for m in middle]


def score_all(
    texts: list[pl.Submitted], replies: list[dict[str, Any]], stored: list[str], index_of: dict[str, int]
) -> dict[str, Any]:
    words = StoredWords(stored)
    found = [detections(r, index_of) for r in replies]
    quality_by_level: dict[str, Any] = {}
    for level in pl.LEVELS:
        chosen = [i for i, t in enumerate(texts) if t.level == level and t.cases]
        quality_by_level[level] = pl.score([texts[i] for i in chosen], [found[i] for i in chosen], words)
    clean = [i for i, t in enumerate(texts) if not t.cases]
    short = [(c, found[i]) for i, t in enumerate(texts) if t.level == "none" for c in t.cases]
    hits = [
        any(
            d.start < c.end and c.start < d.end and pl.acceptable(c, d.source, words, (d.start, d.end))
            for d in ds
        )
        for c, ds in short
    ]
    detected = sum(hits)
    held = holders([c for c, _ in short], stored)
    many = [hit for hit, n in zip(hits, held, strict=True) if n > POSTING_CAP]
    errors = []
    for t, reply in zip(texts, replies, strict=True):
        # containment is given for the listed sources (a copy grouped under a passage has none)
        reported = {index_of[s["id"]]: s["containment"] for s in reply["sources"]}
        for source in {c.source for c in t.cases} & set(reported):
            errors.append(abs(reported[source] - exact_containment(t.text, stored[source])))
    errors.sort()
    return {
        "quality": quality_by_level,
        "verbatim_cases_found": round(detected / len(short), 4) if short else None,
        "verbatim_cases": len(short),
        "verbatim_held_by_more_than_64": {
            "cases": len(many),
            "found": round(sum(many) / len(many), 4) if many else None,
            "most_holders": max(held, default=0),
            "how": "stored documents holding the copied passage's middle word 5-gram",
        },
        "clean_texts_without_span": round(sum(not found[i] for i in clean) / len(clean), 4)
        if clean
        else None,
        "clean_texts": len(clean),
        "containment_error": {
            "pairs": len(errors),
            "mean": round(float(np.mean(errors)), 4) if errors else None,
            "p95": round(bs.percentile(errors, 95), 4) if errors else None,
            "within_0.05": round(sum(e <= 0.05 for e in errors) / len(errors), 4) if errors else None,
        },
    }


if __name__ == "__main__":
    main()
