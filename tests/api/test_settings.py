"""The one Settings class: NEARDUP_* environment variables, defaults, and refusals with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from neardup.settings import Settings


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NEARDUP_REDIS_URL", "NEARDUP_PORT", "NEARDUP_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert settings.redis_url is None and settings.embedded
    assert (settings.host, settings.port, settings.workers) == ("127.0.0.1", 8000, 1)
    assert (settings.default_threshold, settings.default_num_perm) == (0.8, 128)
    assert (settings.default_shingle, settings.default_size) == ("word", 5)


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NEARDUP_REDIS_URL", "unix:///run/redis.sock")
    monkeypatch.setenv("NEARDUP_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("NEARDUP_DEFAULT_SHINGLE", "char")
    monkeypatch.setenv("NEARDUP_MAX_BATCH_DOCUMENTS", "5")
    settings = Settings()
    assert settings.redis_url == "unix:///run/redis.sock" and not settings.embedded
    assert settings.data_dir == tmp_path
    assert settings.default_shingle == "char" and settings.max_batch_documents == 5


def test_a_blank_redis_url_means_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEARDUP_REDIS_URL", "  ")
    assert Settings().embedded


@pytest.mark.parametrize(
    "values",
    [
        {"redis_url": "http://localhost:6379"},
        {"redis_url": "localhost:6379"},
        {"port": 0},
        {"workers": 0},
        {"default_threshold": 1.0},
        {"default_num_perm": 8},
        {"default_shingle": "sentence"},
        {"store_timeout": 0},
        {"max_text_bytes": 10_000_000, "max_body_bytes": 1_000_000},
    ],
)
def test_bad_values_are_refused(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(**values)  # type: ignore[arg-type]
