"""A server whose neardup module reports this release's version but refuses the commands as the scripts
send them (another build's module that reports version 1 by mistake, or a module swapped under a
running service): the store finds out by running each command on nothing (module_probe.lua; on a
cluster node cluster_module_probe.lua) and takes the Lua steps, and a script call that meets such a
refusal later makes it ask again, instead of answering 503 until a restart.

Played with the real module: the store is given scripts that speak another protocol (the module's
commands' first argument, "2") or that send one argument too many, so the real module answers what it
answers a build it does not match, "ERR ND.BANDS: unknown protocol version" or "ERR wrong number of
arguments for 'nd.bands' command", while MODULE LIST still reports this release's version."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from neardup.domain import CollectionParams, Document, Index, StoreUnavailable
from neardup.storage import ClusterStore, RedisStore, scripts
from neardup.storage.embedded import EmbeddedValkey
from neardup.storage.scripts import Script
from tests.domain.test_index import text, variant
from tests.storage.test_valkey_module import dump, run_workload

pytestmark = pytest.mark.anyio

_COMMAND = re.compile(r"('ND\.[A-Z]+', )'1'")
#: How the scripts of a build the module does not match send its commands.
MISMATCHES = {
    "unknown protocol version": lambda source: _COMMAND.sub(r"\1'2'", source),
    "wrong number of arguments": lambda source: _COMMAND.sub(r"\1'1', 'more'", source),
}


@pytest.fixture(params=sorted(MISMATCHES))
def mismatch(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def speak_another_build(monkeypatch: pytest.MonkeyPatch, mismatch: str) -> None:
    """From now on the store builds its scripts (and its probes) to send the module's commands as a
    build the loaded module does not match would."""
    source = scripts._source
    monkeypatch.setattr(
        scripts,
        "_source",
        lambda name, variant, common=False: MISMATCHES[mismatch](source(name, variant, common)),
    )


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedValkey, EmbeddedValkey]]:
    with_module = EmbeddedValkey(tmp_path_factory.mktemp("with-module"))
    lua_only = EmbeddedValkey(tmp_path_factory.mktemp("lua-only"), module=False)
    with_module.start()
    lua_only.start()
    try:
        yield with_module, lua_only
    finally:
        with_module.stop()
        lua_only.stop()


@pytest.fixture
def emptied(servers: tuple[EmbeddedValkey, EmbeddedValkey]) -> tuple[EmbeddedValkey, EmbeddedValkey]:
    for server in servers:
        client = redis.Redis.from_url(server.url)
        try:
            client.flushall()
            client.script_flush()
        finally:
            client.close()
    return servers


def refusals(url: str) -> int:
    """Calls of the module's commands the server refused (errors)."""
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return sum(int(v.get("failed_calls", 0)) for k, v in stats.items() if k.startswith("cmdstat_nd."))


async def sites_and_passages(index: Index) -> None:
    """Checks that take every step the module has (bands, passages, site pages, links) and a passage
    search: all answered."""
    params = CollectionParams.create("s", threshold=0.7, passages=True, site_field="url")
    await index.create_collection(params)
    base = text(5)
    await index.check("s", [Document("a", base, {"url": "https://a.example/1"})])
    [copy] = await index.check("s", [Document("b", variant(base, 1), {"url": "https://b.example/1"})])
    assert copy.duplicate_of == "a"
    await index.settle_links("s")
    assert [m.site for m in (await index.site("s", "a.example")).mirrors] == ["b.example"]
    assert (await index.passages("s", base)).sources


