"""Checks of a request against the configured limits (text bytes, id length, metadata bytes, batch
length) and of names and ids that end up inside store keys. Each failure is a 422 naming the field and
the limit, so the client knows what to change.

Written as plain loops over the already-parsed body: the batch endpoint runs them for thousands of
documents per request, so they must cost a few hundred nanoseconds per document, not a model pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi.exceptions import RequestValidationError

from neardup.api.errors import invalid
from neardup.domain.models import MAX_ID_BYTES
from neardup.settings import Settings

#: UTF-8 needs at most this many bytes per code point: texts shorter than limit/4 need no encoding.
MAX_UTF8_BYTES_PER_CHAR = 4
#: What an id may not contain: control characters (C0, DEL, C1) and line or paragraph separators; ids
#: appear in logs, headers and responses. The same rule as a JSON Schema (ECMA 262) pattern, for the
#: OpenAPI document (neardup.api.contract).
_ID_FORBIDDEN_CHARS = "\\u0000-\\u001f\\u007f-\\u009f\\u2028\\u2029"
ID_PATTERN = f"^[^{_ID_FORBIDDEN_CHARS}]+$"
_ID_FORBIDDEN = re.compile(f"[{_ID_FORBIDDEN_CHARS}]")
#: Deepest metadata, in levels of objects and arrays (the metadata object itself is level 1). Not a
#: setting: orjson refuses to encode more than 254 levels (a 500 once), and no real metadata is deep.
MAX_METADATA_DEPTH = 32


@dataclass(frozen=True)
class Limits:
    """The limits of one running app, taken from its settings."""

    max_text_bytes: int
    max_batch_documents: int
    max_id_bytes: int
    max_metadata_bytes: int
    max_query_limit: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(
            max_text_bytes=settings.max_text_bytes,
            max_batch_documents=settings.max_batch_documents,
            # The store keeps ids next to signatures in compact hashes: it cannot take longer ones.
            max_id_bytes=min(settings.max_id_length, MAX_ID_BYTES),
            max_metadata_bytes=settings.max_metadata_bytes,
            max_query_limit=settings.max_query_limit,
        )

    def id_problem(self, doc_id: str) -> str | None:
        """Why ``doc_id`` cannot be used, or None: see ``ID_PATTERN``; bounded in UTF-8 bytes."""
        if not doc_id:
            return "id must not be empty"
        if _ID_FORBIDDEN.search(doc_id):
            return "id must not contain control characters, tabs, line breaks or line/paragraph separators"
        if len(doc_id) * MAX_UTF8_BYTES_PER_CHAR > self.max_id_bytes:
            size = len(doc_id.encode("utf-8", "surrogatepass"))
            if size > self.max_id_bytes:
                return f"id is {size} bytes of UTF-8; use at most {self.max_id_bytes}"
        return None

    def text_problem(self, text: str) -> str | None:
        if len(text) * MAX_UTF8_BYTES_PER_CHAR > self.max_text_bytes:
            size = (
                len(text) if len(text) > self.max_text_bytes else len(text.encode("utf-8", "surrogatepass"))
            )
            if size > self.max_text_bytes:
                return (
                    f"text is at least {size} bytes of UTF-8; send at most {self.max_text_bytes} "
                    "(split the document or raise NEARDUP_MAX_TEXT_BYTES)"
                )
        return None

    def metadata_problem(self, metadata: dict[str, Any] | None) -> str | None:
        if not metadata:
            return None
        if nested_deeper(metadata, MAX_METADATA_DEPTH):  # first: encoding it would fail
            return (
                f"metadata nests objects and arrays more than {MAX_METADATA_DEPTH} levels deep; "
                f"keep it to at most {MAX_METADATA_DEPTH}"
            )
        size = len(orjson.dumps(metadata))
        if size > self.max_metadata_bytes:
            return f"metadata is {size} bytes as JSON; keep it to at most {self.max_metadata_bytes}"
        return None

    def check_document(
        self, loc: Sequence[str | int], doc_id: str | None, text: str | None, metadata: dict[str, Any] | None
    ) -> None:
        """Raise a 422 for the first field of one document that breaks a limit."""
        if doc_id is not None and (problem := self.id_problem(doc_id)):
            raise invalid((*loc, "id"), problem)
        if text is not None and (problem := self.text_problem(text)):
            raise invalid((*loc, "text"), problem)
        if problem := self.metadata_problem(metadata):
            raise invalid((*loc, "metadata"), problem)

    def check_batch(self, documents: Sequence[Any]) -> None:
        """Every document of a batch (objects with ``id``, ``text``, ``metadata``); all problems at once,
        up to a few, so a client fixing a batch does not need one round trip per bad document."""
        if len(documents) > self.max_batch_documents:
            raise invalid(
                ("body", "documents"),
                f"batch has {len(documents)} documents; send at most {self.max_batch_documents} per request",
            )
        errors: list[dict[str, Any]] = []
        for position, doc in enumerate(documents):
            loc = ("body", "documents", position)
            for field, problem in (
                ("id", self.id_problem(doc.id)),
                ("text", self.text_problem(doc.text)),
                ("metadata", self.metadata_problem(doc.metadata)),
            ):
                if problem:
                    errors.append(
                        {"type": "value_error", "loc": (*loc, field), "msg": problem, "input": None}
                    )
            if len(errors) >= 10:
                break
        if errors:
            raise RequestValidationError(errors)

    def check_query_limit(self, limit: int) -> None:
        if limit > self.max_query_limit:
            raise invalid(("body", "limit"), f"limit is {limit}; ask for at most {self.max_query_limit}")


def nested_deeper(value: dict[str, Any] | list[Any], limit: int) -> bool:
    """Whether objects and arrays nest more than ``limit`` levels deep, ``value`` being level 1. A loop,
    not recursion: a parsed body may nest up to orjson's 1,024 levels, past Python's recursion limit."""
    pending: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while pending:
        node, level = pending.pop()
        if level > limit:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, dict | list):
                pending.append((child, level + 1))
    return False
