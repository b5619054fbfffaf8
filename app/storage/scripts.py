"""Server-side scripts: each ``scripts/<name>.lua`` (with ``_common.lua`` prepended where it is used),
registered once per client and loaded again when the server answers NOSCRIPT (restart, SCRIPT FLUSH).

The loops that cost the most commands come in two variants with one contract and the same data: one
call of a command of neardup's Valkey module (``_<step>_module.lua``), or plain Lua for any Redis or
Valkey server (``_<step>_lua.lua``): check.lua's band step (``ND.BANDS``, which also counts a page of a
site: ``_site_page_*``), its passage step (``ND.PASSAGES``) and its link step (``ND.LINK``, also
link.lua's), passages.lua's read of the passage index (``ND.POSTINGS``), and cluster_ops.lua's band
records (``ND.BUCKETS``). The store asks the server once, when it loads the scripts, whether it has the
module this release built: its module reports :data:`MODULE_VERSION` and runs each of those commands
as the scripts send them (``module_probe.lua``; on a cluster node ``cluster_module_probe.lua``). Then
every script takes the module variant, else every one the Lua variant (managed services cannot load
modules; a server may run another build's). A script call that fails because the module refused a
command (:func:`module_refused`: gone, another build's arguments or protocol) makes the store ask
again before its next call.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, ResponseError

_NEEDS_COMMON = {
    "check", "lookup", "delete", "due", "reclaim", "passages", "passage_sources", "link", "site", "journal",
    "module_probe", "cluster_sites", "cluster_journal",
}  # fmt: skip
#: Cluster scripts that find a band key's or an id's group in its family (``_cluster_family.lua``).
_NEEDS_FAMILY = {"cluster_ops", "cluster_bands", "cluster_ids", "cluster_module_probe"}
#: Scripts that read the collection's clock (``_clock.lua``; ``_common.lua`` reads it too).
_NEEDS_CLOCK = {*_NEEDS_COMMON, "clock", "cluster_reserve", "cluster_status"}


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
    # a cluster node runs the Lua loop: ND.LINK checks no slot, so a cluster node refuses it
    "cluster_sites": ["_link_{variant}.lua"],
    "passages": ["_postings_{variant}.lua"],
    "module_probe": [
        "_bands_{variant}.lua",
        "_passages_{variant}.lua",
        "_site_page_{variant}.lua",
        "_link_{variant}.lua",
        "_postings_{variant}.lua",
    ],
    "cluster_module_probe": ["_cluster_buckets_{variant}.lua"],
}


#: What a server answers when its module cannot run a command the scripts sent: the command is gone
#: (a server restarted without the module; the server does not name it), or the module names it in
#: its refusal (another build: "unknown protocol version", "ERR wrong number of arguments for
#: 'nd.bands' command", an argument out of range).
_REFUSED = re.compile(r"unknown command|\bnd\.[a-z]+\b", re.IGNORECASE)


def module_refused(error: Exception) -> bool:
    """Whether a script (or probe) failed because the server's neardup module refused a command."""
    return _REFUSED.search(str(error)) is not None


def uses_module(version: int) -> bool:
    """Whether a server whose neardup module reports ``version`` (0: none loaded) runs the module
    variants: only the module of this release speaks the protocols the scripts send."""
    return version == MODULE_VERSION


def _source(name: str, variant: str, common: bool = False) -> str:
    folder = resources.files("neardup.storage").joinpath("scripts")
    main = folder.joinpath(f"{name}.lua").read_text("utf-8")
    shebang = ""
    if main.startswith("#!"):  # flags must stay on the first line
        shebang, main = main.split("\n", 1)
    parts = [main]
    for file in reversed(_VARIANTS.get(name, [])):
        parts.insert(0, folder.joinpath(file.format(variant=variant)).read_text("utf-8"))
    if common or name in _NEEDS_COMMON:
        parts.insert(0, folder.joinpath("_common.lua").read_text("utf-8"))
    if name in _NEEDS_FAMILY:
        parts.insert(0, folder.joinpath("_cluster_family.lua").read_text("utf-8"))
    if common or name in _NEEDS_CLOCK:
        parts.insert(0, folder.joinpath("_clock.lua").read_text("utf-8"))
    return "\n".join([shebang, *parts] if shebang else parts)


class Script:
    """One Lua script called by SHA; a NOSCRIPT answer loads it and retries once."""

    def __init__(self, name: str, variant: str = "lua", *, common: bool = False) -> None:
        """``common``: with ``_common.lua`` (and ``_clock.lua``) prepended, whatever the script (the
        cluster's stamp takes them only for a collection with a site_field: defining their functions
        costs the server ~9 us a call, ``python bench/script_prelude_cost.py``)."""
        self.name = name
        self.source = _source(name, variant, common)
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    async def load(self, client: aioredis.Redis) -> None:
        await client.script_load(self.source)

    async def __call__(self, client: aioredis.Redis, keys: list[str], args: list[Any]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await self.load(client)
            return await client.evalsha(self.sha, len(keys), *keys, *args)


async def module_runs(probe: Callable[[], Awaitable[Any]]) -> bool:
    """Whether the module runs the commands as the scripts send them: ``probe()`` (a call of
    ``module_probe`` or ``cluster_module_probe``, module variant) answers without a refusal. Other
    errors (the server is loading, out of memory) are raised: the caller asks again later."""
    try:
        await probe()
    except ResponseError as error:
        if module_refused(error):
            return False
        raise
    return True


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
        self.passage_sources = Script("passage_sources")
        self.link = Script("link")
        self.site = Script("site")
        self.journal = Script("journal")
        self.clock = Script("clock")
        self._loaded = False

    def forget(self) -> None:
        """Ask the server again, on the next call, whether it has the module, and load the scripts."""
        self._loaded = False

    async def ensure_loaded(self, client: aioredis.Redis, probe_head: Sequence[Any]) -> None:
        """Choose the variants (``probe_head``: the shared head, see _common.lua, of key names no
        collection uses, for the probe) and load every script."""
        if not self._loaded:
            self.uses_module = uses_module(await module_version(client)) and await module_runs(
                lambda: Script("module_probe", "module")(client, [], list(probe_head))
            )
            variant = "module" if self.uses_module else "lua"
            self.check = Script("check", variant)
            self.link = Script("link", variant)
            self.passages = Script("passages", variant)
            every = (
                self.check, self.lookup, self.delete, self.create_collection, self.drop_collection,
                self.due, self.reclaim, self.passages, self.passage_sources, self.link, self.site,
                self.journal, self.clock,
            )  # fmt: skip
            for script in every:
                await script.load(client)
            self._loaded = True
