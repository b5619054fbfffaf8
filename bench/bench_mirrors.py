"""Mirror detection: a synthetic crawl from the real corpus, checked online through the HTTP
API of a real ``neardup serve``, against the exact truth.

The crawl (seeded): ``--originals`` sites of 10 to 300 pages (log-uniform), each page a distinct corpus
document; about 60% of them also carry the same license text and 60% the same error page (one line
naming the site changed: near-duplicates on every such site, common pages that must not make mirrors);
``--full`` full mirrors (every page of an original copied with light edits, 1% of words changed, and the
mirror's own header and footer boilerplate) and ``--partial`` partial mirrors (30-70% of an original's
pages, the same way). Pages are checked in one shuffled order (a crawler interleaves sites), in batches
of ``--batch`` through ``POST /check/batch`` by ``--clients`` concurrent connections.

Truth: every pair of pages with exact Jaccard >= the collection threshold (0.8) over the reference word
5-gram sets (bench/truth.py, the features the service sketches); the true share(A, B) = pages of A with
a true near-duplicate on B / pages of A; a true mirror pair reaches share >= 0.5 in either direction.

Measured: the pairs of ``GET /mirrors?min_share=0.5`` against the true pairs (precision, recall); for
each true pair and each direction, |reported share - true share| from ``GET /sites/{site}`` (median,
p90, max); documents/s of the same stream into a collection with ``site_field`` and one without
(alternated, which one first alternating by round, ``--rounds`` each, fresh collections), and the CPU
of the service and of Valkey per document; the memory of the site keys (MEMORY USAGE) per page and per
site; and, in process on an embedded Valkey, the server's time per document in the check scripts with
and without site_field (``server_cost``), interleaved: each check links the pairs the service verified
for the one before in its own script (ND.LINK with neardup's module; on a server without it, in Lua).

    python bench/bench_mirrors.py                  # ~3-4 minutes on 2 cores
    python bench/bench_mirrors.py --originals 60 --full 10 --partial 10 --rounds 1   # quick

Prints one JSON object (save it as bench/results/mirrors.json for bench/report.py).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpus as corpus_module  # noqa: E402
import truth as truth_module  # noqa: E402
from bench_service import CpuMeter, HttpConnection, Service, run_async, wait_until_quiet  # noqa: E402
from machine import cpu_model, git_commit  # noqa: E402

from neardup.storage.keys import REGISTRY, SITE_OTHERS, SITE_PARTNERS, CollectionKeys  # noqa: E402

THRESHOLD = 0.8
HOST = "127.0.0.1"
MIN_SHARE = 0.5
#: Words of a mirror's own header and of its footer (its name first): navigation and a notice.
BOILERPLATE = 6


def light_edit(text: str, rng: random.Random, rate: float = 0.01) -> str:
    words = text.split()
    for _ in range(max(1, int(len(words) * rate))):
        words[rng.randrange(len(words))] = f"e{rng.randrange(10**6)}"
    return " ".join(words)


def boilerplate(rng: random.Random, site: str, words: int) -> str:
    vocab = ["home", "about", "contact", "mirror", "archive", "news", "login", "search", "terms", "privacy"]
    return f"{site} " + " ".join(rng.choice(vocab) + str(rng.randrange(100)) for _ in range(words))


def build_crawl(
    docs: list[dict[str, str]], seed: int, originals: int, full: int, partial: int
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Pages ({"id", "text", "url", "site"}) in crawl order, and each site's kind."""
    rng = random.Random(seed)
    pool = [
        d["text"] for d in docs if 400 <= len(d["text"].encode()) <= 12_000 and len(d["text"].split()) >= 80
    ]
    rng.shuffle(pool)
    license_text = next(t for t in pool if 1500 <= len(t) <= 4000)
    error_text = next(t for t in pool if 400 <= len(t) <= 900 and t != license_text)
    pool = [t for t in pool if t not in (license_text, error_text)]
    kinds: dict[str, str] = {}
    site_pages: dict[str, list[tuple[str, str]]] = {}
    used = 0
    for s in range(originals):
        site = f"site{s}.example"
        size = int(math.exp(rng.uniform(math.log(10), math.log(300))))
        if used + size > len(pool):
            raise SystemExit(f"the corpus has {len(pool)} usable documents: ask for fewer --originals")
        pages = [(f"p{k}", pool[used + k]) for k in range(size)]
        used += size
        if rng.random() < 0.6:
            pages.append(("license", license_text.replace("\n", f"\n{site}\n", 1)))
        if rng.random() < 0.6:
            pages.append(("404", f"{site} " + error_text))
        kinds[site] = "original"
        site_pages[site] = pages
    names = sorted(site_pages)
    for m in range(full + partial):
        source = rng.choice(names)
        kind = "full" if m < full else "partial"
        site = f"{kind}{m}.example"
        pages = site_pages[source]
        if kind == "partial":
            pages = rng.sample(pages, max(1, round(len(pages) * rng.uniform(0.3, 0.7))))
        head, foot = boilerplate(rng, site, BOILERPLATE), boilerplate(rng, site, BOILERPLATE)
        kinds[site] = f"{kind} of {source}"
        site_pages[site] = [(path, f"{head}\n{light_edit(text, rng)}\n{foot}") for path, text in pages]
    crawl = [
        {"id": f"https://{site}/{path}", "text": text, "url": f"https://{site}/{path}", "site": site}
        for site, pages in site_pages.items()
        for path, text in pages
    ]
    rng.shuffle(crawl)
    return crawl, kinds


