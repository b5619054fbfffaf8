"""``neardup dedup``: deduplicate a file offline, without a running service.

It runs the service's own code: the native core for signatures and the domain ``Index`` over an embedded
Valkey started in a temporary directory (no persistence, stopped at the end). So the answers are exactly
what ``neardup load`` into a service with the same parameters would report (same banding, same
verification, same first-seen order), memory stays at the store's ~1 KB per document instead of Python
objects, and no second implementation of the LSH has to be kept in step with the first.

Documents are checked in input order, 1,000 per store call. Every verified match joins two documents in
a union-find; each group keeps its earliest document. Matching is transitive through the groups: if B
matches A and C matches B, C is in A's group even when C and A are below the threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from neardup.commands.common import CliError, ExitCode, Stopwatch, plural, progress_bar, progress_wanted
from neardup.commands.sources import Fields, InputBroken, Record, Source, describe

BATCH = 1000
COLLECTION = "dedup"
SHOWN_ERRORS = 10


class UnionFind:
    """Over record ordinals; the root of a group is always its smallest (earliest) member."""

    def __init__(self) -> None:
        self.parent: list[int] = []

    def add(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:  # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


@dataclass
class Outcome:
    documents: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # by ordinal
    numbers: list[int] = field(default_factory=list)  # record number of each ordinal
    best: dict[int, tuple[int, float]] = field(default_factory=dict)  # ordinal -> (best earlier match, sim)
    groups: UnionFind = field(default_factory=UnionFind)
    broken: InputBroken | None = None  # the input broke off here; the records before it are deduplicated


def chunks(records: Iterator[Record], outcome: Outcome) -> Iterator[list[tuple[int, Record]]]:
    batch: list[tuple[int, Record]] = []
    try:
        for record in records:
            if record.error is not None:
                outcome.errors += 1
                if len(outcome.error_samples) < SHOWN_ERRORS:
                    outcome.error_samples.append(f"{describe(record)}: {record.error}")
                continue
            ordinal = outcome.groups.add()
            outcome.ids.append(record.id or "")
            outcome.numbers.append(record.number)
            batch.append((ordinal, record))
            if len(batch) >= BATCH:
                yield batch
                batch = []
    except InputBroken as exc:
        outcome.broken = exc
    if batch:
        yield batch


async def check_all(source: Source, args: argparse.Namespace, outcome: Outcome, url: str) -> None:
    from neardup.domain import CollectionParams, Document, Index
    from neardup.storage import RedisStore

    store = RedisStore.from_url(url, timeout=120.0)
    try:
        index = Index(store, threads=os.cpu_count() or 1)
        params = CollectionParams.create(
            COLLECTION,
            threshold=args.threshold,
            num_perm=args.num_perm,
            shingle=args.shingle,
            size=args.size,
            bands=args.bands,
            rows=args.rows,
        )
        await index.create_collection(params)
        with progress_bar(progress_wanted(args.progress)) as progress:
            task = progress.add_task("dedup", total=source.total_bytes, docs=0)
            for batch in chunks(source.records(), outcome):
                # Ordinals as ids: input ids may repeat or break the id limits; the output uses the real ones.
                docs = [Document(str(ordinal), record.text or "") for ordinal, record in batch]
                results = await index.check(COLLECTION, docs)
                for result in results:
                    ordinal = int(result.id)
                    for match in result.matches:
                        outcome.groups.union(ordinal, int(match.id))
                    if result.matches:
                        best = result.matches[0]
                        outcome.best[ordinal] = (int(best.id), float(best.similarity))
                outcome.documents += len(batch)
                last = batch[-1][1]
                advance = last.offset if last.offset is not None else None
                if advance is not None:
                    progress.update(task, completed=advance, docs=outcome.documents)
                else:
                    progress.update(task, advance=sum(r.size for _, r in batch), docs=outcome.documents)
            progress.update(task, completed=source.total_bytes or 0, total=source.total_bytes or 1)
    finally:
        await store.close()


def kept_line(record: Record, fields: Fields) -> bytes:
    if record.raw is not None:
        return record.raw if record.raw.endswith(b"\n") else record.raw + b"\n"
    data: dict[str, Any] = {fields.id: record.id, fields.text: record.text}
    if record.metadata:
        data.update(record.metadata)
    return orjson.dumps(data) + b"\n"


def write_outputs(source: Source, args: argparse.Namespace, outcome: Outcome) -> tuple[int, int]:
    """Second pass over the input: the kept records as they were, in input order; then the groups."""
    groups = outcome.groups
    kept = 0
    ordinal = 0
    with open_output(args.out) as out, contextlib.suppress(InputBroken):  # it breaks where it broke before
        for record in source.records():
            if record.error is not None:
                continue
            if groups.find(ordinal) == ordinal:
                out.write(kept_line(record, source.fields))
                kept += 1
            ordinal += 1
    members: dict[int, list[int]] = {}
    for o in range(len(groups.parent)):
        root = groups.find(o)
        if root != o:
            members.setdefault(root, []).append(o)
    if args.duplicates:
        with open_output(args.duplicates) as dups:
            for root in sorted(members):
                entry = {
                    "kept": outcome.ids[root],
                    "size": 1 + len(members[root]),
                    "duplicates": [
                        {
                            "id": outcome.ids[o],
                            "record": outcome.numbers[o],
                            "matched": outcome.ids[outcome.best[o][0]] if o in outcome.best else None,
                            "similarity": round(outcome.best[o][1], 4) if o in outcome.best else None,
                        }
                        for o in members[root]
                    ],
                }
                dups.write(orjson.dumps(entry) + b"\n")
    return kept, len(members)


@contextlib.contextmanager
def open_output(path: str) -> Iterator[IO[bytes]]:
    if path == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.partial")
        with open(temporary, "wb") as stream:
            yield stream
        os.replace(temporary, target)  # a failed run never leaves a half-written output behind
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None


def spool_stdin(directory: Path) -> Path:
    """stdin is read twice (check, then write what is kept): keep a copy."""
    copy = directory / "stdin.jsonl"
    with open(copy, "wb") as out:
        shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
    return copy


def run(args: argparse.Namespace) -> int:
    from neardup.storage import EmbeddedValkey

    fields = Fields(args.id_field, args.text_field, tuple(args.metadata_field))
    if args.out != "-" and args.duplicates and Path(args.out).resolve() == Path(args.duplicates).resolve():
        raise CliError("--out and --duplicates must be different files", ExitCode.USAGE)
    watch = Stopwatch()
    outcome = Outcome()
    with tempfile.TemporaryDirectory(prefix="neardup-dedup-") as tmp:
        location = str(spool_stdin(Path(tmp))) if args.input == "-" else args.input
        source = Source(location, args.format, fields)
        # Started from this (main) thread so it dies with us; no persistence: the data is throwaway.
        server = EmbeddedValkey(
            Path(tmp) / "valkey", extra_config={"appendonly": "no"}, owner="neardup dedup"
        )
        try:
            url = server.start()
        except (OSError, RuntimeError) as exc:
            raise CliError(f"could not start the embedded Valkey: {exc}") from None
        try:
            asyncio.run(check_all(source, args, outcome, url))
        finally:
            server.stop()
        kept, groups = write_outputs(source, args, outcome)
    seconds = watch.seconds
    summary = {
        "documents": outcome.documents,
        "kept": kept,
        "duplicates": outcome.documents - kept,
        "groups": groups,
        "errors": outcome.errors,
        "seconds": round(seconds, 3),
        "error_samples": outcome.error_samples,
    }
    if args.json:
        print(orjson.dumps(summary).decode(), file=sys.stderr if args.out == "-" else sys.stdout)
    else:
        stream = sys.stderr if args.out == "-" else sys.stdout
        rate = outcome.documents / seconds if seconds > 0 else 0.0
        print(
            f"checked {plural(outcome.documents, 'document')} in {seconds:.1f} s ({rate:,.0f} docs/s)",
            file=stream,
        )
        print(f"  kept        {kept:>12,}  -> {args.out}", file=stream)
        dups = f"  -> {args.duplicates}" if args.duplicates else ""
        print(
            f"  duplicates  {outcome.documents - kept:>12,}  in {plural(groups, 'group')}{dups}", file=stream
        )
        print(f"  errors      {outcome.errors:>12,}", file=stream)
        for sample in outcome.error_samples:
            print(f"    {sample}", file=stream)
    if outcome.broken is not None:
        raise InputBroken(
            f"{outcome.broken}; the {plural(outcome.documents, 'document')} before it are deduplicated"
        )
    return ExitCode.PARTIAL if outcome.errors else ExitCode.OK
