"""The store's share of a check, without HTTP: what the Valkey server spends per checked document.

Passages of the corpus (the same ones, in the same order, as ``bench_service.py``) go through the
domain's ``Index.check`` in batches straight to a fresh embedded Valkey (``appendfsync always``), one
batch at a time. Printed as JSON:

- ``valkey_cpu_us_per_doc``: the server's CPU time per document (user + system, from /proc), over the
  whole run and for the first and last 10% of the batches (the cost grows with the collection: more
  near-copies share buckets);
- ``commands_per_doc``: the commands the check script ran per document (``INFO commandstats``), the
  unit the server's cost follows: each ``redis.call`` from Lua costs several thousand instructions of
  plumbing in Valkey 9 whatever the command does;
- with ``--callgrind``: the server runs under valgrind's callgrind and ``instructions`` is its total
  instruction count, deterministic enough to compare two versions of a script (a few documents only:
  it runs ~50x slower).

    python bench/bench_store.py                      # 50,000 passages, ~15 s
    python bench/bench_store.py --docs 1500 --callgrind
    python bench/bench_store.py --call-cost          # instructions of one redis.call from Lua
    python bench/bench_store.py --expected-documents 50000   # the collection's capacity hint
    python bench/bench_store.py --docs 1500 --callgrind --expected-documents 1500   # ... no splits
    python bench/bench_store.py --docs 1500 --callgrind --profile-out cg.out   # callgrind_annotate cg.out
    python bench/bench_store.py --valkey-config rdbcompression=yes   # compare ``aof_rewrite``
    python bench/bench_store.py --no-module          # the band step in Lua, as on an external server
    python bench/bench_store.py --docs 10000 --passages 0,1 --repeats 3   # passages off / on
    LD_PRELOAD=/path/to/libmimalloc.so python bench/bench_store.py   # the server with another malloc

After the run the server rewrites its append-only file once more, timed (``aof_rewrite``: seconds and
the size of the snapshot that starts the new file).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_service  # noqa: E402
import redis  # noqa: E402

from neardup.domain import CollectionParams, Document, Index  # noqa: E402
from neardup.storage import EmbeddedValkey, RedisStore  # noqa: E402
from neardup.storage.embedded import valkey_binary  # noqa: E402


async def run(
    server: EmbeddedValkey,
    docs: list[Document],
    batch: int,
    expected: int | None,
    passages: int = 0,
    name: str = "bench",
) -> dict[str, Any]:
    """``passages``: 0 off, 1 on (the collection indexes its documents for passage search)."""
    assert server.pid is not None
    store = RedisStore.from_url(server.url, timeout=600)
    index = Index(store)
    try:
        params = CollectionParams.create(
            name,
            threshold=bench_service.THRESHOLD,
            expected_documents=expected,
            passages=passages > 0,
        )
        memory0 = (await store.client.info("memory"))["used_memory"]
        await index.create_collection(params)
        await store.client.config_resetstat()
        per_batch: list[float] = []
        duplicates = 0
        started, cpu0 = time.perf_counter(), bench_service.process_cpu_seconds(server.pid)
        system0 = bench_service.process_times(server.pid)[1]
        for start in range(0, len(docs), batch):
            before = bench_service.process_cpu_seconds(server.pid)
            results = await index.check(name, docs[start : start + batch])
            per_batch.append((bench_service.process_cpu_seconds(server.pid) - before) / len(results))
            duplicates += sum(r.duplicate for r in results)
        wall, cpu = time.perf_counter() - started, bench_service.process_cpu_seconds(server.pid) - cpu0
        system = bench_service.process_times(server.pid)[1] - system0
        stats = await store.client.info("commandstats")
        memory = (await store.client.info("memory"))["used_memory"]
    finally:
        await store.close()
    n = len(docs)
    tenth = max(1, len(per_batch) // 10)
    commands = {
        command.removeprefix("cmdstat_"): round(value["calls"] / n, 2)
        for command, value in stats.items()
        if command.startswith(("cmdstat_h", "cmdstat_nd.")) and value["calls"] >= n / 100
    }
    # the server's own time per document in each module command and in the scripts as a whole (which
    # includes the commands they call)
    usec = {
        command.removeprefix("cmdstat_"): round(value["usec"] / n, 1)
        for command, value in stats.items()
        if command.startswith(("cmdstat_nd.", "cmdstat_evalsha"))
    }
    return {
        "documents": n,
        "batch": batch,
        "usec_per_doc": usec,
        "bands": params.bands,
        "expected_documents": expected,
        "duplicates": duplicates,
        "docs_per_s_one_client": round(n / wall),
        "valkey_cpu_us_per_doc": {
            "all": round(cpu / n * 1e6, 1),
            "first_tenth": round(sum(per_batch[:tenth]) / tenth * 1e6, 1),
            "last_tenth": round(sum(per_batch[-tenth:]) / tenth * 1e6, 1),
            "of_it_kernel": round(system / n * 1e6, 1),
        },
        "commands_per_doc": {"total": round(sum(commands.values()), 2), **commands},
        "used_memory_per_doc": round(memory / n),
        "collection_memory_per_doc": round((memory - memory0) / n),
        "passages": passages,
    }


CALL_LOOP = """
local n = tonumber(ARGV[1])
for i = 1, n do
  if ARGV[2] == 'call' then redis.call('HGET', 'no-such-key', 'f') end
