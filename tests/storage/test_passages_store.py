"""The storage layout constants: the Lua scripts hold the same numbers as keys.py."""

from __future__ import annotations

import re
from importlib import resources

from neardup.domain import fingerprints
from neardup.storage import keys


def _script(name: str) -> str:
    return resources.files("neardup.storage").joinpath("scripts").joinpath(name).read_text("utf-8")


def test_lua_and_python_agree_on_the_passage_layout() -> None:
    common = _script("_common.lua")
    found = re.search(r"local POSTING_CAP, PASSAGE_GROUP = (\d+), (\d+)", common)
    assert found is not None
    assert (int(found[1]), int(found[2])) == (keys.POSTING_CAP, keys.PASSAGE_GROUP)
    found = re.search(r"local PASSAGE_TARGET, PASSAGE_LEVEL = (\d+), (\d+)", common)
    assert found is not None
    assert (int(found[1]), int(found[2])) == (keys.PASSAGE_GROUP_TARGET, keys.PASSAGE_INDEX_LEVEL)
    top, part = (
        re.search(r"local PASSAGE_TOP = (\d+)", common),
        re.search(r"local PASSAGE_PART = (\d+)", common),
    )
    assert top is not None and part is not None
    assert (int(top[1]), int(part[1])) == (keys.PASSAGE_INDEX_TOP, keys.PASSAGE_PART)
    # one key width: the blob as sent, as stored and as the index is keyed
    found = re.search(r"local PASSAGE_FORMAT, PASSAGE_KEY = (\d+), (\d+)\n", common)
    assert found is not None
    assert tuple(map(int, found.groups())) == (fingerprints.BLOB_FORMAT, fingerprints.KEY_BYTES)
    assert f"'pL', {keys.PASSAGE_INDEX_LEVEL}, 'pS', 0, 'pN', 0)" in _script("create_collection.lua")


def test_the_cluster_scripts_know_the_last_ordinal() -> None:
    assert keys.max_ordinal(keys.ORDINAL_WIDTH) == 2**40 - 1
    assert "local last = 2 ^ 40 - 1" in _script("cluster_reserve.lua")
    # Cluster stamps of the last ordinals stay exact in a Lua double.
    assert keys.max_ordinal(keys.ORDINAL_WIDTH) * keys.STAMP_SCALE < 2**53