def true_counts(crawl: list[dict[str, Any]]) -> tuple[dict[str, int], dict[tuple[str, str], int], int]:
    """Pages per site, true shared(A, B) at the collection threshold, and the number of true pairs."""
    sets = truth_module.shingle_sets([p["text"] for p in crawl])
    pairs = truth_module.all_pairs(sets, THRESHOLD)
    pages: dict[str, int] = defaultdict(int)
    for p in crawl:
        pages[p["site"]] += 1
    partners: dict[int, set[str]] = defaultdict(set)
    for i, j in zip(pairs["i"].tolist(), pairs["j"].tolist(), strict=True):
        a, b = crawl[i]["site"], crawl[j]["site"]
        if a != b:
            partners[i].add(b)
            partners[j].add(a)
    shared: dict[tuple[str, str], int] = defaultdict(int)
    for i, others in partners.items():
        for other in others:
            shared[(crawl[i]["site"], other)] += 1
    return dict(pages), dict(shared), len(pairs["i"])


def mirror_pairs(pages: dict[str, int], shared: dict[tuple[str, str], int]) -> set[frozenset[str]]:
    out = set()
    for (a, b), n in shared.items():
        if n / pages[a] >= MIN_SHARE or shared.get((b, a), 0) / pages[b] >= MIN_SHARE:
            out.add(frozenset((a, b)))
    return out


async def ingest(
    port: int, collection: str, bodies: list[bytes], clients: int, *, settle: bool
) -> tuple[float, float]:
    """Seconds to check every batch; with ``settle``, until a site read has also linked the last
    checks' pairs (which the service links with its next check, or soon after: part of the work).
    Also the seconds of that last read alone."""
    queue = list(reversed(bodies))
    connections = [await HttpConnection.open(port) for _ in range(clients)]

    async def worker(conn: HttpConnection) -> None:
        while queue:
            body = queue.pop()
            status, reply = await conn.post(f"/v1/collections/{collection}/check/batch", body)
            if status != 200:
                raise RuntimeError(f"check/batch: {status} {reply[:300]!r}")

    started = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in connections))
    checked = time.perf_counter()
    if settle:  # on a connection of the load generator, as a crawler's next request would be
        status, reply = await connections[0].get(f"/v1/collections/{collection}/sites/settle.example")
        if status != 200:
            raise RuntimeError(f"sites: {status} {reply[:300]!r}")
    elapsed = time.perf_counter() - started
    for c in connections:
        await c.close()
    return elapsed, time.perf_counter() - checked


def site_keys_memory(service: Service, collection: str) -> dict[str, int]:
    """MEMORY USAGE of the collection's site keys (names, ids, pages, shared counts, edges)."""
    client = service.redis()
    entry = client.hget(REGISTRY, collection)
    assert entry is not None, f"no collection {collection}"
    names = CollectionKeys(collection, orjson.loads(entry)["gen"])
    total = keys = 0
    singles = [names.site_names, names.site_ids, names.site_pages]
    for pattern in (*singles, names.shared_prefix + "*", names.edge_prefix + "*"):
        for key in client.scan_iter(match=pattern, count=1000):
            total += int(client.memory_usage(key, samples=0) or 0)
            keys += 1
    client.close()
    return {"bytes": total, "keys": keys}


