"""A collection that holds as many sites as its 4-byte site ids allow, over HTTP: a check or PUT of a
page of a new site is a permanent 409 ``collection_full`` (not a 503 to retry), with nothing stored;
pages of the sites it holds are still taken."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from httpx import AsyncClient

from neardup.storage import keys

pytestmark = pytest.mark.anyio


async def test_a_page_of_a_new_site_past_the_last_site_id_is_409_collection_full(
    client: AsyncClient, texts: Any, sync_client: redis.Redis
) -> None:
    created = await client.post(
        "/v1/collections", json={"name": "web", "threshold": 0.7, "site_field": "url"}
    )
    assert created.status_code == 201, created.text
    known = {"id": "a1", "text": texts.words(1), "metadata": {"url": "https://a.example/1"}}
    assert (await client.post("/v1/collections/web/check", json=known)).status_code == 200
    sync_client.hset(keys.state("web"), "sseq", keys.MAX_SITE_ID)  # as after 2^32 - 1 sites held at once

    new = {"id": "b1", "text": texts.words(2), "metadata": {"url": "https://b.example/1"}}
    refused = await client.post("/v1/collections/web/check", json=new)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"] == "collection_full" and "sites" in refused.json()["message"]
    put = await client.put(
        "/v1/collections/web/documents/b1", json={"text": new["text"], "metadata": new["metadata"]}
    )
    assert put.status_code == 409 and put.json()["error"] == "collection_full"
    assert (await client.get("/v1/collections/web/documents/b1")).status_code == 404
    more = {"id": "a2", "text": texts.words(3), "metadata": {"url": "https://a.example/2"}}
    assert (await client.post("/v1/collections/web/check", json=more)).status_code == 200
    site = await client.get("/v1/collections/web/sites/a.example")
    assert site.json()["pages"] == 2
