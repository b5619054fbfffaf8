"""WARC input of ``neardup load`` and ``neardup dedup``: archives written by the test with warcio itself
(HTML pages on two hosts with near-copies, a JSON response, a request, a 404, pages with no text, broken
markup and other charsets), read gzipped and plain; a truncated archive stops with an error naming the
last whole record, after the pages before it are stored."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from neardup.client import Client, NotFound
from neardup.integrations.html import page_text
from tests.cli.test_dedup import neardup_command, words

RNG = random.Random(31)
TEXT_A = " ".join(words(RNG, 80))
TEXT_B = " ".join(words(RNG, 80))
TEXT_C = " ".join(words(RNG, 80))
TEXT_D = " ".join(words(RNG, 80))
TEXT_E = " ".join(words(RNG, 80))


def html(text: str, title: str = "a page") -> bytes:
    return (
        f"<!DOCTYPE html><html><head><title>{title}</title><style>p {{ color: red }}</style>"
        f'<script>var tracker = "scriptjunk";</script></head><body><nav><a href="/">home</a></nav>'
        f"<p>{text}</p></body></html>"
    ).encode()


#: (target URI, HTTP status line, Content-Type, body); the pages neardup reads are listed in PAGES.
RESPONSES: list[tuple[str, str, str, bytes]] = [
    ("http://a.example/1", "200 OK", "text/html; charset=utf-8", html(TEXT_A)),
    ("http://a.example/2", "200 OK", "text/html", html(TEXT_B)),
    ("http://a.example/data.json", "200 OK", "application/json", json.dumps({"t": TEXT_C}).encode()),
    ("http://a.example/gone", "404 Not Found", "text/html", html(TEXT_C)),
    ("http://a.example/empty", "200 OK", "text/html", b""),
    ("http://a.example/broken", "200 OK", "text/html", f"<html><body><div><p>{TEXT_D} <b>open <i>".encode()),
    (
        "http://a.example/latin",
        "200 OK",
        "text/html; charset=iso-8859-1",
        html(f"café déjà {TEXT_C}").decode().encode("iso-8859-1"),
    ),
    (
        "http://a.example/cyrillic",
        "200 OK",
        "text/html",
        b'<html><head><meta charset="windows-1251"></head><body><p>'
        + "Привет мир, это страница".encode("cp1251")
        + b"</p></body></html>",
    ),
    # an unknown charset and bytes that are not UTF-8: read as UTF-8 with replacement characters
    ("http://a.example/bogus", "200 OK", "text/html; charset=x-bogus", b"<p>caf\xe9 \xff " + TEXT_E.encode()),
    # b.example mirrors a.example: its pages are near-copies of a.example's two pages (one word changed)
    ("https://b.example/copy-1", "200 OK", "application/xhtml+xml", html(TEXT_A + " changed")),
    ("https://b.example/copy-2", "200 OK", "text/html", html(TEXT_B + " changed")),
]
STORED = [
    "http://a.example/1",
    "http://a.example/2",
    "http://a.example/broken",
    "http://a.example/latin",
    "http://a.example/cyrillic",
    "http://a.example/bogus",
    "https://b.example/copy-1",
    "https://b.example/copy-2",
]


def write_warc(path: Path, responses: list[tuple[str, str, str, bytes]] = RESPONSES) -> Path:
    with open(path, "wb") as out:
        writer = WARCWriter(out, gzip=path.name.endswith(".gz"))
        writer.write_record(writer.create_warcinfo_record(path.name, {"software": "neardup tests"}))
        for uri, status, content_type, body in responses:
            host = uri.split("/")[2]
            request = StatusAndHeaders(
                f"GET /{uri.split('/', 3)[3]} HTTP/1.1", [("Host", host)], is_http_request=True
            )
            writer.write_record(
                writer.create_warc_record(uri, "request", io.BytesIO(b""), length=0, http_headers=request)
            )
            headers = StatusAndHeaders(
                status,
                [("Content-Type", content_type), ("Content-Length", str(len(body)))],
                protocol="HTTP/1.1",
            )
            writer.write_record(
                writer.create_warc_record(
                    uri, "response", io.BytesIO(body), length=len(body), http_headers=headers
                )
            )
    return path


def neardup(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    return subprocess.run(
        [*neardup_command(), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
        check=False,
    )


def test_load_a_gzipped_warc_into_a_site_collection(service: Any, tmp_path: Path) -> None:
    archive = write_warc(tmp_path / "crawl.warc.gz")
    with Client(service.url) as client:
        client.create_collection("warc", threshold=0.8, site_field="url")
        done = neardup("load", str(archive), "-c", "warc", "--url", service.url, "--json", "--progress")
        assert done.returncode == 3, done.stderr  # finished; the empty page is rejected
        summary = json.loads(done.stdout)
        assert (summary["documents"], summary["inserted"], summary["duplicates"], summary["errors"]) == (
            8,
            8,
            2,
            1,
        )
        assert summary["error_samples"] == ["record 3 (id 'http://a.example/empty'): no text in the page"]
        assert "load warc" in done.stderr  # the progress bar, forced on
        assert client.get_collection("warc").documents == len(STORED)
        for uri in STORED:
            assert client.get("warc", uri).metadata == {"url": uri}
        for skipped in ("http://a.example/data.json", "http://a.example/gone", "http://a.example/empty"):
            with pytest.raises(NotFound):
                client.get("warc", skipped)
        pairs = {(p.site, p.other, p.shared, p.other_shared) for p in client.mirrors("warc")}
        assert pairs in ({("a.example", "b.example", 2, 2)}, {("b.example", "a.example", 2, 2)})
        # the page's main text, not its markup, script or style, was stored: a query finds the copy
        found = client.query("warc", TEXT_A)
        assert {m.id for m in found} == {"http://a.example/1", "https://b.example/copy-1"}


def test_dedup_a_plain_warc(tmp_path: Path) -> None:
    archive = write_warc(tmp_path / "crawl.warc")
    kept, dups = tmp_path / "kept.jsonl", tmp_path / "dups.jsonl"
    done = neardup("dedup", str(archive), "--out", str(kept), "--duplicates", str(dups), "--json")
    assert done.returncode == 3, done.stderr  # the empty page is an error
    summary = json.loads(done.stdout)
    assert (summary["documents"], summary["kept"], summary["groups"], summary["errors"]) == (8, 6, 2, 1)
    rows = [json.loads(line) for line in kept.read_text().splitlines()]
    assert [r["id"] for r in rows] == [u for u in STORED if "b.example" not in u]
    assert all(r["url"] == r["id"] for r in rows)
    texts = {r["id"]: r["text"] for r in rows}
    assert TEXT_A in texts["http://a.example/1"]
    assert not any(junk in texts["http://a.example/1"] for junk in ("scriptjunk", "color", "<p>"))
    assert TEXT_D in texts["http://a.example/broken"]
    assert "café déjà" in texts["http://a.example/latin"]  # the HTTP charset
    assert "Привет мир" in texts["http://a.example/cyrillic"]  # the <meta> charset
    assert TEXT_E in texts["http://a.example/bogus"] and "caf\ufffd" in texts["http://a.example/bogus"]
    groups = {
        g["kept"]: [d["id"] for d in g["duplicates"]] for g in map(json.loads, dups.read_text().splitlines())
    }
    assert groups == {
        "http://a.example/1": ["https://b.example/copy-1"],
        "http://a.example/2": ["https://b.example/copy-2"],
    }


def test_mirrors_of_a_warc(tmp_path: Path) -> None:
    archive = write_warc(tmp_path / "crawl.warc.gz")
    done = neardup("mirrors", str(archive), "--site-field", "url", "--no-progress")
    assert done.returncode == 3, done.stderr  # the empty page
    rows = [line.split(",") for line in done.stdout.splitlines()[1:]]
    assert [row[:2] + row[4:6] for row in rows] == [["b.example", "a.example", "2", "2"]], done.stdout


@pytest.mark.parametrize("name", ["cut.warc.gz", "cut.warc"])
def test_a_truncated_warc_keeps_the_pages_before_the_break(service: Any, tmp_path: Path, name: str) -> None:
    pages = [
        (f"http://c.example/{k}", "200 OK", "text/html", html(" ".join(words(RNG, 80)))) for k in range(6)
    ]
    whole = write_warc(tmp_path / f"whole-{name}", pages).read_bytes()
    # cut inside the last record: its request record and the five pages before are whole
    archive = tmp_path / name
    archive.write_bytes(whole[: len(whole) - 150])
    collection = "cut-" + name.replace(".", "-")
    done = neardup(
        "load", str(archive), "-c", collection, "--create", "--url", service.url, "--batch-size", "2"
    )
    assert done.returncode == 1, done.stderr
    assert "reading stopped after the record at byte" in done.stderr
    assert "(http://c.example/5)" in done.stderr  # the request record of the page cut short
    assert "the 5 records before it are loaded" in done.stderr
    assert "inserted" in done.stdout  # the summary of what was loaded
    with Client(service.url) as client:
        for uri, *_ in pages[:5]:
            assert client.get(collection, uri).metadata == {"url": uri}
        with pytest.raises(NotFound):
            client.get(collection, pages[5][0])

    # the whole file in its place: the same command resumes after the five pages and loads the sixth
    archive.write_bytes(whole)
    done = neardup("load", str(archive), "-c", collection, "--url", service.url)
    assert done.returncode == 0, done.stderr
    assert "resuming after record 5" in done.stdout
    with Client(service.url) as client:
        assert client.get_collection(collection).documents == 6

    archive.write_bytes(whole[: len(whole) - 150])
    kept = tmp_path / "kept.jsonl"
    done = neardup("dedup", str(archive), "--out", str(kept))
    assert done.returncode == 1 and "reading stopped after" in done.stderr, done.stderr
    assert "the 5 documents before it are deduplicated" in done.stderr
    assert [json.loads(line)["id"] for line in kept.read_text().splitlines()] == [u for u, *_ in pages[:5]]


def test_without_the_warc_extra(tmp_path: Path) -> None:
    archive = write_warc(tmp_path / "crawl.warc")
    blocked = tmp_path / "blocked" / "warcio"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'warcio'\", name='warcio')\n"
    )
    done = neardup(
        "dedup", str(archive), "--out", str(tmp_path / "kept.jsonl"), env={"PYTHONPATH": str(blocked.parent)}
    )
    assert done.returncode == 2
    assert 'needs the warc extra: pip install "neardup[warc]"' in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (b"", None, ""),
        (b"   ", "text/html", ""),
        (b"<html><head><title>only a title", "text/html", "only a title"),
        (
            b"<<<>>></p></div><p>words <b>without end",
            "text/html; charset=no-such-charset",
            "words without end",
        ),
        (b"\x00\xff<p>ok\x80", "text/html; charset=utf-8", "ok\ufffd"),
        (b'<?xml version="1.0" encoding="utf-16"?><html><body>plain</body></html>', None, "plain"),
    ],
)
def test_garbage_html_gives_text_or_nothing(body: bytes, content_type: str | None, expected: str) -> None:
    text = page_text(body, content_type)
    assert text.endswith(expected) and "<p>" not in text and "body" not in text
