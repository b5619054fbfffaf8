"""Fixtures shared by the module tests: one server with neardup's module and one without (the Lua
steps), on fresh data directories, and a store on each."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from neardup.storage import RedisStore
from neardup.storage.embedded import EmbeddedValkey


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[EmbeddedValkey, EmbeddedValkey]]:
    with_module = EmbeddedValkey(tmp_path / "module")
    lua_only = EmbeddedValkey(tmp_path / "lua", module=False)
    with_module.start()
    lua_only.start()
    try:
        yield with_module, lua_only
    finally:
        with_module.stop()
        lua_only.stop()


@pytest.fixture
async def stores(
    servers: tuple[EmbeddedValkey, EmbeddedValkey],
) -> AsyncIterator[tuple[RedisStore, RedisStore]]:
    a, b = RedisStore.from_url(servers[0].url), RedisStore.from_url(servers[1].url)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()
