"""Fixtures of the end-to-end tests: a real ``neardup serve`` (uvicorn + its embedded valkey-server) in
a subprocess on 127.0.0.1, a free port and a temporary data directory, called over real HTTP.

Every process started here is stopped here: the service by SIGTERM (SIGKILL after a timeout), and the
embedded server, found by its pidfile, is checked and killed if it outlived the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def neardup_command() -> list[str]:
    """The installed console script next to this interpreter, else the same entry point via ``-m``."""
    script = Path(sys.executable).with_name("neardup")
    return [str(script)] if script.exists() else [sys.executable, "-m", "neardup.cli"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes: it only waits for its parent to reap it.
    with contextlib.suppress(OSError):
        if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
            return False
    return True


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


class Service:
    """One ``neardup serve`` process. ``url`` is its base URL once :meth:`start` returned."""

    def __init__(self, data_dir: Path, *extra_args: str, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.extra_env = env or {}
        self.port = free_port()
        self.extra_args = extra_args
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = data_dir.parent / f"{data_dir.name}-service.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")} | self.extra_env
        command = [
            *neardup_command(),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            *self.extra_args,
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"neardup serve exited with {self.process.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return self
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"neardup serve not ready within {START_TIMEOUT} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def valkey_pid(self) -> int | None:
        try:
            return int((self.data_dir / "valkey.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Send ``sig`` and wait; SIGKILL if it does not exit in time. Returns the exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs in the service."""
        self.stop(signal.SIGKILL)

    def reap_valkey(self) -> None:
        """Safety net for the test run (not part of any assertion): kill a server left behind."""
        pid = self.valkey_pid()
        if pid is not None and alive(pid) and not wait_gone(pid, 5.0):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[type[Service]]:
    """``start_service(data_dir, *args).start()``-style factory; everything it started is stopped."""
    started: list[Service] = []

    class Tracked(Service):
        def start(self) -> Service:
            started.append(self)
            return super().start()

    yield Tracked
    # All services first: services of one test may share a data directory, hence a pidfile.
    for service in started:
        service.stop()
    for service in started:
        service.reap_valkey()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service for a whole module (starting one takes about a second)."""
    # A small body limit, so the 413 test sends 2 MB, not 64.
    running = Service(tmp_path_factory.mktemp("e2e") / "data", env={"NEARDUP_MAX_BODY_BYTES": "2000000"})
    try:
        yield running.start()
    finally:
        running.stop()
        running.reap_valkey()


@pytest.fixture
def http(service: Service) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.url, timeout=10.0) as client:
        yield client


def check_concurrently(
    urls: Sequence[str], collection: str, jobs: Sequence[tuple[str, str]], clients: int
) -> dict[str, dict[str, Any]]:
    """Every job (id, text) checked once with insert, taken from one queue by ``clients`` concurrent
    clients, client n on ``urls[n % len(urls)]``; the answers by id (each must be a 200)."""
    results: dict[str, dict[str, Any]] = {}

    async def client(n: int, queue: asyncio.Queue[tuple[str, str]]) -> None:
        async with httpx.AsyncClient(base_url=urls[n % len(urls)], timeout=30.0) as http:
            while not queue.empty():
                doc_id, text = queue.get_nowait()
                response = await http.post(
                    f"/v1/collections/{collection}/check", json={"id": doc_id, "text": text}
                )
                assert response.status_code == 200, response.text
                results[doc_id] = response.json()

    async def run() -> None:
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        for job in jobs:
            queue.put_nowait(job)
        await asyncio.gather(*(client(n, queue) for n in range(clients)))

    asyncio.run(run())
    return results


def the_original_of_each_group(results: dict[str, dict[str, Any]], groups: int, variants: int) -> list[str]:
    """Asserts first seen won in each group ``g{group}-v{variant}``: exactly one member was not a
    duplicate. Returns that member, per group."""
    originals = []
    for group in range(groups):
        members = [f"g{group}-v{variant}" for variant in range(variants)]
        new = [m for m in members if not results[m]["duplicate"]]
        assert len(new) == 1, {m: results[m] for m in members}
        originals.append(new[0])
    return originals