async def test_a_module_that_refuses_the_scripts_commands_is_served_through_the_lua_steps(
    emptied: tuple[EmbeddedValkey, EmbeddedValkey], monkeypatch: pytest.MonkeyPatch, mismatch: str
) -> None:
    with_module, lua_only = emptied
    client = redis.Redis.from_url(with_module.url)
    try:  # the module reports exactly this release's version
        assert {m[b"name"]: m[b"ver"] for m in client.module_list()}[b"neardup"] == scripts.MODULE_VERSION
    finally:
        client.close()
    speak_another_build(monkeypatch, mismatch)
    other = RedisStore.from_url(with_module.url)
    lua = RedisStore.from_url(lua_only.url)
    try:
        replies = await run_workload(other, seed=3)  # no 503: the probe found the module unusable first
        assert other._scripts.uses_module is False
        assert refusals(with_module.url) > 0  # the probe met the refusal for real
        assert [r.candidates for r in replies] == [r.candidates for r in await run_workload(lua, seed=3)]
        assert dump(with_module.url) == dump(lua_only.url)  # the Lua steps wrote what the module would
        await sites_and_passages(Index(other))
    finally:
        await other.close()
        await lua.close()


async def test_a_module_that_starts_refusing_under_a_running_store_is_probed_again(
    emptied: tuple[EmbeddedValkey, EmbeddedValkey], monkeypatch: pytest.MonkeyPatch, mismatch: str
) -> None:
    with_module, _ = emptied
    store = RedisStore.from_url(with_module.url)
    try:
        index = Index(store)
        await index.create_collection(CollectionParams.create("c", threshold=0.7))
        await index.check("c", [Document("first", text(1))])
        assert store._scripts.uses_module is True  # this release's module, as the probe found it
        # The module no longer runs what the loaded scripts send (as if swapped for another build's).
        speak_another_build(monkeypatch, mismatch)
        store._scripts.check = Script("check", "module")
        with pytest.raises(StoreUnavailable) as refused:
            await index.check("c", [Document("second", variant(text(1), 2))])
        assert mismatch in str(refused.value).lower()
        # The next calls ask again, find the module unusable and take the Lua steps: no restart.
        [second] = await index.check("c", [Document("second", variant(text(1), 2))])
        assert second.duplicate_of == "first"
        assert store._scripts.uses_module is False
        await sites_and_passages(index)
    finally:
        await store.close()


async def test_a_cluster_node_whose_module_refuses_nd_buckets_takes_the_lua_band_records(
    cluster_url: str, monkeypatch: pytest.MonkeyPatch, mismatch: str
) -> None:
    speak_another_build(monkeypatch, mismatch)
    store = ClusterStore.from_url(cluster_url)
    try:
        index = Index(store)
        await index.create_collection(CollectionParams.create("c", threshold=0.7))
        base = text(2)
        await index.check("c", [Document("a", base)])
        [copy] = await index.check("c", [Document("b", variant(base, 1))])
        assert copy.duplicate_of == "a"
        modules = store._routing._modules
        assert modules and not any(modules.values())  # every node was probed and refused
    finally:
        await store.close()


def test_module_refusals_are_told_from_other_errors() -> None:
    refused = [
        "unknown command 'ND.BANDS', with args beginning with: '1'",
        "ERR ND.BANDS: unknown protocol version script: f_0123, on @user_script:12.",
        "ERR wrong number of arguments for 'nd.link' command script: f_0123, on @user_script:40.",
        "ERR ND.PASSAGES: slot, cap, stride or part out of range",
    ]
    others = [
        "OOM command not allowed when used memory > 'maxmemory'.",
        "LOADING Valkey is loading the dataset in memory",
        "ordinals of this collection exhausted (last 1099511627775)",
        "the document was not found.",
    ]
    assert all(scripts.module_refused(Exception(e)) for e in refused)
    assert not any(scripts.module_refused(Exception(e)) for e in others)


def test_probes_are_built_from_the_module_variants() -> None:
    # The probes send each command exactly as the scripts do: they are made of the same files.
    folder = Path(scripts.__file__).with_name("scripts")
    probe = Script("module_probe", "module").source
    for step in ("_bands_module.lua", "_passages_module.lua", "_link_module.lua", "_postings_module.lua"):
        assert (folder / step).read_text() in probe
    assert (folder / "_cluster_buckets_module.lua").read_text() in Script(
        "cluster_module_probe", "module"
    ).source
