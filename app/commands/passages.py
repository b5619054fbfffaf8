"""``neardup passages FILE --collection C``: which stored texts contain passages of a file, where, and how
much, as a readable report (or the API's JSON with --json), from a running service; with --pan-xml and
--html, also as PAN text-alignment XML and an HTML page (``neardup.reports``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import orjson

from neardup.client import AuthError, Client, NeardupError, NotFound, Passages, Unavailable
from neardup.commands.common import CliError, ExitCode, plural
from neardup.commands.sources import Fields, Source
from neardup.reports import html_report, pan_xml

#: Characters of each end of a span shown in the report.
_SHOWN = 40


def _read(name: str) -> tuple[str, str]:
    """The text as stored, line ends included (no newline translation): the offsets of the answer, the
    XML and the HTML report index the file itself, as other tools read it."""
    if name == "-":
        return sys.stdin.buffer.read().decode("utf-8", errors="surrogateescape"), "stdin"
    try:
        return Path(name).read_bytes().decode("utf-8", errors="surrogateescape"), name
    except OSError as exc:
        raise CliError(f"cannot read {name}: {exc.strerror or exc}", ExitCode.USAGE) from None


def _source_texts(args: argparse.Namespace, found: Passages) -> dict[str, str]:
    """The texts of the reported sources found in --sources (read as ``neardup load`` reads it); the
    rest of the file is not kept."""
    if args.sources is None:
        return {}
    wanted = {source.id for source in found.sources}
    fields = Fields(id=args.id_field, text=args.text_field)
    texts: dict[str, str] = {}
    for record in Source(args.sources, args.sources_format, fields).records():
        if record.error is None and record.id in wanted and record.text is not None:
            texts[record.id] = record.text
            if len(texts) == len(wanted):
                break
    return texts


def _write_reports(args: argparse.Namespace, text: str, label: str, found: Passages) -> None:
    if args.pan_xml is not None:
        reference = "stdin" if args.input == "-" else Path(args.input).name
        try:
            path = pan_xml.write(Path(args.pan_xml), reference, found)
        except OSError as exc:
            raise CliError(f"cannot write {args.pan_xml}: {exc.strerror or exc}") from None
        sys.stderr.write(f"wrote {path}\n")
    if args.html is not None:
        texts = _source_texts(args, found)
        page = html_report.render(text, label, args.collection, found, texts, args.sources)
        try:
            Path(args.html).write_text(page, encoding="utf-8", errors="replace")
        except OSError as exc:
            raise CliError(f"cannot write {args.html}: {exc.strerror or exc}") from None
        shown = sum(1 for source in found.sources if source.id in texts)
        sys.stderr.write(
            f"wrote {args.html} (the texts of {shown} of {plural(len(found.sources), 'source')} shown)\n"
        )


def _excerpt(text: str, start: int, end: int) -> str:
    piece = " ".join(text[start:end].split())
    if len(piece) <= 2 * _SHOWN + 5:
        return piece
    return f"{piece[:_SHOWN]} ... {piece[-_SHOWN:]}"


#: Ids of the other stored documents holding a passage named in the report (all are counted).
_NAMED = 3


def report(text: str, label: str, collection: str, found: Passages) -> str:
    """The readable report of one search: the sentence's share is of the spans listed below it."""
    words = len(text.split())
    if not found.sources:
        return f"{label}: {plural(words, 'word')}; no passage found in collection {collection!r}\n"
    lines = [
        f"{label}: {plural(words, 'word')}; {found.coverage:.1%} of the text is in passages of "
        f"{plural(len(found.sources), 'stored document')} (collection {collection!r}; "
        f"found in {plural(found.documents, 'stored document')} in all)",
    ]
    if found.more_sources:
        lines.append(
            f"--limit left out {plural(found.more_sources, 'source')} of further passages: with them, "
            f"{found.coverage_all:.1%} of the text is in passages"
        )
    lines.append("")
    for rank, source in enumerate(found.sources, 1):
        meta = f"  {orjson.dumps(source.metadata).decode()}" if source.metadata else ""
        lines.append(f"{rank:>2}. {source.id}  containment {source.containment:.1%}{meta}")
        for span in source.spans:
            lines.append(
                f"      text {span.start:,}-{span.end:,}  <->  source {span.source_start:,}-"
                f"{span.source_end:,}  ({plural(len(text[span.start : span.end].split()), 'word')})"
            )
            lines.append(f'        "{_excerpt(text, span.start, span.end)}"')
            if span.also_in_count:
                named = ", ".join(c.id for c in span.also_in[:_NAMED])
                rest = span.also_in_count - min(len(span.also_in), _NAMED)
                lines.append(
                    f"        also in {plural(span.also_in_count, 'stored document')}: {named}"
                    + (f" and {rest} more" if rest else "")
                )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.sources is not None and args.html is None:
        raise CliError(
            "--sources gives the sources' texts to the HTML report: give --html FILE too", ExitCode.USAGE
        )
    if args.sources == "-" and args.input == "-":
        raise CliError("the text and --sources cannot both be stdin", ExitCode.USAGE)
    if args.sources is not None:
        Source(args.sources, args.sources_format, Fields())  # a missing file fails before the search
    text, label = _read(args.input)
    with Client(args.url, api_key=args.api_key, timeout=args.timeout) as client:
        try:
            found = client.passages(args.collection, text, limit=args.limit, min_words=args.min_words)
        except NotFound as exc:
            raise CliError(exc.message, ExitCode.USAGE) from None
        except AuthError as exc:
            raise CliError(f"{exc.message} (give the key with --api-key or NEARDUP_API_KEY)") from None
        except (Unavailable, NeardupError) as exc:
            if isinstance(exc, Unavailable) or exc.status == 0:
                raise CliError(f"{args.url}: {exc.message}", ExitCode.UNAVAILABLE) from None
            raise CliError(exc.message) from None
    if args.json:
        payload = dataclasses.asdict(found)
        sys.stdout.write(orjson.dumps(payload).decode() + "\n")
    else:
        sys.stdout.write(report(text, label, args.collection, found))
    _write_reports(args, text, label, found)
    return ExitCode.OK
