"""The service runs the retention sweep at ``NEARDUP_RETENTION_SWEEP_SECONDS`` (its lifespan's background
task, on a real server and a real cluster): documents whose TTL has passed are reclaimed with no
request after them. The sweep itself: tests/domain/test_retention_sweep.py."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from neardup.settings import Settings
from tests.api.conftest import MakeClient, Texts
from tests.conftest import StoreTarget

pytestmark = pytest.mark.anyio

TTL = 1  # seconds
INTERVAL = 0.2  # seconds


async def test_the_service_sweeps_at_its_setting(
    store_target: StoreTarget, make_client: MakeClient, texts: type[Texts]
) -> None:
    settings = Settings(
        redis_url=store_target.url,
        redis_cluster=store_target.cluster,
        store_timeout=2.0,
        retention_sweep_seconds=INTERVAL,
    )
    client: httpx.AsyncClient = await make_client(settings)
    created = await client.post("/v1/collections", json={"name": "r", "ttl_seconds": TTL})
    assert created.status_code == 201, created.text
    for i in range(5):
        response = await client.post("/v1/collections/r/check", json={"id": f"d{i}", "text": texts.words(i)})
        assert response.status_code == 200, response.text
    deadline = time.monotonic() + 30
    while (documents := (await client.get("/v1/collections/r")).json()["documents"]) and (
        time.monotonic() < deadline
    ):
        await asyncio.sleep(0.05)
    assert documents == 0
