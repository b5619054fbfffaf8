"""Server-side scripts: each ``scripts/<name>.lua`` (with ``_common.lua`` prepended where it is used),
registered once per client and loaded again when the server answers NOSCRIPT (restart, SCRIPT FLUSH).

The loops that cost the most commands come in two variants with one contract and the same data: one
call of a command of neardup's Valkey module (``_<step>_module.lua``), or plain Lua for any Redis or
Valkey server (``_<step>_lua.lua``): check.lua's band step (``ND.BANDS``, which also counts a page of a
site: ``_site_page_*``), its passage step (``ND.PASSAGES``) and its link step (``ND.LINK``, also
link.lua's), passages.lua's read of the passage index (``ND.POSTINGS``), and cluster_ops.lua's band
records (``ND.BUCKETS``). The store asks the server once, when it loads the scripts, whether it has the
module this release built (:data:`MODULE_VERSION`): then every script takes the module variant, else
every one the Lua variant (managed services cannot load modules; a server may run another build's).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, ResponseError

_NEEDS_COMMON = {"check", "lookup", "delete", "due", "reclaim", "passages", "link", "site", "journal"}


#: The name neardup's Valkey module (native/valkey/bands.cpp) registers under.
MODULE_NAME = b"neardup"


#: The version of the module built with this release (RedisModule_Init in native/valkey/bands.cpp): the
#: scripts send its commands only to a server whose module reports exactly this version.
MODULE_VERSION = 1


async def module_version(client: aioredis.Redis) -> int:
    """The version of neardup's module on the server: 0 when it is not loaded (or MODULE LIST is
    refused)."""
    try:
        modules = await client.module_list()
    except ResponseError:
        return 0
    for m in modules:
        if m.get(b"name") == MODULE_NAME:
            return int(m.get(b"ver", 1))
    return 0


#: Scripts whose loops come in a module and a Lua variant, and the files that hold them (``{variant}``:
#: "module" or "lua").
_VARIANTS = {
    "check": [
        "_bands_{variant}.lua",
        "_passages_{variant}.lua",
        "_site_page_{variant}.lua",
        "_link_{variant}.lua",
    ],
    "cluster_ops": ["_cluster_buckets_{variant}.lua"],
    "link": ["_link_{variant}.lua"],
    "passages": ["_postings_{variant}.lua"],
}


def uses_module(version: int) -> bool:
    """Whether a server whose neardup module reports ``version`` (0: none loaded) runs the module
    variants: only the module of this release speaks the protocols the scripts send."""
    return version == MODULE_VERSION


def _source(name: str, variant: str) -> str:
    folder = resources.files("neardup.storage").joinpath("scripts")
    main = folder.joinpath(f"{name}.lua").read_text("utf-8")
    shebang = ""
    if main.startswith("#!"):  # flags must stay on the first line
        shebang, main = main.split("\n", 1)
    parts = [main]
    for file in reversed(_VARIANTS.get(name, [])):
        parts.insert(0, folder.joinpath(file.format(variant=variant)).read_text("utf-8"))
    if name in _NEEDS_COMMON:
        parts.insert(0, folder.joinpath("_common.lua").read_text("utf-8"))
    return "\n".join([shebang, *parts] if shebang else parts)


class Script:
    """One Lua script called by SHA; a NOSCRIPT answer loads it and retries once."""

    def __init__(self, name: str, variant: str = "lua") -> None:
        self.name = name
        self.source = _source(name, variant)
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
        self.uses_module = False
        self.lookup = Script("lookup")
        self.delete = Script("delete")
        self.create_collection = Script("create_collection")
        self.drop_collection = Script("drop_collection")
        self.due = Script("due")
        self.reclaim = Script("reclaim")
        self.passages = Script("passages")
        self.link = Script("link")
        self.site = Script("site")
        self.journal = Script("journal")
        self._loaded = False

    def forget(self) -> None:
        """Ask the server again, on the next call, whether it has the module, and load the scripts."""
        self._loaded = False

    async def ensure_loaded(self, client: aioredis.Redis) -> None:
        if not self._loaded:
            self.uses_module = uses_module(await module_version(client))
            variant = "module" if self.uses_module else "lua"
            self.check = Script("check", variant)
            self.link = Script("link", variant)
            self.passages = Script("passages", variant)
            every = (
                self.check, self.lookup, self.delete, self.create_collection, self.drop_collection,
                self.due, self.reclaim, self.passages, self.link, self.site, self.journal,
            )  # fmt: skip
            for script in every:
                await script.load(client)
            self._loaded = True