async def server_cost(crawl: list[dict[str, Any]], batch: int, reps: int) -> dict[str, Any]:
    """The store's share of the counting, in process on embedded Valkey servers (no HTTP): Valkey's own
    time in EVALSHA (INFO commandstats) per document for the checks of a collection without and with
    site_field, the settling of the last links included (each check links the pairs the service
    verified for the one before, in its own script; a site read settles the rest), on a server with
    neardup's module (the link step is ``ND.LINK``) and on one without it (every step in Lua, as on a
    managed Redis service). Also ``ND.LINK``'s own time per document (the link step inside those
    scripts)."""
    import tempfile

    import redis as redis_sync

    from neardup.domain import CollectionParams, Document, Index
    from neardup.storage import EmbeddedValkey, RedisStore

    out: dict[str, list[float]] = {
        "check_without": [], "check_with_site_field": [], "check_without_lua": [],
        "check_with_site_field_lua": [],
    }  # fmt: skip
    link: list[float] = []
    aof: dict[str, list[float]] = {label: [] for label in out}  # append-only file bytes per document
    with tempfile.TemporaryDirectory() as tmp:
        servers = {
            "module": EmbeddedValkey(Path(tmp) / "module", fsync="everysec"),
            "lua": EmbeddedValkey(Path(tmp) / "lua", fsync="everysec", module=False),
        }
        stores: dict[str, RedisStore] = {}
        syncs: dict[str, redis_sync.Redis] = {}
        try:
            for kind, server in servers.items():
                url = server.start()
                stores[kind] = RedisStore.from_url(url, timeout=600)
                syncs[kind] = redis_sync.Redis.from_url(url)
                # the file only grows: its size is the measure
                syncs[kind].config_set("auto-aof-rewrite-percentage", 0)

            def usec(kind: str, command: str) -> float:
                stats = syncs[kind].info("commandstats")
                return float(stats.get(f"cmdstat_{command}", {}).get("usec", 0))

            variants = (
                ("check_without", None, "module"),
                ("check_with_site_field", "url", "module"),
                ("check_without_lua", None, "lua"),
                ("check_with_site_field_lua", "url", "lua"),
            )
            for rep in range(reps):
                for label, site_field, kind in variants:
                    index = Index(stores[kind])
                    sync = syncs[kind]
                    name = f"cost{rep}{'site' if site_field else 'plain'}"
                    await index.create_collection(
                        CollectionParams.create(name, threshold=THRESHOLD, site_field=site_field)
                    )
                    sync.config_resetstat()
                    aof_before = sync.info("persistence")["aof_current_size"]
                    for start in range(0, len(crawl), batch):
                        docs = [
                            Document(p["id"], p["text"], {"url": p["url"]})
                            for p in crawl[start : start + batch]
                        ]
                        await index.check(name, docs)
                    if site_field:
                        await index.settle_links(name)
                    out[label].append(usec(kind, "evalsha") / len(crawl))
                    aof_after = sync.info("persistence")["aof_current_size"]
                    aof[label].append((aof_after - aof_before) / len(crawl))
                    if label == "check_with_site_field":
                        link.append(usec(kind, "nd.link") / len(crawl))
                    await index.close()
                    await index.delete_collection(name)
        finally:
            for store in stores.values():
                await store.close()
            for sync in syncs.values():
                sync.close()
            for server in servers.values():
                server.stop()
    median = {k: round(statistics.median(v), 1) for k, v in out.items()}
    return {
        "valkey_us_per_doc": median,
        "runs": {k: [round(x, 1) for x in v] for k, v in out.items()},
        "nd_link_us_per_doc": round(statistics.median(link), 1),
        "nd_link_runs": [round(x, 1) for x in link],
        "aof_bytes_per_doc": {k: round(statistics.median(v), 1) for k, v in aof.items()},
        "counting_us_per_doc": round(median["check_with_site_field"] - median["check_without"], 1),
        "counting_us_per_doc_lua": round(
            median["check_with_site_field_lua"] - median["check_without_lua"], 1
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=HERE / "data" / "corpus.jsonl")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--originals", type=int, default=150)
    parser.add_argument("--full", type=int, default=50)
    parser.add_argument("--partial", type=int, default=50)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--fsync",
        choices=["always", "everysec"],
        default="always",
        help="appendfsync of the service's embedded Valkey (the service's default: always)",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=30.0,
        help="before each ingest, wait at most this long for others to go idle",
    )
    args = parser.parse_args()

    started = time.perf_counter()
    docs = corpus_module.load(args.corpus)
    crawl, _ = build_crawl(docs, args.seed, args.originals, args.full, args.partial)
    del docs
    t0 = time.perf_counter()
    pages, shared, near_pairs = true_counts(crawl)
    truth_s = time.perf_counter() - t0
    true_pairs = mirror_pairs(pages, shared)
    print(
        f"crawl: {len(crawl)} pages, {len(pages)} sites, {len(true_pairs)} true mirror pairs "
        f"({truth_s:.0f}s of truth)",
        file=sys.stderr,
    )

    bodies = []
    for start in range(0, len(crawl), args.batch):
        chunk = crawl[start : start + args.batch]
        bodies.append(orjson.dumps({"documents": [
            {"id": p["id"], "text": p["text"], "metadata": {"url": p["url"]}} for p in chunk
        ]}))  # fmt: skip
    text_bytes = sum(len(p["text"].encode()) for p in crawl)

    runs: dict[str, list[dict[str, Any]]] = {"with_site_field": [], "without": []}
    result: dict[str, Any] = {}
    with Service(workers=1, fsync=args.fsync) as service:
        base = f"http://{HOST}:{service.port}"
        pids = service.process.pid if service.process else None
        for r in range(args.rounds):
            order: list[tuple[str, dict[str, str]]] = [
                ("without", {}), ("with_site_field", {"site_field": "url"}),
            ]  # fmt: skip
            if r % 2:  # alternate which runs first, so a drift of the machine's other load favours neither
                order.reverse()
            for label, extra in order:
                name = f"crawl{r}{'s' if extra else 'p'}"
                reply = httpx.post(
                    f"{base}/v1/collections", json={"name": name, "threshold": THRESHOLD, **extra}
                )
                reply.raise_for_status()
                quiet = wait_until_quiet(args.wait_quiet)
                meter = CpuMeter(pids)
                meter.start()
                timed = ingest(service.port, name, bodies, args.clients, settle=bool(extra))
                seconds, read = run_async(timed)
                used = meter.stop(len(crawl))
                runs[label].append({
                    "seconds": round(seconds, 2), "last_read_seconds": round(read, 3),
                    "docs_per_s": round(len(crawl) / seconds),
                    "cpu_us_per_doc": used["cpu_us_per_doc"], "busy_cores_before": quiet["busy_cores_before"],
                })  # fmt: skip
                print(f"round {r} {label}: {len(crawl) / seconds:.0f} docs/s", file=sys.stderr)
                if r == args.rounds - 1 and extra:
                    result = evaluate(base, name, pages, shared, true_pairs)
                    result["site_keys_memory"] = site_keys_memory(service, name)
                else:
                    httpx.delete(f"{base}/v1/collections/{name}", timeout=120).raise_for_status()

    cost = run_async(server_cost(crawl, args.batch, args.rounds))

    def median(label: str, key: str) -> float:
        return float(statistics.median(run[key] for run in runs[label]))

    # Each round ran both, one after the other: the ratio of a round is the least disturbed by the
    # machine's other work (a shared machine), and their median is the figure.
    paired = [
        w["docs_per_s"] / o["docs_per_s"]
        for w, o in zip(runs["with_site_field"], runs["without"], strict=True)
    ]
    ratio = statistics.median(paired)

    def cpu(label: str) -> float:
        return float(
            statistics.median(
                run["cpu_us_per_doc"]["service_python"] + run["cpu_us_per_doc"]["valkey"]
                for run in runs[label]
            )
        )

    memory = result.pop("site_keys_memory")
    out = {
        "benchmark": "bench/bench_mirrors.py",
        "git_commit": git_commit(),
        "cpu": cpu_model(),
        "args": vars(args) | {"corpus": str(args.corpus)},
        "crawl": {
            "pages": len(crawl),
            "sites": len(pages),
            "originals": args.originals,
            "full_mirrors": args.full,
            "partial_mirrors": args.partial,
            "text_mb": round(text_bytes / 1e6, 1),
            "near_duplicate_page_pairs": near_pairs,
            "true_mirror_pairs": len(true_pairs),
            "site_pairs_sharing_a_page": len({frozenset(p) for p in shared}),
        },
        "bounds": {"partners_per_page": SITE_PARTNERS, "other_sites_per_site": SITE_OTHERS},
        **result,
        "throughput": {
            "runs": runs,
            "docs_per_s_with_site_field": median("with_site_field", "docs_per_s"),
            "docs_per_s_without": median("without", "docs_per_s"),
            "ratio": round(ratio, 3),
            "ratio_per_round": [round(r, 3) for r in paired],
            "cpu_ratio": round(cpu("without") / cpu("with_site_field"), 3),
            "valkey_cpu_us_per_doc": {
                label: statistics.median(run["cpu_us_per_doc"]["valkey"] for run in runs[label])
                for label in runs
            },
            "service_cpu_us_per_doc": {
                label: statistics.median(run["cpu_us_per_doc"]["service_python"] for run in runs[label])
                for label in runs
            },
        },
        "server_cost": cost,
        "memory": {
            "site_keys_bytes": memory["bytes"],
            "site_keys": memory["keys"],
            "bytes_per_page": round(memory["bytes"] / len(crawl), 1),
            "bytes_per_site": round(memory["bytes"] / len(pages)),
        },
        "targets": {"precision": 0.95, "recall": 0.95, "median_share_error": 0.05, "throughput_ratio": 0.9},
        "seconds": round(time.perf_counter() - started, 1),
    }
    out["targets_met"] = {
        "precision": out["precision"] >= 0.95,
        "recall": out["recall"] >= 0.95,
        "median_share_error": out["share_error"]["median"] <= 0.05,
        "throughput_ratio": ratio >= 0.9,
    }
    print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())


