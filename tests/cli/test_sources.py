"""What ``neardup load``, ``dedup`` and ``mirrors`` read from a record: its id, its text and its metadata,
the fields named with --metadata-field and, in a JSON record, its own ``metadata`` object (the shape the
API takes), so that a file written for the API loads with its metadata."""

from __future__ import annotations

from pathlib import Path

import orjson

from neardup.commands.sources import Fields, Source


def records(tmp_path: Path, lines: list[dict[str, object]], fields: Fields) -> list[tuple[object, ...]]:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return [(r.id, r.text, r.metadata, r.error) for r in Source(str(path), "jsonl", fields).records()]


def test_a_records_metadata_object_is_its_metadata(tmp_path: Path) -> None:
    lines: list[dict[str, object]] = [
        {"id": "a", "text": "t", "metadata": {"url": "https://a.example/1", "lang": "en"}},
        {"id": "b", "text": "t", "metadata": {"url": "https://a.example/2"}, "source": "crawl"},
        {"id": "c", "text": "t", "metadata": None},
        {"id": "d", "text": "t", "metadata": "not an object", "source": "x"},
    ]
    assert records(tmp_path, lines, Fields()) == [
        ("a", "t", {"url": "https://a.example/1", "lang": "en"}, None),
        ("b", "t", {"url": "https://a.example/2"}, None),
        ("c", "t", None, None),
        ("d", "t", None, None),
    ]
    # named top-level fields join it (and win over a nested field of the same name)
    named = records(tmp_path, lines, Fields(metadata=("source", "lang")))
    assert [m for _, _, m, _ in named] == [
        {"url": "https://a.example/1", "lang": "en"},
        {"url": "https://a.example/2", "source": "crawl"},
        None,
        {"source": "x"},
    ]
    # asking for the field "metadata" itself keeps it as one field, as named
    nested = records(tmp_path, lines[:1], Fields(metadata=("metadata",)))
    assert nested[0][2] == {"metadata": {"url": "https://a.example/1", "lang": "en"}}
