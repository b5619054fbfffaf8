"""``start_service`` for CLI tests that need services of their own (``service``, one per module, is in
tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


@pytest.fixture
def start_service(e2e_fixtures: ModuleType) -> Iterator[Any]:
    """``start_service(data_dir, *serve_args, env=...)``: a started service, stopped after the test."""
    started: list[Any] = []
    cls = e2e_fixtures.Service

    def start(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> Any:
        running = cls(data_dir, *args, env=env)
        started.append(running)
        return running.start()

    yield start
    for running in started:
        running.stop()
    for running in started:
        running.reap_valkey()
