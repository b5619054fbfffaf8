"""Pages of a WARC archive (``.warc`` or ``.warc.gz``, ISO 28500) as documents: each HTML ``response``
record with HTTP status 200 is one document, its id and ``url`` metadata the record's target URI, its text
the page's main text (neardup.integrations.html). Requests, metadata, revisits, other statuses and other
content types are skipped.

warcio reads the records. It takes a file that ends inside a record for a shorter record, or for no
record at all, so the end is checked here: a record with fewer bytes than its Content-Length, or bytes
after the last whole record, make :class:`InputBroken`, which names the last record read whole and is
raised after the pages before it have been given out.

Needs the ``warc`` extra: ``pip install "neardup[warc]"``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from neardup.commands.common import CliError, ExitCode
from neardup.commands.sources import InputBroken

#: The content types read as HTML pages (parameters such as ``; charset=`` aside).
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
WARC_EXTRA_HINT = 'reading WARC files needs the warc extra: pip install "neardup[warc]"'


@dataclass(frozen=True)
class Page:
    """One HTML page; ``end``: the byte offset just after its record in the file. ``error`` instead of
    ``text`` when the page gives no text."""

    uri: str
    text: str
    end: int
    error: str | None = None


def _reader_errors() -> tuple[type[Exception], ...]:
    """What reading a broken file raises; a clear error naming the extra when the modules are missing."""
    try:
        import html_text  # noqa: F401
        import w3lib  # noqa: F401
        from warcio.exceptions import ArchiveLoadFailed
        from warcio.statusandheaders import StatusAndHeadersParserException
    except ImportError as exc:
        raise CliError(f"{WARC_EXTRA_HINT} (no module {exc.name!r})", ExitCode.USAGE) from None
    return (ArchiveLoadFailed, StatusAndHeadersParserException, EOFError, OSError, ValueError, zlib.error)


def html_pages(stream: BinaryIO, label: str) -> Iterator[Page]:
    """The HTML pages of the WARC file ``stream`` (named ``label`` in errors), in file order."""
    broken = _reader_errors()
    from warcio.archiveiterator import ArchiveIterator

    from neardup.integrations.html import page_text

    records = ArchiveIterator(stream)
    iterator = iter(records)
    last = ""  # the last record read whole

    def stopped(why: str) -> InputBroken:
        return InputBroken(f"{label}: reading stopped {f'after {last}' if last else 'at the start'}: {why}")

    while True:
        try:
            record = next(iterator)
        except StopIteration:
            break
        except broken as exc:
            raise stopped(f"the next record is unreadable ({_reason(exc)})") from None
        uri = (record.rec_headers.get_header("WARC-Target-URI") or "").strip().strip("<>")
        content_type = _html_type(record)
        body, error = b"", None
        if content_type is not None:
            try:
                body = record.content_stream().read()
            except Exception as exc:  # a body that cannot be decoded (chunking, compression) is one page
                error = f"unreadable body: {_reason(exc)}"
        try:
            offset, length = records.get_record_offset(), records.get_record_length()  # reads to its end
        except broken as exc:
            raise stopped(f"the next record is cut short ({_reason(exc)})") from None
        here = f"the record at byte {offset:,}" + (f" ({uri})" if uri else "")
        missing = getattr(record.raw_stream, "limit", 0)
        if missing > 0:
            raise stopped(f"{here} is cut short ({missing:,} of its {record.length:,} bytes missing)")
        last = here
        if content_type is None or not uri:
            continue
        text = ""
        if error is None:
            try:
                text = page_text(body, content_type)
            except Exception as exc:  # markup the extractor cannot take is one rejected page, not a stop
                error = f"no text extracted: {_reason(exc)}"
        if error is None and not text:
            error = "no text in the page"
        yield Page(uri, text, offset + length, error)
    # warcio reads a truncated last record (or gzip member) as the end of the file: bytes left over after
    # the last whole record mean the file was cut.
    read, used = records.fh.tell(), records.offset
    if read > used:
        raise stopped(f"the {read - used:,} bytes after it are not a whole record (the file is cut short)")


def _html_type(record: Any) -> str | None:
    """The Content-Type of an HTML page worth reading (a 200 response), else None."""
    if record.rec_type != "response" or record.http_headers is None:
        return None
    if record.http_headers.get_statuscode() != "200":
        return None
    content_type: str = record.http_headers.get_header("Content-Type") or ""
    if content_type.partition(";")[0].strip().lower() not in HTML_TYPES:
        return None
    return content_type


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
