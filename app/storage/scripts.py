"""Server-side scripts: each ``scripts/<name>.lua`` (with ``_common.lua`` prepended where it is used),
registered once per client and loaded again when the server answers NOSCRIPT (restart, SCRIPT FLUSH).

check.lua's band step comes in two versions with one contract: ``_bands_lua.lua`` for any server and
``_bands_module.lua``, one call of ``ND.BANDS`` where the server has neardup's module loaded (the
embedded one always has); so does its passage step (``_passages_lua.lua``, ``_passages_module.lua``:
one ``ND.PASSAGES``, where the module is version 5 or later: protocol 2 for passage format 3; a server
with a module of version 2 to 4 takes the Lua step for every format), and passages.lua's read of a
format-3 index (``_postings_lua.lua``, ``_postings_module.lua``: one ``ND.POSTINGS``). The store asks
the server which once, when it loads the scripts. The cluster's ``cluster_ops.lua`` likewise applies
its band records with ``_cluster_buckets_lua.lua`` or one ``ND.BUCKETS``
(``_cluster_buckets_module.lua``), chosen per node.
The link step over cross-site pairs (``link.lua``, and check.lua's settle of earlier batches' pairs)
comes the same two ways: ``_link_lua.lua``, or one ``ND.LINK`` (``_link_module.lua``) where the module is
version 2 or later. (``ND.MATCHLINK``, the module's own verification and link step, is what check.lua
sent from module version 3 to the release before the link journal; the module keeps it for those
scripts.)"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, ResponseError

_NEEDS_COMMON = {"check", "lookup", "delete", "due", "reclaim", "passages", "link", "site", "journal"}


#: The name neardup's Valkey module (native/valkey/bands.cpp) registers under.
MODULE_NAME = b"neardup"


#: The module version from which the link step goes through ``ND.LINK``: version 7 brought its protocol
#: 2 (site layout 2: packed shared counts, keys.SITE_LAYOUT). ``ND.LINK`` came with version 2 (version
#: 1 has ``ND.BANDS`` and ``ND.BUCKETS`` only) and knew layout 1 only, so a server that runs a module
#: built from an earlier release takes the Lua link step (``_link_lua.lua``) for every collection.
LINK_MODULE_VERSION = 7
#: The module version whose ``ND.BANDS`` takes protocol 5: check.lua counts a page of a site in the
#: document's band step call (``_site_page_module.lua``) instead of three commands of its own
#: (``_site_page_lua.lua``: _common.lua's add_site_page). Version 6 brought protocol 4, the same with
#: every site key named in the arguments, which the scripts no longer send.
SITE_PAGE_MODULE_VERSION = 7
#: The module version that brought ND.PASSAGES's protocol 2 (passage format 3's packed index): check.lua's
#: passage step goes through the module only from this version on.
PACKED_PASSAGES_MODULE_VERSION = 5


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


#: Scripts whose loops come in a Lua and a module version, and the files that hold them: ``{bands}``
#: is the band step's choice (the module of any version), ``{link}`` the choice for ``ND.LINK``
#: (LINK_MODULE_VERSION), ``{v5}`` for ``ND.PASSAGES`` (both protocols from version 5) and
#: ``ND.POSTINGS``, ``{v6}`` for ``ND.BANDS``'s protocol 5 (a page of a site counted in the band step;
#: SITE_PAGE_MODULE_VERSION).
_VARIANTS = {
    "check": ["_bands_{bands}.lua", "_passages_{v5}.lua", "_site_page_{v6}.lua", "_link_{link}.lua"],
    "cluster_ops": ["_cluster_buckets_{bands}.lua"],
    "link": ["_link_{link}.lua"],
    "passages": ["_postings_{v5}.lua"],
}


def _source(name: str, bands: str, link: str, v5: str, v6: str = "lua") -> str:
    folder = resources.files("neardup.storage").joinpath("scripts")
    main = folder.joinpath(f"{name}.lua").read_text("utf-8")
    shebang = ""
    if main.startswith("#!"):  # flags must stay on the first line
        shebang, main = main.split("\n", 1)
    parts = [main]
    for variant in reversed(_VARIANTS.get(name, [])):
        file = variant.format(bands=bands, link=link, v5=v5, v6=v6)
        parts.insert(0, folder.joinpath(file).read_text("utf-8"))
    if name in _NEEDS_COMMON:
        parts.insert(0, folder.joinpath("_common.lua").read_text("utf-8"))
    return "\n".join([shebang, *parts] if shebang else parts)


class Script:
    """One Lua script called by SHA; a NOSCRIPT answer loads it and retries once."""

    def __init__(
        self, name: str, bands: str = "lua", link: str = "lua", v5: str = "lua", v6: str = "lua"
    ) -> None:
        self.name = name
        self.source = _source(name, bands, link, v5, v6)
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
            version = await module_version(client)
            self.uses_module = version > 0
            link = "module" if version >= LINK_MODULE_VERSION else "lua"
            v5 = "module" if version >= PACKED_PASSAGES_MODULE_VERSION else "lua"
            v6 = "module" if version >= SITE_PAGE_MODULE_VERSION else "lua"
            self.check = Script("check", "module" if self.uses_module else "lua", link, v5, v6)
            self.link = Script("link", link=link)
            self.passages = Script("passages", v5=v5)
            every = (
                self.check, self.lookup, self.delete, self.create_collection, self.drop_collection,
                self.due, self.reclaim, self.passages, self.link, self.site, self.journal,
            )  # fmt: skip
            for script in every:
                await script.load(client)
            self._loaded = True