def evaluate(
    base: str,
    name: str,
    pages: dict[str, int],
    shared: dict[tuple[str, str], int],
    true_pairs: set[frozenset[str]],
) -> dict[str, Any]:
    with httpx.Client(base_url=base, timeout=120) as client:
        started = time.perf_counter()
        reply = client.get(
            f"/v1/collections/{name}/mirrors", params={"min_share": MIN_SHARE, "limit": 10_000}
        )
        reply.raise_for_status()
        mirrors_ms = (time.perf_counter() - started) * 1000
        found = {frozenset((p["site"], p["other"])) for p in reply.json()["pairs"]}
        hits = found & true_pairs
        precision = len(hits) / len(found) if found else 1.0
        recall = len(hits) / len(true_pairs) if true_pairs else 1.0
        errors: list[float] = []
        site_ms: list[float] = []
        answers: dict[str, dict[str, Any]] = {}
        for pair in sorted(true_pairs, key=sorted):
            for site in sorted(pair):
                if site not in answers:
                    t = time.perf_counter()
                    got = client.get(f"/v1/collections/{name}/sites/{quote(site, safe='')}")
                    got.raise_for_status()
                    site_ms.append((time.perf_counter() - t) * 1000)
                    answers[site] = {m["site"]: m for m in got.json()["mirrors"]}
            a, b = sorted(pair)
            for x, y in ((a, b), (b, a)):
                true_share = shared.get((x, y), 0) / pages[x]
                reported = answers[x].get(y, {}).get("share", 0.0)
                errors.append(abs(reported - true_share))
        errors.sort()

    def q(p: float) -> float:
        return round(errors[min(len(errors) - 1, int(p * len(errors)))], 4) if errors else 0.0

    return {
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "pairs_reported": len(found),
        "pairs_true": len(true_pairs),
        "false_positives": sorted(sorted(p) for p in found - true_pairs)[:20],
        "false_negatives": sorted(sorted(p) for p in true_pairs - found)[:20],
        "share_error": {
            "median": q(0.5),
            "p90": q(0.9),
            "max": round(errors[-1], 4) if errors else 0.0,
            "directions": len(errors),
        },
        "latency_ms": {"mirrors": round(mirrors_ms, 1), "site_median": round(statistics.median(site_ms), 2)},
    }


if __name__ == "__main__":
    main()
