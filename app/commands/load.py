"""``neardup load``: stream documents into a running service through the batch endpoint, with a progress
bar, retries with backoff, a checkpoint after every acknowledged batch (rerun to resume), and a summary.

Batches are sent one after the other: the checkpoint then always names a prefix of the input that the
service has acknowledged. Resending a batch that was stored but not acknowledged is harmless: checking
an id again replaces it, and a document never matches itself.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from neardup.client import AuthError, Client, InvalidRequest, NeardupError, NotFound, Unavailable
from neardup.commands.common import CliError, ExitCode, Stopwatch, plural, progress_bar, progress_wanted
from neardup.commands.sources import Fields, InputBroken, Record, Source, describe

#: Errors listed in the summary; the count covers them all.
SHOWN_ERRORS = 10
CHECKPOINT_VERSION = 1


@dataclass
class Checkpoint:
    """What the service has acknowledged: the first ``records`` records (up to byte ``offset`` of a JSONL
    file) and the counts so far."""

    source: str
    collection: str
    records: int = 0
    offset: int = 0
    inserted: int = 0
    duplicates: int = 0
    errors: int = 0
    version: int = CHECKPOINT_VERSION

    def save(self, path: Path) -> None:
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_bytes(orjson.dumps(asdict(self), option=orjson.OPT_INDENT_2))
        os.replace(temporary, path)  # atomic: a kill mid-write leaves the previous checkpoint

    @classmethod
    def read(cls, path: Path) -> Checkpoint | None:
        try:
            data = orjson.loads(path.read_bytes())
            return cls(**data) if data.get("version") == CHECKPOINT_VERSION else None
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as exc:
            raise CliError(f"unreadable checkpoint {path} ({exc}); remove it or pass --restart") from None


@dataclass
class Summary:
    source: str
    collection: str
    documents: int = 0  # acknowledged in this run
    inserted: int = 0
    duplicates: int = 0
    errors: int = 0
    resumed_at: int = 0  # records skipped because an earlier run had them acknowledged
    seconds: float = 0.0
    error_samples: list[str] = field(default_factory=list)

    def reject(self, record: Record, message: str) -> None:
        self.errors += 1
        if len(self.error_samples) < SHOWN_ERRORS:
            self.error_samples.append(f"{describe(record)}: {message}")


def checkpoint_path(args: argparse.Namespace, source: Source) -> Path | None:
    if args.checkpoint:
        return Path(args.checkpoint)
    if source.path is None:
        return None  # stdin: resumable only with an explicit --checkpoint
    base = source.path.resolve()
    return base.with_name(base.name + ".neardup-checkpoint")


def batches(
    records: Iterator[Record], size: int, max_bytes: int
) -> Iterator[tuple[list[Record], list[Record]]]:
    """(documents to send, every record read since the last batch, rejected ones included). When the input
    breaks off (a truncated file), the records read before it are given out before the error is raised."""
    docs: list[Record] = []
    seen: list[Record] = []
    text_bytes = 0
    try:
        for record in records:
            seen.append(record)
            if record.error is None:
                docs.append(record)
                text_bytes += len(record.text or "")
            if len(docs) >= size or text_bytes >= max_bytes:
                yield docs, seen
                docs, seen, text_bytes = [], [], 0
    except InputBroken:
        if seen:
            yield docs, seen
        raise
    if seen:
        yield docs, seen


def _payload(record: Record) -> dict[str, Any]:
    return {"id": record.id, "text": record.text, "metadata": record.metadata}


def send(client: Client, collection: str, docs: list[Record], summary: Summary) -> None:
    """One batch; if the service refuses it (a document breaks a limit), each document alone, so only
    the bad ones are rejected."""
    if not docs:
        return
    try:
        results = client.check_batch(collection, [_payload(r) for r in docs])
    except InvalidRequest:
        for record in docs:
            try:
                result = client.check(
                    collection, record.id or "", record.text or "", metadata=record.metadata
                )
            except InvalidRequest as exc:
                summary.reject(record, exc.message)
                continue
            summary.documents += 1
            summary.inserted += result.inserted
            summary.duplicates += result.duplicate
        return
    summary.documents += len(results)
    for result in results:
        summary.inserted += result.inserted
        summary.duplicates += result.duplicate


def ensure_collection(client: Client, args: argparse.Namespace) -> str:
    try:
        found = client.get_collection(args.collection)
        return f"{found.documents:,} documents before" if found.documents is not None else "exists"
    except NotFound:
        if not args.create:
            raise CliError(
                f"collection {args.collection!r} does not exist at {args.url}: add --create "
                "(with --threshold etc. to choose its parameters)",
                ExitCode.USAGE,
            ) from None
    created = client.create_collection(
        args.collection,
        threshold=args.threshold,
        num_perm=args.num_perm,
        shingle=args.shingle,
        size=args.size,
        expected_documents=args.expected_documents,
        passages=getattr(args, "passages", None),
    )
    return f"created: threshold {created.threshold}, {created.bands} bands x {created.rows} rows"


def run(args: argparse.Namespace) -> int:
    source = Source(
        args.input, args.format, Fields(args.id_field, args.text_field, tuple(args.metadata_field))
    )
    summary = Summary(source.label, args.collection)
    checkpoint_file = checkpoint_path(args, source)
    identity = str(source.path.resolve()) if source.path is not None else "-"
    checkpoint = Checkpoint(identity, args.collection)
    if checkpoint_file is not None and not args.restart:
        previous = Checkpoint.read(checkpoint_file)
        if previous is not None:
            if (previous.source, previous.collection) != (identity, args.collection):
                raise CliError(
                    f"checkpoint {checkpoint_file} belongs to loading {previous.source} into "
                    f"{previous.collection!r}; pass --restart to start over, or --checkpoint elsewhere",
                    ExitCode.USAGE,
                )
            checkpoint = previous
    summary.resumed_at = checkpoint.records
    if args.batch_size < 1:
        raise CliError("--batch-size must be at least 1", ExitCode.USAGE)

    watch = Stopwatch()
    broken: InputBroken | None = None
    with Client(
        args.url, api_key=args.api_key, timeout=args.timeout, retries=args.retries, backoff=args.backoff
    ) as client:
        try:
            note = ensure_collection(client, args)
            if not args.json:
                resume = f", resuming after record {checkpoint.records:,}" if checkpoint.records else ""
                print(f"loading {source.label} into {args.collection!r} ({note}){resume}", flush=True)
            try:
                _load(client, args, source, checkpoint, checkpoint_file, summary)
            except InputBroken as exc:
                broken = exc  # what was read before the break is stored: report it, then the error
        except AuthError as exc:
            raise CliError(f"{exc.message} (give the key with --api-key or NEARDUP_API_KEY)") from None
        except (Unavailable, NeardupError) as exc:
            if isinstance(exc, Unavailable) or exc.status == 0:
                where = (
                    f"; rerun the same command to resume after record {checkpoint.records:,}"
                    if checkpoint_file is not None and checkpoint.records
                    else ""
                )
                raise CliError(
                    f"service unavailable after retries: {exc.message}{where}", ExitCode.UNAVAILABLE
                ) from None
            raise CliError(exc.message) from None
        except KeyboardInterrupt:
            if checkpoint_file is not None:
                print(
                    f"\ninterrupted after record {checkpoint.records:,}: rerun the same command to resume "
                    f"(checkpoint {checkpoint_file})",
                    file=sys.stderr,
                )
            return ExitCode.INTERRUPTED
    summary.seconds = watch.seconds
    summary.inserted, summary.duplicates, summary.errors = (
        checkpoint.inserted,
        checkpoint.duplicates,
        checkpoint.errors,
    )
    if broken is not None:
        report(summary, args.json)
        raise InputBroken(f"{broken}; the {plural(checkpoint.records, 'record')} before it are loaded")
    if checkpoint_file is not None:
        with contextlib.suppress(FileNotFoundError):
            checkpoint_file.unlink()
    report(summary, args.json)
    return ExitCode.PARTIAL if summary.errors else ExitCode.OK


def _load(
    client: Client,
    args: argparse.Namespace,
    source: Source,
    checkpoint: Checkpoint,
    checkpoint_file: Path | None,
    summary: Summary,
) -> None:
    total = source.total_bytes
    with progress_bar(progress_wanted(args.progress)) as progress:
        start = checkpoint.offset if source.seekable else 0
        task = progress.add_task(f"load {args.collection}", total=total, completed=start, docs=0)
        records = source.records(offset=checkpoint.offset if source.seekable else 0, skip=checkpoint.records)
        consumed = start
        for docs, seen in batches(records, args.batch_size, args.max_batch_bytes):
            before = (summary.inserted, summary.duplicates, summary.errors)
            for record in seen:
                if record.error is not None:
                    summary.reject(record, record.error)
            send(client, args.collection, docs, summary)
            # Acknowledged: move the checkpoint past every record of this batch.
            last = seen[-1]
            checkpoint.records = last.number
            if last.offset is not None:
                checkpoint.offset = last.offset
            checkpoint.inserted += summary.inserted - before[0]
            checkpoint.duplicates += summary.duplicates - before[1]
            checkpoint.errors += summary.errors - before[2]
            if checkpoint_file is not None:
                checkpoint.save(checkpoint_file)
            consumed = last.offset if last.offset is not None else consumed + sum(r.size for r in seen)
            progress.update(task, completed=consumed, docs=summary.documents)
        if total is None:
            progress.update(task, total=consumed, completed=consumed)


def report(summary: Summary, as_json: bool) -> None:
    rate = summary.documents / summary.seconds if summary.seconds > 0 else 0.0
    if as_json:
        print(
            orjson.dumps(
                {
                    "source": summary.source,
                    "collection": summary.collection,
                    "documents": summary.documents,
                    "inserted": summary.inserted,
                    "duplicates": summary.duplicates,
                    "errors": summary.errors,
                    "resumed_at": summary.resumed_at,
                    "seconds": round(summary.seconds, 3),
                    "docs_per_second": round(rate, 1),
                    "error_samples": summary.error_samples,
                }
            ).decode()
        )
        return
    print(f"sent {plural(summary.documents, 'document')} in {summary.seconds:.1f} s ({rate:,.0f} docs/s)")
    print(f"  inserted    {summary.inserted:>12,}")
    print(f"  duplicates  {summary.duplicates:>12,}")
    print(f"  errors      {summary.errors:>12,}")
    for sample in summary.error_samples:
        print(f"    {sample}")
    if summary.errors > len(summary.error_samples):
        print(f"    ... and {summary.errors - len(summary.error_samples):,} more")