end
return n"""


def call_cost(binary: Path, out: Path, data: Path, calls: int = 50_000) -> dict[str, Any]:
    """Instructions of one ``redis.call`` from Lua: a loop of HGETs of a missing key, minus the same
    loop without the call, each in its own server run under callgrind."""
    totals = {}
    for variant in ("empty", "call"):
        server = EmbeddedValkey(data / variant, binary=binary)
        server.start(timeout=120)
        try:
            client = redis.Redis.from_url(server.url, socket_timeout=600)
            client.eval(CALL_LOOP, 0, calls, variant)
            client.close()
        finally:
            server.stop()
        totals[variant] = instructions(out)
        out.unlink()
    return {
        "calls": calls,
        "instructions_per_redis_call": round((totals["call"] - totals["empty"]) / calls),
        "how": "HGET of a missing key from Lua, in a loop; the loop without the call subtracted",
    }


def timed_rewrite(server: EmbeddedValkey) -> dict[str, float]:
    """One more append-only-file rewrite, timed; the size of the snapshot that starts the new file."""
    client = redis.Redis.from_url(server.url, socket_timeout=600)
    try:
        seconds = bench_service.rewrite_aof(client)
    finally:
        client.close()
    base = [f for f in (server.data_dir / "appendonlydir").iterdir() if ".base." in f.name]
    return {"seconds": round(seconds, 3), "base_mb": round(sum(f.stat().st_size for f in base) / 1e6, 1)}


def instructions(out: Path) -> int:
    summary = subprocess.run(["callgrind_annotate", str(out)], capture_output=True, text=True).stdout
    totals = [line for line in summary.splitlines() if "PROGRAM TOTALS" in line]
    if not totals:
        raise SystemExit(f"no callgrind totals in {out}")
    return int(totals[0].split()[0].replace(",", ""))


def compare(
    server: EmbeddedValkey, docs: list[Document], args: argparse.Namespace, settings: list[int]
) -> dict[str, Any]:
    """Each passage setting in its own collection, the settings interleaved round by round (drift of a
    shared machine hits all alike), each collection dropped after its run; medians per setting, and
    each setting's ratios to the first."""
    runs: dict[int, list[dict[str, Any]]] = {s: [] for s in settings}
    for r in range(args.repeats):
        for setting in settings:
            name = f"bench-{setting}-{r}"
            found = asyncio.run(run(server, docs, args.batch, args.expected_documents, setting, name))
            runs[setting].append(found)
            drop(server.url, name)
            print(f"round {r} passages {setting}: {found['valkey_cpu_us_per_doc']}", file=sys.stderr)
    out: dict[str, Any] = {"documents": len(docs), "repeats": args.repeats, "settings": {}}
    for setting, measured in runs.items():
        out["settings"][str(setting)] = {
            "valkey_cpu_us_per_doc": statistics.median(x["valkey_cpu_us_per_doc"]["all"] for x in measured),
            "docs_per_s_one_client": statistics.median(x["docs_per_s_one_client"] for x in measured),
            "collection_memory_per_doc": statistics.median(x["collection_memory_per_doc"] for x in measured),
            "commands_per_doc": measured[-1]["commands_per_doc"],
            "usec_per_doc": {
                command: statistics.median(x["usec_per_doc"].get(command, 0.0) for x in measured)
                for command in measured[-1]["usec_per_doc"]
            },
            "runs_cpu_us_per_doc": [x["valkey_cpu_us_per_doc"]["all"] for x in measured],
        }
    first = out["settings"][str(settings[0])]
    for setting in settings[1:]:
        this = out["settings"][str(setting)]
        this["cpu_ratio_to_first"] = round(this["valkey_cpu_us_per_doc"] / first["valkey_cpu_us_per_doc"], 3)
        this["memory_ratio_to_first"] = round(
            this["collection_memory_per_doc"] / first["collection_memory_per_doc"], 3
        )
    return out


