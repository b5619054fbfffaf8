"""The Scrapy pipeline in a real crawl: ``scrapy`` in a subprocess (the asyncio reactor) crawls a site and
its mirror served by http.server on two loopback addresses (127.0.0.1 and 127.0.0.2, so the URLs' hosts
differ), against a real neardup service; near-copies are dropped or tagged, the mirror is reported, and
a crawl with the service stopped halfway finishes as ``NEARDUP_ON_ERROR`` says."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from neardup.client import Client
from neardup.integrations.scrapy import NeardupPipeline
from tests.cli.test_dedup import words

RNG = random.Random(1931)
TEXTS = [" ".join(words(RNG, 80)) for _ in range(7)]
A, B = "127.0.0.1", "127.0.0.2"
#: The crawl, in order: (host, path, text). One near-copy on the site itself, and a mirror host whose
#: two pages are near-copies of two of the site's.
PAGES: list[tuple[str, str, str]] = [
    (A, "/1", TEXTS[0]),
    (A, "/2", TEXTS[1]),
    (A, "/3", TEXTS[2]),
    (A, "/4", TEXTS[0] + " changed"),
    (B, "/1", TEXTS[1] + " mirrored"),
    (B, "/2", TEXTS[2] + " mirrored"),
    (A, "/5", TEXTS[3]),
    (A, "/6", TEXTS[4]),
    (A, "/7", TEXTS[5]),
    (A, "/8", TEXTS[6]),
]
#: The page whose request stops the service, in the crawls that stop it (after the pages before it
#: are checked): it and the pages after it cannot be checked.
HALT = 7

SPIDER = '''
import json, sys
from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess
from neardup.integrations.scrapy import page_item

config = json.loads(sys.argv[1])


class Site(Spider):
    """Follows the pages one after the other, as a link chain would."""

    name = "site"

    async def start(self):
        yield Request(config["urls"][0], cb_kwargs={"rest": config["urls"][1:]})

    def parse(self, response, rest):
        yield page_item(response)
        if rest:
            yield Request(rest[0], cb_kwargs={"rest": rest[1:]})


process = CrawlerProcess(settings={
    "ITEM_PIPELINES": {"neardup.integrations.scrapy.NeardupPipeline": 300},
    "FEEDS": {config["items"]: {"format": "jsonlines"}},
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": False,
    **config["settings"],
})
crawler = process.create_crawler(Site)
process.crawl(crawler)
process.start()
with open(config["stats"], "w") as out:
    json.dump({k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, str))}, out)
'''


def html(text: str) -> bytes:
    return (
        "<!DOCTYPE html><html><head><title>a page</title><script>var t = 'scriptjunk';</script></head>"
        f'<body><nav><a href="/">home</a></nav><p>{text}</p></body></html>'
    ).encode()


class Site:
    """The site and its mirror: one http.server per host. A page's request waits until the pages
    before it are checked (the order of the answers is then the order of the crawl); the ``halt`` page
    stops the service first (and starts it again ``restart_after`` seconds later), the pages after it take
    ``slow_after`` seconds."""

    def __init__(
        self,
        service: Any,
        collection: str,
        halt: int | None,
        slow_after: float = 0.0,
        restart_after: float | None = None,
    ) -> None:
        self.service, self.collection, self.halt = service, collection, halt
        self.slow_after, self.restart_after = slow_after, restart_after
        self.restarted = threading.Event()
        #: when each page was requested, and when the service was started again (time.monotonic())
        self.requested: dict[int, float] = {}
        self.restarted_at = 0.0
        self.servers = {host: ThreadingHTTPServer((host, 0), self.handler()) for host in (A, B)}
        self.threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in self.servers.values()]

    def url(self, index: int) -> str:
        host, path, _ = PAGES[index]
        return f"http://{host}:{self.servers[host].server_address[1]}{path}"

    def wait_checked(self, count: int) -> None:
        deadline = time.monotonic() + 10
        with Client(self.service.url) as client:
            while client.get_collection(self.collection).documents < count:
                assert time.monotonic() < deadline, f"the pipeline did not check {count} pages"
                time.sleep(0.02)

    def restart(self) -> None:
        self.restarted_at = time.monotonic()
        self.service.start()
        self.restarted.set()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                host = self.server.server_address[0]
                index = next(i for i, (h, p, _) in enumerate(PAGES) if (h, p) == (host, self.path))
                site.requested[index] = time.monotonic()
                if site.halt is None or index < site.halt:
                    site.wait_checked(index)
                elif index == site.halt:
                    site.wait_checked(index)
                    site.service.stop()
                    if site.restart_after is not None:
                        threading.Timer(site.restart_after, site.restart).start()
                else:
                    time.sleep(site.slow_after)
                body = html(PAGES[index][2])
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> Site:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers.values():
            server.shutdown()
            server.server_close()


def crawl(site: Site, tmp_path: Path, **settings: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the crawl to its end; the items written and the crawl's stats."""
    items, stats = tmp_path / "items.jsonl", tmp_path / "stats.json"
    config = {
        "urls": [site.url(i) for i in range(len(PAGES))],
        "items": str(items),
        "stats": str(stats),
        "settings": {
            "NEARDUP_URL": site.service.url,
            "NEARDUP_COLLECTION": site.collection,
            "NEARDUP_RETRIES": 1,
            **settings,
        },
    }
    script = tmp_path / "crawl.py"
    script.write_text(SPIDER)
    done = subprocess.run(
        [sys.executable, str(script), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    (tmp_path / "crawl.log").write_text(done.stderr)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = items.read_text().splitlines() if items.exists() else []
    return [json.loads(line) for line in lines], json.loads(stats.read_text())


@pytest.fixture
def own_service(start_service: Callable[..., Any], tmp_path: Path) -> Callable[[], Any]:
    """A service this test may stop."""
    return lambda: start_service(tmp_path / "data")


def test_near_copies_are_dropped_and_the_mirror_is_reported(service: Any, tmp_path: Path) -> None:
    with Client(service.url) as client:
        client.create_collection("crawl", threshold=0.8, site_field="url")
        with Site(service, "crawl", halt=None) as site:
            items, stats = crawl(site, tmp_path)
        kept = [i for i in range(len(PAGES)) if i not in (3, 4, 5)]
        assert [item["url"] for item in items] == [site.url(i) for i in kept]
        assert all("neardup" not in item for item in items)  # action=drop tags nothing
        # the page's text, without its markup or script
        assert TEXTS[0] in items[0]["text"]
        assert "scriptjunk" not in items[0]["text"] and "<p>" not in items[0]["text"]
        assert (stats["neardup/checked"], stats["neardup/duplicates"]) == (10, 3)
        assert stats["item_dropped_count"] == 3
        assert "neardup/unchecked" not in stats
        assert stats["finish_reason"] == "finished"
        # every page was stored, the dropped ones too, with its URL as id and metadata
        assert client.get_collection("crawl").documents == len(PAGES)
        assert client.get("crawl", site.url(4)).metadata == {"url": site.url(4)}
        [pair] = client.mirrors("crawl")
        assert (pair.site, pair.other, pair.pages, pair.other_pages, pair.shared, pair.other_shared) == (
            B,
            A,
            2,
            8,
            2,
            2,
        )


def test_tagged_and_passed_unchecked_when_the_service_stops(
    own_service: Callable[[], Any], tmp_path: Path
) -> None:
    service = own_service()
    with Client(service.url) as client:
        client.create_collection("crawl", threshold=0.8, site_field="url")
    with Site(service, "crawl", halt=HALT) as site:
        items, stats = crawl(site, tmp_path, NEARDUP_ACTION="tag", NEARDUP_ON_ERROR="pass")
    urls = [item["url"] for item in items]
    # none lost; the unchecked ones end in any order (each waited for its own retries)
    assert urls[:HALT] == [site.url(i) for i in range(HALT)]
    assert sorted(urls[HALT:]) == sorted(site.url(i) for i in range(HALT, len(PAGES)))
    originals = {3: 0, 4: 1, 5: 2}
    for index, item in enumerate(items[:HALT]):
        tag = item["neardup"]
        assert (tag["checked"], tag["duplicate"]) == (True, index in originals), item
        if index in originals:
            assert tag["duplicate_of"] == site.url(originals[index])
            assert tag["similarity"] > 0.8
        else:
            assert (tag["duplicate_of"], tag["similarity"]) == (None, None)
    for item in items[HALT:]:
        assert item["neardup"]["checked"] is False, item
        assert "neardup unavailable" in item["neardup"]["error"]
    assert (stats["neardup/checked"], stats["neardup/unchecked"]) == (HALT, len(PAGES) - HALT)
    assert stats["finish_reason"] == "finished"


def test_the_spider_closes_when_the_service_stops(own_service: Callable[[], Any], tmp_path: Path) -> None:
    service = own_service()
    with Client(service.url) as client:
        client.create_collection("crawl", threshold=0.8, site_field="url")
    # the pages after the halt take a while: the spider is closed before it reaches the last one
    with Site(service, "crawl", halt=HALT, slow_after=1.0) as site:
        items, stats = crawl(site, tmp_path, NEARDUP_ON_ERROR="stop", NEARDUP_RETRIES=0)
    assert stats["finish_reason"] == "neardup_unavailable"
    kept = [i for i in range(HALT) if i not in (3, 4, 5)]
    urls = [item["url"] for item in items]
    assert urls[: len(kept)] == [site.url(i) for i in kept]
    assert all("neardup" not in item for item in items[: len(kept)])
    # the item in hand when the service went away is kept, tagged; the crawl stopped before its end
    assert urls[len(kept)] == site.url(HALT)
    assert all(item["neardup"]["checked"] is False for item in items[len(kept) :])
    assert site.url(len(PAGES) - 1) not in urls


def test_retry_waits_for_the_service_to_come_back(own_service: Callable[[], Any], tmp_path: Path) -> None:
    service = own_service()
    with Client(service.url) as client:
        client.create_collection("crawl", threshold=0.8, site_field="url")
    with Site(service, "crawl", halt=HALT, restart_after=2.0) as site:
        items, stats = crawl(site, tmp_path, NEARDUP_ACTION="tag", NEARDUP_ON_ERROR="retry")
    assert site.restarted.is_set()
    # the crawl went on while the items waited: the last pages were fetched during the outage
    assert max(site.requested.values()) < site.restarted_at
    assert sorted(item["url"] for item in items) == sorted(site.url(i) for i in range(len(PAGES)))
    assert all(item["neardup"]["checked"] for item in items)  # the pages after the outage waited
    assert (stats["neardup/checked"], stats["finish_reason"]) == (len(PAGES), "finished")
    assert "neardup/unchecked" not in stats
    with Client(service.url) as client:
        assert client.get_collection("crawl").documents == len(PAGES)


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"NEARDUP_ACTION": "delete"}, "NEARDUP_ACTION must be one of drop, tag, pass, got 'delete'"),
        ({"NEARDUP_ON_ERROR": "ignore"}, "NEARDUP_ON_ERROR must be one of retry, pass, stop, got 'ignore'"),
    ],
)
def test_a_wrong_setting_is_named(settings: dict[str, str], error: str) -> None:
    crawler = get_crawler(settings_dict={"NEARDUP_COLLECTION": "pages", **settings})
    with pytest.raises(ValueError, match=error):
        NeardupPipeline.from_crawler(crawler)


