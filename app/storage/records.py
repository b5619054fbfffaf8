"""The stored record of a document, defined once: ``b"<inserted_ms>:<id byte length>:" + id + metadata``.

``inserted_ms`` is the insertion time in Unix milliseconds (decimal), by the store server's clock
(the scripts write it from ``TIME``: one clock for every service process, see docs/design.md), the id
is UTF-8 (its byte length in decimal first, so ids may contain ':'), and the metadata is its JSON
text, absent when the document has none. The domain packs and unpacks records with this module; the
cluster store reads ids and times with it; the Lua helpers ``record_ms``, ``record_id`` and
``restamp`` in ``scripts/_common.lua`` read and write the same bytes on the server. Changing the
layout means changing all three together and versioning the keyspace.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["inserted_ms", "pack", "record_id", "restamp", "unpack"]


def pack(inserted_ms: int, doc_id: bytes, metadata_json: bytes) -> bytes:
    """A record from its parts; ``metadata_json`` is b"" for a document without metadata."""
    return b"%d:%d:%s%s" % (inserted_ms, len(doc_id), doc_id, metadata_json)


def restamp(record: bytes, inserted_ms: int) -> bytes:
    """The same record with another insertion time (the server's, which the stores write)."""
    return b"%d%s" % (inserted_ms, record[record.index(b":") :])


def unpack(record: bytes) -> tuple[str, float, dict[str, Any] | None]:
    """(id, inserted_at in Unix seconds, metadata or None)."""
    ms, length, rest = record.split(b":", 2)
    size = int(length)
    meta_json = rest[size:]
    metadata: Any = orjson.loads(meta_json) if meta_json else None
    return rest[:size].decode("utf-8", "surrogatepass"), int(ms) / 1000.0, metadata


def record_id(record: bytes) -> bytes:
    """The id's bytes (b"" if the record is unreadable)."""
    try:
        _, length, rest = record.split(b":", 2)
        return rest[: int(length)]
    except ValueError:
        return b""


def inserted_ms(record: bytes) -> int:
    """The insertion time, Unix ms (0 if the record is unreadable)."""
    head = record.split(b":", 1)[0]
    return int(head) if head.isdigit() else 0
