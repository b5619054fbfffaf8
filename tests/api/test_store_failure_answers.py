"""The error layer's nets for store failures that slip past the domain: an unexpected error raised
while a store failure was being handled, or a cancellation leaked by the store client, answers 503
with Retry-After; an unexpected error with no store failure behind it stays a 500."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI
from redis.exceptions import ConnectionError as RedisConnectionError

from neardup.api.errors import CatchAllMiddleware, install_error_handlers

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def app() -> FastAPI:
    api = FastAPI()
    install_error_handlers(api)
    api.add_middleware(CatchAllMiddleware)

    @api.get("/broken-while-the-store-failed")
    async def broken_while_the_store_failed() -> None:
        try:
            raise RedisConnectionError("Connection reset by peer")
        except RedisConnectionError:
            connection = None
            connection.close()  # type: ignore[attr-defined]  # a bug, met only when the store failed

    @api.get("/leaked-cancellation")
    async def leaked_cancellation() -> None:
        raise asyncio.CancelledError()  # nobody cancelled this request's task

    @api.get("/bug")
    async def bug() -> None:
        raise KeyError("a plain bug")

    return api


async def test_store_failures_behind_errors_are_503_and_other_errors_500() -> None:
    transport = httpx.ASGITransport(app=app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for path in ("/broken-while-the-store-failed", "/leaked-cancellation"):
            response = await client.get(path)
            assert response.status_code == 503, (path, response.text)
            assert response.json()["error"] == "store_unavailable"
            assert int(response.headers["retry-after"]) >= 1
        bug = await client.get("/bug")
        assert bug.status_code == 500 and bug.json()["error"] == "internal_error"