def test_without_a_collection_the_pipeline_is_off() -> None:
    with pytest.raises(NotConfigured, match="NEARDUP_COLLECTION"):
        NeardupPipeline.from_crawler(get_crawler())


def test_an_unknown_collection_stops_the_crawl(service: Any, tmp_path: Path) -> None:
    with Site(service, "crawl", halt=None) as site:
        items, _stats = crawl(site, tmp_path, NEARDUP_COLLECTION="missing")
    assert items == []  # not one page crawled
    log = (tmp_path / "crawl.log").read_text()
    assert "NotFound: 404 not_found: collection 'missing' does not exist" in log


def test_an_html_field_is_read_and_an_item_without_text_goes_on_tagged(service: Any) -> None:
    with Client(service.url) as client:
        client.create_collection("fields", threshold=0.8)
    crawler = get_crawler(
        settings_dict={"NEARDUP_URL": service.url, "NEARDUP_COLLECTION": "fields", "NEARDUP_ACTION": "tag"}
    )
    crawler._apply_settings()
    pipeline = NeardupPipeline.from_crawler(crawler)

    async def run() -> list[Any]:
        await pipeline.open_spider()
        try:
            return [
                await pipeline.process_item({"url": "http://x.example/a", "html": html(TEXTS[0]).decode()}),
                await pipeline.process_item({"url": "http://x.example/b", "text": TEXTS[0] + " again"}),
                await pipeline.process_item({"url": "http://x.example/c", "html": "<p> </p>"}),
                await pipeline.process_item({"text": TEXTS[1]}),
            ]
        finally:
            await pipeline.close_spider()

    first, copy, empty, no_url = asyncio.run(run())
    assert first["neardup"] == {"checked": True, "duplicate": False, "duplicate_of": None, "similarity": None}
    assert copy["neardup"]["duplicate_of"] == "http://x.example/a"
    for item in (empty, no_url):
        assert item["neardup"] == {"checked": False, "error": "no 'url' or no text in the item"}
    with Client(service.url) as client:
        # the html field's main text was stored: the text alone finds it
        assert {m.id for m in client.query("fields", TEXTS[0])} == {
            "http://x.example/a",
            "http://x.example/b",
        }
        assert client.get_collection("fields").documents == 2
