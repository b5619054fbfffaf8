"""The supervisor of the embedded server (``embedded.Supervisor``): a dead server is started again on
its port, a server that cannot start is given up on after its attempts, and stopping the supervisor
stops the server and the restarts."""

from __future__ import annotations

import os
import signal
import stat
import time
from collections.abc import Callable
from pathlib import Path

import redis

from neardup.storage.embedded import EmbeddedValkey, Supervisor, SupervisorStatus


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not condition():
        time.sleep(0.02)
    assert condition()


def test_a_killed_server_comes_back_on_its_port_with_its_data(tmp_path: Path) -> None:
    status_file = tmp_path / "status.json"
    supervisor = Supervisor(EmbeddedValkey(tmp_path / "data"), backoff=0.05, status_file=status_file)
    url = supervisor.start()
    try:
        client = redis.Redis.from_url(url)
        client.set("k", "v")
        first = supervisor.server.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: supervisor.status().restarts == 1)
        assert supervisor.server.url == url and supervisor.server.pid != first
        assert client.get("k") == b"v"  # the same client reconnects to the same address
        client.close()
        assert SupervisorStatus.read(status_file) == SupervisorStatus("running", 1, 0, "killed by SIGKILL")
    finally:
        supervisor.stop()
    assert not supervisor.server.running
    assert not status_file.exists()


def test_a_server_that_cannot_start_again_is_given_up_after_its_attempts(tmp_path: Path) -> None:
    failing = tmp_path / "valkey-server"  # named like the real one; exits at once
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(failing.stat().st_mode | stat.S_IXUSR)
    supervisor = Supervisor(EmbeddedValkey(tmp_path / "data"), attempts=3, backoff=0.05)
    supervisor.start()
    try:
        supervisor.server.binary = failing
        pid = supervisor.server.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: supervisor.status().failed)
        status = supervisor.status()
        assert status.restarts == 0 and status.failed_attempts == 3
        assert "3 restart attempt(s)" in status.message and "restart the service" in status.message
        assert not supervisor.server.running
    finally:
        supervisor.stop()


def test_stopping_the_supervisor_ends_the_restarts(tmp_path: Path) -> None:
    supervisor = Supervisor(EmbeddedValkey(tmp_path / "data"), backoff=0.05)
    supervisor.start()
    pid = supervisor.server.pid
    supervisor.stop()
    assert pid is not None
    time.sleep(0.3)  # several watch intervals: a restart would have happened by now
    assert not supervisor.server.running and supervisor.status().restarts == 0
    assert supervisor.server.pid is None
    # the data directory is free again: another owner can start on it
    again = EmbeddedValkey(tmp_path / "data")
    again.start()
    again.stop()
