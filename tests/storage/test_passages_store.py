"""The passage layout constants: the Lua scripts hold the same numbers as keys.py."""

from __future__ import annotations

import re
from importlib import resources

from neardup.storage import keys


def test_lua_and_python_agree_on_the_passage_layout() -> None:
    common = resources.files("neardup.storage").joinpath("scripts", "_common.lua").read_text("utf-8")
    found = re.search(r"local PASSAGE_TARGET, POSTING_CAP, PASSAGE_GROUP = (\d+), (\d+), (\d+)", common)
    assert found is not None
    assert tuple(int(x) for x in found.groups()) == (
        keys.PASSAGE_GROUP_TARGET,
        keys.POSTING_CAP,
        keys.PASSAGE_GROUP,
    )


def test_lua_and_python_agree_on_passage_format_3s_layout() -> None:
    scripts = resources.files("neardup.storage").joinpath("scripts")
    common = scripts.joinpath("_common.lua").read_text("utf-8")
    found = re.search(r"local PACKED_TARGET, PACKED_LEVEL = (\d+), (\d+)", common)
    assert found is not None
    assert (int(found[1]), int(found[2])) == (keys.PACKED_GROUP_TARGET, keys.PACKED_INDEX_LEVEL)
    assert re.search(r"local PACKED_TOP = (\d+)", common)[1] == str(keys.PACKED_INDEX_TOP)  # type: ignore[index]
    assert re.search(r"local PASSAGE_PART = (\d+)", common)[1] == str(keys.PASSAGE_PART)  # type: ignore[index]
    create = scripts.joinpath("create_collection.lua").read_text("utf-8")
    assert f"'pL', {keys.PACKED_INDEX_LEVEL}, 'pS', 0, 'pN', 0, 'pf', 3" in create
