"""Server-side scripts: each ``scripts/<name>.lua`` (with ``_common.lua`` prepended where it is used),
registered once per client and loaded again when the server answers NOSCRIPT (restart, SCRIPT FLUSH)."""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

_NEEDS_COMMON = {"check", "lookup", "delete", "due", "reclaim"}


def _source(name: str) -> str:
    folder = resources.files("app.storage").joinpath("scripts")
    body = folder.joinpath(f"{name}.lua").read_text("utf-8")
    if name in _NEEDS_COMMON:
        body = folder.joinpath("_common.lua").read_text("utf-8") + "\n" + body
    return body


class Script:
    """One Lua script called by SHA; a NOSCRIPT answer loads it and retries once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = _source(name)
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    async def load(self, client: aioredis.Redis) -> None:
        await client.script_load(self.source)

    async def __call__(self, client: aioredis.Redis, keys: list[str], args: list[Any]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await self.load(client)
            return await client.evalsha(self.sha, len(keys), *keys, *args)


class Scripts:
    """All scripts of the store, loaded together on first use."""

    def __init__(self) -> None:
        self.check = Script("check")
        self.lookup = Script("lookup")
        self.delete = Script("delete")
        self.create_collection = Script("create_collection")
        self.drop_collection = Script("drop_collection")
        self.due = Script("due")
        self.reclaim = Script("reclaim")
        self._loaded = False

    async def ensure_loaded(self, client: aioredis.Redis) -> None:
        if not self._loaded:
            every = (
                self.check, self.lookup, self.delete, self.create_collection, self.drop_collection,
                self.due, self.reclaim,
            )  # fmt: skip
            for script in every:
                await script.load(client)
            self._loaded = True
