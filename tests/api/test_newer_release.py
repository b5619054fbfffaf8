"""A collection created by a newer release is refused, not misread: its registry entry names a stored
format, a parameter or a value this release does not know (every release that changes what a collection
stores raises the format),
and every request naming it, or listing collections, is a 503 that says so; the entry and the data are
left untouched for the newer processes, and other collections keep working."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
import redis
from httpx import AsyncClient

from neardup import __version__
from neardup.settings import Settings
from neardup.storage import keys
from tests.api.test_errors import assert_error

MakeClient = Callable[..., Awaitable[AsyncClient]]

pytestmark = pytest.mark.anyio


def _rewrite_entry(
    client: redis.Redis | redis.RedisCluster, name: str, change: Callable[[dict[str, Any]], None]
) -> bytes:
    raw = client.hget(keys.REGISTRY, name)
    assert raw is not None
    entry = orjson.loads(raw)
    change(entry)
    newer = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)
    client.hset(keys.REGISTRY, name, newer)
    return newer


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda e: e["params"].update(layout=4), "'layout'"),  # a parameter this release does not know
        (lambda e: e.update(epoch=2), "'epoch'"),  # a top-level key of the entry
        (lambda e: e["params"].update(verify="fuzzy"), "verify"),  # a value it does not know
        (lambda e: e.update(format=e["format"] + 1), "stored format 2"),  # the next stored format
    ],
    ids=["new parameter", "new entry key", "new value", "new stored format"],
)
async def test_a_collection_of_a_newer_release_is_a_503_that_says_so(
    settings: Settings,
    make_client: MakeClient,
    sync_client: redis.Redis | redis.RedisCluster,
    change: Callable[[dict[str, Any]], None],
    named: str,
) -> None:
    client = await make_client(settings)
    text = "one two three four five six seven eight nine ten " * 20
    for name in ("newer", "older"):
        created = await client.post("/v1/collections", json={"name": name, "threshold": 0.8})
        assert created.status_code == 201, created.text
        stored = await client.post(f"/v1/collections/{name}/check", json={"id": "a", "text": text})
        assert stored.status_code == 200, stored.text
    newer = _rewrite_entry(sync_client, "newer", change)
    # a process that read the collection before has it cached; one started now (a restart, another
    # replica) reads the registry entry
    fresh = await make_client(settings)
    requests = [
        fresh.get("/v1/collections/newer"),
        fresh.post("/v1/collections/newer/check", json={"id": "b", "text": text}),
        fresh.get("/v1/collections/newer/documents/a"),
        fresh.delete("/v1/collections/newer/documents/a"),
        fresh.post("/v1/collections", json={"name": "newer", "threshold": 0.8}),
        fresh.get("/v1/collections"),
        fresh.delete("/v1/collections/newer"),
    ]
    for request in requests:
        response = await request
        assert_error(response, 503, "'newer' was created by a newer release of neardup", named, __version__)
        assert response.headers["Retry-After"] == "30"
    # the other collection is served as before; the newer one's entry and data are untouched
    older = await fresh.post("/v1/collections/older/check", json={"id": "b", "text": text})
    assert older.status_code == 200 and older.json()["duplicate"], older.text
    assert sync_client.hget(keys.REGISTRY, "newer") == newer
    assert sync_client.exists(keys.CollectionKeys("newer", orjson.loads(newer)["gen"]).state)
