"""A real ``neardup serve`` for the browser test, started the way the end-to-end tests start theirs."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest


def e2e_fixtures() -> ModuleType:
    """tests/e2e/conftest.py as a module (its Service class), loaded once per session."""
    name = "neardup_e2e_fixtures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "e2e" / "conftest.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    running = e2e_fixtures().Service(tmp_path_factory.mktemp("web") / "data")
    try:
        yield running.start()
    finally:
        running.stop()
        running.reap_valkey()
