"""Documents to load or deduplicate, read lazily from JSONL (a file or stdin), CSV, a folder of plain
text files, or a WARC archive (its HTML pages, neardup.commands.warc), with the position after each one so
that a run can resume where an earlier one stopped."""

from __future__ import annotations

import contextlib
import csv
import io
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import orjson

from neardup.commands.common import CliError, ExitCode

Format = Literal["auto", "jsonl", "csv", "text", "warc"]
#: Bytes of a file that make it binary, not text, in a folder of plain files.
_BINARY_SNIFF = 8192


@dataclass(frozen=True)
class Record:
    """One input document. ``error`` is set (and id/text may be None) when the input could not give a
    document: the caller counts it and goes on. ``offset``: byte offset just after it in a JSONL or WARC
    file (None elsewhere). ``number``: 1-based position among the records (lines of a JSONL file)."""

    number: int
    id: str | None
    text: str | None
    metadata: dict[str, Any] | None = None
    raw: bytes | None = None
    offset: int | None = None
    size: int = 0
    error: str | None = None


class InputBroken(CliError):
    """The input cannot be read past a point (a truncated or corrupt file); the records before it were
    given out, and the message names the last one."""


@dataclass(frozen=True)
class Fields:
    id: str = "id"
    text: str = "text"
    metadata: Sequence[str] = ()


