"""Fixtures of the HTTP-layer tests: the real app factory against the session's real valkey-server
and against its real 3-node cluster (``store_target`` from tests/conftest.py: every test taking
``settings`` or ``client`` runs on both, emptied per test), called in-process through httpx's ASGI
transport with the app's lifespan running (Starlette's TestClient is deprecated with httpx)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from neardup.main import create_app
from neardup.settings import Settings
from tests.conftest import StoreTarget

#: Small limits, so the tests can cross them with small bodies.
TEST_LIMITS: dict[str, Any] = {
    "max_text_bytes": 20_000,
    "max_batch_documents": 50,
    "max_id_length": 100,
    "max_metadata_bytes": 200,
    "max_body_bytes": 200_000,
    "max_query_limit": 100,
}


@pytest.fixture
def settings(store_target: StoreTarget) -> Settings:
    return Settings(
        redis_url=store_target.url, redis_cluster=store_target.cluster, store_timeout=2.0, **TEST_LIMITS
    )


MakeClient = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    """``await make_client(settings)`` (or ``app=`` an app already built): a client on a running app;
    the lifespan is closed at the end of the test. App exceptions are not re-raised into the test:
    it sees what a client would."""
    async with AsyncExitStack() as stack:

        async def make(settings: Settings | None = None, *, app: FastAPI | None = None) -> httpx.AsyncClient:
            if app is None:
                assert settings is not None
                app = create_app(settings)
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            return await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url="http://neardup.test", timeout=10.0)
            )

        yield make


@pytest.fixture
async def client(settings: Settings, make_client: MakeClient) -> httpx.AsyncClient:
    return await make_client(settings)


class Texts:
    """Texts for tests: the same for the same seed, unrelated (Jaccard ~0) for different seeds."""

    @staticmethod
    def words(seed: int, count: int = 300) -> str:
        rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        return " ".join("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(count))

    @staticmethod
    def edited(text: str, position: int = 50) -> str:
        """One word replaced: at 300 words, an estimated Jaccard around 0.97, far above 0.8."""
        parts = text.split()
        parts[position] = "zzedited"
        return " ".join(parts)


@pytest.fixture
def texts() -> type[Texts]:
    return Texts
