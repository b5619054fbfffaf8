"""A Scrapy item pipeline that checks each crawled page against a neardup collection.

Enable it in the project's settings (Scrapy's asyncio reactor, the default, is needed)::

    ITEM_PIPELINES = {"neardup.integrations.scrapy.NeardupPipeline": 300}
    NEARDUP_URL = "http://127.0.0.1:8000"
    NEARDUP_COLLECTION = "pages"
    NEARDUP_ACTION = "drop"          # drop | tag | pass
    NEARDUP_ON_ERROR = "pass"        # retry | pass | stop

Each item is one page: its ``url`` field is the document id and the ``url`` metadata (so a collection
created with ``"site_field": "url"`` counts mirrors), its text the ``text`` field, or else the main text
of its ``html`` field (:func:`neardup.integrations.html.main_text`). :func:`page_item` builds such an
item from a response.

The check is a coroutine on the crawl's own event loop (the asyncio client, one request per item,
as many at once as Scrapy processes items): the reactor never waits for the service. An item that
could not be checked is never lost: it goes on tagged ``{"checked": False, "error": ...}`` in its
``neardup`` field, whatever the action, and counted in the ``neardup/unchecked`` stat.

Needs the ``scrapy`` extra: ``pip install "neardup[scrapy]"``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from itemadapter import ItemAdapter
from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem, NotConfigured
from scrapy.http import Response
from scrapy.utils.asyncio import is_asyncio_available

from neardup.client import AsyncClient, CheckResult, NeardupError, Unavailable
from neardup.integrations.html import main_text, page_text

__all__ = ["ACTIONS", "CLOSE_REASON", "ON_ERROR", "NeardupPipeline", "page_item"]

logger = logging.getLogger(__name__)

#: What happens to a near-duplicate: dropped (DropItem), tagged, or let through untouched.
ACTIONS = ("drop", "tag", "pass")
#: What happens while the service is down: wait for it, let items through unchecked, or stop the crawl.
ON_ERROR = ("retry", "pass", "stop")
#: The spider's close reason when the service is down and ``NEARDUP_ON_ERROR`` is ``stop``.
CLOSE_REASON = "neardup_unavailable"


def page_item(response: Response) -> dict[str, Any]:
    """The item the pipeline reads for a page: its URL and main text (decoded by the response's charset)."""
    content_type = response.headers.get("Content-Type")
    return {
        "url": response.url,
        "text": page_text(response.body, content_type.decode("latin-1") if content_type else None),
    }


def _choice(crawler: Crawler, name: str, choices: tuple[str, ...], default: str) -> str:
    value = str(crawler.settings.get(name, default)).strip().lower()
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _service_down(error: NeardupError) -> bool:
    """No answer, or 503/429 after the client's retries: the service (or its store) is unavailable."""
    return error.status == 0 or isinstance(error, Unavailable)


class NeardupPipeline:
    """Checks each item's page (and stores it) in ``NEARDUP_COLLECTION``; see the module's docstring.

    Settings: ``NEARDUP_URL``, ``NEARDUP_COLLECTION`` (required), ``NEARDUP_API_KEY`` (else
    ``$NEARDUP_API_KEY``), ``NEARDUP_ACTION``, ``NEARDUP_ON_ERROR``, ``NEARDUP_MIN_SIMILARITY`` (the
    collection's threshold when unset), ``NEARDUP_URL_FIELD`` / ``NEARDUP_TEXT_FIELD`` /
    ``NEARDUP_HTML_FIELD`` / ``NEARDUP_TAG_FIELD`` (the item's fields), ``NEARDUP_TIMEOUT`` and
    ``NEARDUP_RETRIES`` (per request), ``NEARDUP_RETRY_FOR`` (seconds ``retry`` waits for the service
    before it stops the crawl).
    """

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        collection = settings.get("NEARDUP_COLLECTION")
        if not collection:
            raise NotConfigured("NEARDUP_COLLECTION is not set")
        self.crawler = crawler
        self.collection = str(collection)
        self.url = str(settings.get("NEARDUP_URL", "http://127.0.0.1:8000"))
        self.api_key: str | None = settings.get("NEARDUP_API_KEY")
        self.action = _choice(crawler, "NEARDUP_ACTION", ACTIONS, "drop")
        self.on_error = _choice(crawler, "NEARDUP_ON_ERROR", ON_ERROR, "retry")
        min_similarity = settings.get("NEARDUP_MIN_SIMILARITY")
        self.min_similarity = None if min_similarity in (None, "") else float(min_similarity)
        self.url_field = str(settings.get("NEARDUP_URL_FIELD", "url"))
        self.text_field = str(settings.get("NEARDUP_TEXT_FIELD", "text"))
        self.html_field = str(settings.get("NEARDUP_HTML_FIELD", "html"))
        self.tag_field = str(settings.get("NEARDUP_TAG_FIELD", "neardup"))
        self.timeout = settings.getfloat("NEARDUP_TIMEOUT", 10.0)
        self.retries = settings.getint("NEARDUP_RETRIES", 2)
        self.retry_for = settings.getfloat("NEARDUP_RETRY_FOR", 600.0)
        self.client: AsyncClient | None = None
        #: Set once the crawl is being stopped for the service: later items are not sent.
        self.stopping = False
        self.closing: asyncio.Task[None] | None = None
        self.down_since: float | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NeardupPipeline:
        return cls(crawler)

    async def open_spider(self) -> None:
        if not is_asyncio_available():
            raise RuntimeError(
                "neardup's Scrapy pipeline needs the asyncio reactor: TWISTED_REACTOR = "
                '"twisted.internet.asyncioreactor.AsyncioSelectorReactor"'
            )
        self.client = AsyncClient(self.url, api_key=self.api_key, timeout=self.timeout, retries=self.retries)
        try:
            await self.client.get_collection(self.collection)
        except NeardupError as exc:
            if not _service_down(exc):
                raise  # unknown collection, wrong key: the crawl cannot do what was asked
            logger.warning(
                "neardup at %s is unavailable (%s): NEARDUP_ON_ERROR=%s", self.url, exc, self.on_error
            )

    async def close_spider(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def process_item(self, item: Any) -> Any:
        adapter = ItemAdapter(item)
        url = adapter.get(self.url_field)
        text = adapter.get(self.text_field)
        if text is None and adapter.get(self.html_field) is not None:
            text = main_text(str(adapter.get(self.html_field)))
        if not url or not isinstance(text, str) or not text.strip():
            return self._unchecked(adapter, f"no {self.url_field!r} or no text in the item")
        if self.stopping:
            return self._unchecked(adapter, "the crawl is stopping: neardup is unavailable")
        result = await self._check(adapter, str(url), text)
        if result is None:
            return item
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value("neardup/checked")
        best = result.matches[0].similarity if result.matches else None
        if result.duplicate:
            stats.inc_value("neardup/duplicates")
            if self.action == "drop":
                similarity = "" if best is None else f" (similarity {best:.3f})"
                raise DropItem(f"near-duplicate of {result.duplicate_of}{similarity}")
        if self.action == "tag":
            adapter[self.tag_field] = {
                "checked": True,
                "duplicate": result.duplicate,
                "duplicate_of": result.duplicate_of,
                "similarity": best,
            }
        return item

    async def _check(self, adapter: ItemAdapter, url: str, text: str) -> CheckResult | None:
        """The service's answer; None when the item went on unchecked (tagged)."""
        assert self.client is not None
        while True:
            try:
                result = await self.client.check(
                    self.collection, url, text, metadata={"url": url}, min_similarity=self.min_similarity
                )
            except NeardupError as exc:
                if not _service_down(exc):
                    # this page's own error (too long, ...): it goes on unchecked, the crawl goes on
                    logger.error("neardup could not check %s: %s", url, exc)
                    self._unchecked(adapter, str(exc))
                    return None
                if self.on_error == "retry" and not self._waited_too_long(exc):
                    await asyncio.sleep(1.0)
                    continue
                if self.on_error != "pass":
                    self._stop(exc)
                self._unchecked(adapter, f"neardup unavailable: {exc}")
                return None
            self.down_since = None
            return result

    def _waited_too_long(self, exc: NeardupError) -> bool:
        """Whether the outage has lasted longer than ``NEARDUP_RETRY_FOR`` (logged once, as it begins)."""
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
            logger.warning("neardup unavailable (%s): items wait for it (NEARDUP_ON_ERROR=retry)", exc)
        return now - self.down_since > self.retry_for

    def _stop(self, exc: NeardupError) -> None:
        if self.stopping:
            return
        self.stopping = True
        logger.error("neardup unavailable (%s): closing the spider (%s)", exc, CLOSE_REASON)
        assert self.crawler.engine is not None
        # not awaited here: closing waits for the items in hand, this one among them
        self.closing = asyncio.get_running_loop().create_task(
            self.crawler.engine.close_spider_async(reason=CLOSE_REASON)
        )

    def _unchecked(self, adapter: ItemAdapter, error: str) -> Any:
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value("neardup/unchecked")
        adapter[self.tag_field] = {"checked": False, "error": error}
        return adapter.item