class Source:
    """Where documents come from. ``total_bytes`` (None for stdin) drives the progress bar's ETA."""

    def __init__(self, location: str, fmt: Format, fields: Fields) -> None:
        self.location = location
        self.fields = fields
        self.stdin = location == "-"
        self.path = None if self.stdin else Path(location)
        if self.path is not None and not self.path.exists():
            raise CliError(f"{location}: no such file or folder", ExitCode.USAGE)
        self.format: Format = fmt if fmt != "auto" else self._guess()
        if self.format == "text" and (self.path is None or not self.path.is_dir()):
            raise CliError("--format text reads a folder of plain text files: give a folder", ExitCode.USAGE)
        if self.path is not None and self.path.is_dir() and self.format != "text":
            raise CliError(f"{location} is a folder: its files are read as plain text (--format text)")
        self._files: list[Path] | None = None

    def _guess(self) -> Format:
        if self.path is None:
            return "jsonl"
        if self.path.is_dir():
            return "text"
        if self.path.suffix.lower() in (".csv", ".tsv"):
            return "csv"
        if self.path.name.lower().endswith((".warc", ".warc.gz")):
            return "warc"
        return "jsonl"

    @property
    def label(self) -> str:
        return "stdin" if self.stdin else str(self.path)

    @property
    def seekable(self) -> bool:
        """A JSONL file can be resumed at a byte offset; everything else by skipping records."""
        return self.format == "jsonl" and not self.stdin

    def files(self) -> list[Path]:
        assert self.path is not None
        if self._files is None:
            self._files = sorted(
                p
                for p in self.path.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(self.path).parts)
            )
        return self._files

    @property
    def total_bytes(self) -> int | None:
        if self.path is None:
            return None
        if self.format == "text":
            return sum(p.stat().st_size for p in self.files())
        return self.path.stat().st_size

    def records(self, *, offset: int = 0, skip: int = 0) -> Iterator[Record]:
        """Records from byte ``offset`` (JSONL files) or after the first ``skip`` records (the rest);
        numbering continues from ``skip``."""
        if self.format == "jsonl":
            yield from self._jsonl(offset, skip)
        elif self.format == "csv":
            yield from self._csv(skip)
        elif self.format == "warc":
            yield from self._warc(skip)
        else:
            yield from self._folder(skip)

    # --- formats ------------------------------------------------------------------------------------

    def _open(self) -> BinaryIO:
        if self.path is None:
            return sys.stdin.buffer
        try:
            return open(self.path, "rb")
        except OSError as exc:
            raise CliError(f"{self.label}: {exc.strerror}") from None

    def _jsonl(self, offset: int, skip: int) -> Iterator[Record]:
        stream = self._open()
        with stream if self.path is not None else contextlib.nullcontext(stream):
            number = 0
            if offset and self.seekable:
                stream.seek(offset)
                number = skip
            position = offset if self.seekable else 0
            for line in stream:
                position += len(line)
                if not line.strip():
                    continue
                number += 1
                if number <= skip and not (offset and self.seekable):
                    continue
                yield self._from_json(number, line, position)

    def _from_json(self, number: int, line: bytes, offset: int) -> Record:
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            return Record(
                number, None, None, raw=line, offset=offset, size=len(line), error=f"not JSON: {exc}"
            )
        if not isinstance(data, dict):
            return Record(
                number, None, None, raw=line, offset=offset, size=len(line), error="not a JSON object"
            )
        return self._from_fields(number, data, raw=line, offset=offset, size=len(line))

    def _from_fields(
        self, number: int, data: dict[str, Any], *, raw: bytes | None, offset: int | None, size: int
    ) -> Record:
        doc_id, text = data.get(self.fields.id), data.get(self.fields.text)
        error = None
        if doc_id is None or doc_id == "":
            error = f"no {self.fields.id!r} field"
        elif not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool):
            error = f"{self.fields.id!r} must be a string or an integer"
        elif not isinstance(text, str):
            error = (
                f"no {self.fields.text!r} field" if text is None else f"{self.fields.text!r} is not a string"
            )
        metadata: dict[str, Any] = {}
        nested = data.get("metadata")
        if isinstance(nested, dict) and "metadata" not in self.fields.metadata:
            metadata.update(nested)  # the API's own shape: {"id", "text", "metadata": {...}}
        metadata.update({name: data[name] for name in self.fields.metadata if name in data})
        return Record(
            number,
            None if doc_id is None else str(doc_id),
            text if isinstance(text, str) else None,
            metadata or None,
            raw=raw,
            offset=offset,
            size=size,
            error=error,
        )

    def _csv(self, skip: int) -> Iterator[Record]:
        csv.field_size_limit(2**31 - 1)
        stream = self._open()
        with stream if self.path is not None else contextlib.nullcontext(stream):
            text = io.TextIOWrapper(stream, encoding="utf-8-sig", errors="replace", newline="")
            dialect: type[csv.Dialect] = (
                csv.excel_tab if self.location.lower().endswith(".tsv") else csv.excel
            )
            reader = csv.DictReader(text, dialect=dialect)
            missing = [f for f in (self.fields.id, self.fields.text) if f not in (reader.fieldnames or ())]
            if missing:
                raise CliError(
                    f"{self.label}: no column {', '.join(map(repr, missing))} in the header "
                    f"({', '.join(reader.fieldnames or ())}); choose with --id-field/--text-field",
                    ExitCode.USAGE,
                )
            for number, row in enumerate(reader, start=1):
                if number <= skip:
                    continue
                size = sum(len(v) for v in row.values() if isinstance(v, str))
                yield self._from_fields(number, dict(row), raw=None, offset=None, size=size)
            text.detach()

    def _warc(self, skip: int) -> Iterator[Record]:
        """Its HTML pages: id and ``url`` metadata the target URI, text the page's main text."""
        from neardup.commands.warc import html_pages

        stream = self._open()
        with stream if self.path is not None else contextlib.nullcontext(stream):
            previous = 0
            for number, page in enumerate(html_pages(stream, self.label), start=1):
                size, previous = page.end - previous, page.end
                if number <= skip:
                    continue
                yield Record(
                    number,
                    page.uri,
                    page.text,
                    {"url": page.uri},
                    offset=page.end,
                    size=size,
                    error=page.error,
                )

    def _folder(self, skip: int) -> Iterator[Record]:
        assert self.path is not None
        for number, path in enumerate(self.files(), start=1):
            if number <= skip:
                continue
            doc_id = path.relative_to(self.path).as_posix()
            try:
                data = path.read_bytes()
            except OSError as exc:
                yield Record(number, doc_id, None, error=f"{exc.strerror}")
                continue
            if b"\0" in data[:_BINARY_SNIFF]:
                yield Record(number, doc_id, None, size=len(data), error="a binary file, not text")
                continue
            yield Record(number, doc_id, data.decode("utf-8", errors="replace"), size=len(data))


def describe(record: Record) -> str:
    where = f"record {record.number}"
    return f"{where} (id {record.id!r})" if record.id is not None else where
