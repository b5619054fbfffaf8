"""How a stored document's id, insertion time and metadata are packed into one compact value:
``b"<inserted_ms>:<id byte length>:" + id + metadata JSON`` (no JSON at all when metadata is None)."""

from __future__ import annotations

from typing import Any

import orjson

from neardup.domain.errors import InvalidInput
from neardup.domain.models import Metadata


def encode_metadata(doc_id: str, metadata: Metadata | None) -> bytes:
    if metadata is None:
        return b""
    try:
        return orjson.dumps(metadata)
    except TypeError as error:
        raise InvalidInput(f"metadata of document {doc_id!r} is not JSON-serializable: {error}") from None


def pack(inserted_ms: int, doc_id: bytes, metadata_json: bytes) -> bytes:
    return b"%d:%d:%s%s" % (inserted_ms, len(doc_id), doc_id, metadata_json)


def unpack(record: bytes) -> tuple[str, float, Metadata | None]:
    """(id, inserted_at in Unix seconds, metadata)."""
    ms, length, rest = record.split(b":", 2)
    size = int(length)
    meta_json = rest[size:]
    metadata: Any = orjson.loads(meta_json) if meta_json else None
    return rest[:size].decode("utf-8", "surrogatepass"), int(ms) / 1000.0, metadata


def inserted_ms(record: bytes) -> int:
    """The insertion time of a packed record, Unix ms (0 if unreadable)."""
    head = record.split(b":", 1)[0]
    return int(head) if head.isdigit() else 0
