"""``neardup mirrors``: which sites copy which, offline, from a file of pages.

The same code as the service: the domain ``Index`` of a collection with a ``site_field`` over a
throwaway embedded Valkey (as ``neardup dedup``). Pages are checked in input order; every verified
match between pages of two sites is counted as the service counts it (docs/design.md, "Sites"); the
report lists the pairs of sites where either direction's share (pages with a near-duplicate on the
other site / pages) reaches ``--min-share``, ranked by share, as CSV or JSON; ``--graphml`` also
writes them as a graph of sites (``neardup.commands.graphml``).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from neardup.commands.common import CliError, ExitCode, Stopwatch, plural, progress_bar, progress_wanted
from neardup.commands.dedup import BATCH, SHOWN_ERRORS, open_output, spool_stdin
from neardup.commands.graphml import mirror_graph
from neardup.commands.sources import Fields, Source, describe

COLLECTION = "mirrors"
COLUMNS = ("site", "other", "pages", "other_pages", "shared", "other_shared", "share", "share_of_other")


async def count_sites(source: Source, args: argparse.Namespace, url: str) -> dict[str, Any]:
    from neardup.domain import CollectionParams, Document, Index
    from neardup.storage import RedisStore

    store = RedisStore.from_url(url, timeout=120.0)
    outcome: dict[str, Any] = {"documents": 0, "without_site": 0, "errors": 0, "error_samples": []}
    try:
        index = Index(store, threads=os.cpu_count() or 1)
        params = CollectionParams.create(
            COLLECTION,
            threshold=args.threshold,
            num_perm=args.num_perm,
            shingle=args.shingle,
            size=args.size,
            site_field=args.site_field,
        )
        await index.create_collection(params)
        with progress_bar(progress_wanted(args.progress)) as progress:
            task = progress.add_task("mirrors", total=source.total_bytes, docs=0)
            batch: list[Document] = []

            async def flush() -> None:
                if batch:
                    await index.check(COLLECTION, batch)
                    outcome["documents"] += len(batch)
                    progress.update(task, docs=outcome["documents"])
                    batch.clear()

            for record in source.records():
                if record.error is not None:
                    outcome["errors"] += 1
                    if len(outcome["error_samples"]) < SHOWN_ERRORS:
                        outcome["error_samples"].append(f"{describe(record)}: {record.error}")
                    continue
                value = (record.metadata or {}).get(args.site_field)
                if value is None:
                    outcome["without_site"] += 1
                # Record numbers as ids: input ids may repeat or break the id limits.
                batch.append(Document(str(record.number), record.text or "", {args.site_field: value}))
                if record.offset is not None:
                    progress.update(task, completed=record.offset)
                else:
                    progress.update(task, advance=record.size)
                if len(batch) >= BATCH:
                    await flush()
            await flush()
            progress.update(task, completed=source.total_bytes or 0, total=source.total_bytes or 1)
        pairs = await index.mirrors(
            COLLECTION, min_share=args.min_share, min_pages=args.min_pages, limit=args.limit
        )
        outcome["pairs"] = [{column: getattr(pair, column) for column in COLUMNS} for pair in pairs]
        await index.close()
    finally:
        await store.close()
    return outcome


def report(pairs: list[dict[str, Any]], fmt: str) -> bytes:
    if fmt == "json":
        return orjson.dumps({"pairs": pairs}, option=orjson.OPT_INDENT_2) + b"\n"
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for pair in pairs:
        writer.writerow({k: round(v, 4) if isinstance(v, float) else v for k, v in pair.items()})
    return text.getvalue().encode("utf-8")


def run(args: argparse.Namespace) -> int:
    from neardup.storage import EmbeddedValkey

    if not 0.0 <= args.min_share <= 1.0:
        raise CliError("--min-share must be from 0 to 1", ExitCode.USAGE)
    if args.min_pages < 1 or args.limit < 1:
        raise CliError("--min-pages and --limit must be at least 1", ExitCode.USAGE)
    if args.graphml == "-" and args.out == "-":
        raise CliError("--graphml - and --out - would both write to stdout: name a file", ExitCode.USAGE)
    fmt = args.report_format
    if fmt == "auto" and args.out.endswith(".graphml"):
        raise CliError(
            f"--out {args.out}: the report is CSV or JSON; write GraphML with --graphml FILE", ExitCode.USAGE
        )
    if fmt == "auto":
        fmt = "json" if args.out.endswith(".json") else "csv"
    fields = Fields(args.id_field, args.text_field, (*args.metadata_field, args.site_field))
    watch = Stopwatch()
    with tempfile.TemporaryDirectory(prefix="neardup-mirrors-") as tmp:
        location = str(spool_stdin(Path(tmp))) if args.input == "-" else args.input
        source = Source(location, args.format, fields)
        server = EmbeddedValkey(
            Path(tmp) / "valkey", extra_config={"appendonly": "no"}, owner="neardup mirrors"
        )
        try:
            url = server.start()
        except (OSError, RuntimeError) as exc:
            raise CliError(f"could not start the embedded Valkey: {exc}") from None
        try:
            outcome = asyncio.run(count_sites(source, args, url))
        finally:
            server.stop()
    with open_output(args.out) as out:
        out.write(report(outcome["pairs"], fmt))
    if args.graphml is not None:
        with open_output(args.graphml) as out:
            out.write(mirror_graph(outcome["pairs"]))
    seconds = watch.seconds
    summary = {
        "documents": outcome["documents"],
        "without_site": outcome["without_site"],
        "pairs": len(outcome["pairs"]),
        "errors": outcome["errors"],
        "seconds": round(seconds, 3),
        "error_samples": outcome["error_samples"],
    }
    stream = sys.stderr if "-" in (args.out, args.graphml) else sys.stdout
    if args.json:
        print(orjson.dumps(summary).decode(), file=stream)
    else:
        rate = outcome["documents"] / seconds if seconds > 0 else 0.0
        print(
            f"checked {plural(outcome['documents'], 'page')} in {seconds:.1f} s ({rate:,.0f} pages/s)",
            file=stream,
        )
        print(f"  mirror pairs  {len(outcome['pairs']):>10,}  -> {args.out}", file=stream)
        if args.graphml is not None:
            sites = len({p["site"] for p in outcome["pairs"]} | {p["other"] for p in outcome["pairs"]})
            print(f"  graph sites   {sites:>10,}  -> {args.graphml} (GraphML)", file=stream)
        print(f"  without site  {outcome['without_site']:>10,}  (no {args.site_field!r} field)", file=stream)
        print(f"  errors        {outcome['errors']:>10,}", file=stream)
        for sample in outcome["error_samples"]:
            print(f"    {sample}", file=stream)
    return ExitCode.PARTIAL if outcome["errors"] else ExitCode.OK