def drop(url: str, name: str) -> None:
    """The collection dropped (every key of it), then lazy freeing waited for."""

    async def delete() -> None:
        store = RedisStore.from_url(url, timeout=600)
        index = Index(store)
        try:
            await index.delete_collection(name)
        finally:
            await index.close()
            await store.close()

    asyncio.run(delete())
    client = redis.Redis.from_url(url)
    try:
        bench_service.wait_for_lazyfree(client)
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--callgrind", action="store_true", help="run the server under valgrind (slow)")
    parser.add_argument(
        "--expected-documents",
        type=int,
        default=None,
        metavar="N",
        help="create the collection with this capacity hint (expected_documents)",
    )
    parser.add_argument(
        "--valkey-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra server setting for the embedded Valkey (repeatable), e.g. auto-aof-rewrite-min-size=1gb",
    )
    parser.add_argument(
        "--profile-out",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --callgrind: keep the callgrind profile here (for callgrind_annotate)",
    )
    parser.add_argument(
        "--no-module",
        action="store_true",
        help="the server without neardup's module: the check script's band step in Lua (the path "
        "external Redis servers take)",
    )
    parser.add_argument(
        "--call-cost", action="store_true", help="only measure what one redis.call from Lua costs (callgrind)"
    )
    parser.add_argument(
        "--passages",
        default="0",
        metavar="LIST",
        help="comma-separated passage settings to compare in one server, interleaved: 0 off, 1 on "
        "(e.g. 0,1); each a collection of its own, dropped after its run",
    )
    parser.add_argument("--repeats", type=int, default=1, help="rounds of the --passages settings (medians)")
    parser.add_argument(
        "--chunk-bytes", type=int, default=None, help="passage size (default: bench_service's)"
    )
    args = parser.parse_args()
    chunk = {"chunk_bytes": args.chunk_bytes} if args.chunk_bytes else {}
    settings = bench_service.Settings(**{**bench_service.FULL.__dict__, "documents": args.docs, **chunk})
    corpus, _ = bench_service.build_documents(HERE / "data" / "corpus.jsonl", settings)
    docs = [Document(i, t) for i, t in zip(corpus.ids, corpus.texts, strict=True)]
    with tempfile.TemporaryDirectory(prefix="neardup-bench-store-") as tmp:
        binary, out = None, Path(tmp) / "callgrind.out"
        if args.callgrind or args.call_cost:
            if shutil.which("valgrind") is None:
                raise SystemExit("--callgrind needs valgrind (apt-get install valgrind)")
            binary = Path(tmp) / "valkey-under-callgrind"
            command = f"valgrind --tool=callgrind --callgrind-out-file={out} {valkey_binary()}"
            binary.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
            binary.chmod(0o755)
        if args.call_cost:
            assert binary is not None
            print(json.dumps(call_cost(binary, out, Path(tmp)), indent=1))
            return
        extra = dict(item.split("=", 1) for item in args.valkey_config)
        server = EmbeddedValkey(
            Path(tmp) / "data", binary=binary, extra_config=extra, module=not args.no_module
        )
        server.start(timeout=120)
        settings_list = [int(x) for x in args.passages.split(",")]
        if not set(settings_list) <= {0, 1}:
            parser.error("--passages takes 0 (off) and 1 (on)")
        try:
            if settings_list == [0] and args.repeats == 1:
                report = asyncio.run(run(server, docs, args.batch, args.expected_documents))
                report["aof_rewrite"] = timed_rewrite(server)
            else:
                report = compare(server, docs, args, settings_list)
            report["module"] = server.module is not None
        finally:
            server.stop()
        if args.callgrind:
            report["instructions"] = instructions(out)
            report["instructions_note"] = "the whole server run, start-up included"
            if args.profile_out is not None:
                shutil.copyfile(out, args.profile_out)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
