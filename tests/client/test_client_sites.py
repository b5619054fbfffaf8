"""``neardup.client``'s mirror detection (site, mirrors) against a real ``neardup serve``, blocking and
asyncio."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from neardup.client import AsyncClient, Client, Conflict, MirrorPair, NotFound, SiteMirrors, SiteShare
from tests.client.test_client import EDITED, OTHER, PROSE


def crawl(nd: Client, name: str) -> None:
    with contextlib.suppress(NotFound):
        nd.delete_collection(name)
    created = nd.create_collection(name, threshold=0.5, site_field="url")
    assert created.site_field == "url"
    nd.check_batch(
        name,
        [
            {"id": "1", "text": PROSE, "metadata": {"url": "https://origin.example/a"}},
            {"id": "2", "text": OTHER, "metadata": {"url": "https://origin.example/b"}},
            {"id": "3", "text": EDITED, "metadata": {"url": "https://Copy.example/a"}},
        ],
    )


def test_site_and_mirrors(service: Any) -> None:
    with Client(service.url, retries=1, backoff=0.01) as nd:
        crawl(nd, "sites1")
        origin = nd.site("sites1", "origin.example")
        assert origin == SiteMirrors("origin.example", 2, [SiteShare("copy.example", 1, 1, 0.5, 1, 1.0)])
        assert nd.site("sites1", "https://copy.example/whatever").pages == 1
        assert nd.site("sites1", "..").pages == 0  # dot segments stay one path segment
        assert nd.mirrors("sites1") == [MirrorPair("copy.example", "origin.example", 1, 2, 1, 1, 1.0, 0.5)]
        assert nd.mirrors("sites1", min_pages=2) == []
        assert nd.mirrors("sites1", min_share=0.0, limit=1)
        plain = nd.create_collection("plain-sites1")
        assert plain.site_field is None
        with pytest.raises(Conflict, match="site_field"):
            nd.site("plain-sites1", "origin.example")


@pytest.mark.anyio
async def test_async_site_and_mirrors(service: Any) -> None:
    with Client(service.url) as nd:
        crawl(nd, "sites2")
    async with AsyncClient(service.url, retries=1, backoff=0.01) as nd:
        assert (await nd.site("sites2", "copy.example")).mirrors[0].site == "origin.example"
        [pair] = await nd.mirrors("sites2", min_share=0.9)
        assert (pair.site, pair.other, pair.share) == ("copy.example", "origin.example", 1.0)
