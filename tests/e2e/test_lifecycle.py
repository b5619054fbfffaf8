"""The service's processes: nothing acknowledged is lost across kills and restarts, the embedded
valkey-server stops with the service (SIGTERM, SIGINT, and SIGKILL of the service: no orphan), one
embedded server serves all workers, one service per data directory, and start-up errors are one line
without a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from neardup.storage.lock import LOCKFILE
from tests.e2e.conftest import Service, alive, free_port, neardup_command, wait_gone

TEXT_A = " ".join(f"alpha{i % 97} beta{i % 13} gamma{i}" for i in range(120))
TEXT_B = " ".join(f"delta{i % 89} epsilon{i % 11} zeta{i}" for i in range(120))


def check(service: Service, doc_id: str, text: str) -> None:
    response = httpx.post(
        f"{service.url}/v1/collections/default/check", json={"id": doc_id, "text": text}, timeout=10.0
    )
    assert response.status_code == 200, response.text


def found(service: Service, doc_id: str, text: str) -> bool:
    response = httpx.post(f"{service.url}/v1/collections/default/query", json={"text": text}, timeout=10.0)
    assert response.status_code == 200, response.text
    return doc_id in [m["id"] for m in response.json()["matches"]]


def test_acknowledged_documents_survive_kills_and_no_server_is_left_orphaned(
    tmp_path: Path, start_service: type[Service]
) -> None:
    data_dir = tmp_path / "data"
    first = start_service(data_dir).start()
    check(first, "a", TEXT_A)
    valkey = first.valkey_pid()
    assert valkey is not None and alive(valkey)

    # SIGKILL of the service alone: its embedded server must notice and exit by itself.
    first.kill()
    assert wait_gone(valkey, 10.0), "the embedded valkey-server outlived its SIGKILLed service"

    second = start_service(data_dir).start()
    assert found(second, "a", TEXT_A)
    check(second, "b", TEXT_B)

    # A crash of both at once (SIGKILL, no shutdown anywhere): the append-only file still has "b".
    valkey = second.valkey_pid()
    assert valkey is not None
    second.kill()
    os.kill(valkey, signal.SIGKILL)
    assert wait_gone(valkey, 5.0)

    third = start_service(data_dir).start()
    assert found(third, "a", TEXT_A) and found(third, "b", TEXT_B)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_service_stops_its_embedded_server(
    tmp_path: Path, start_service: type[Service], sig: signal.Signals
) -> None:
    service = start_service(tmp_path / "data").start()
    valkey = service.valkey_pid()
    assert valkey is not None and alive(valkey)
    assert service.stop(sig) == 0, service.log()
    assert not alive(valkey), "the embedded valkey-server is still running after the service stopped"
    assert "Traceback" not in service.log()


def test_several_workers_share_one_embedded_server(tmp_path: Path, start_service: type[Service]) -> None:
    service = start_service(tmp_path / "data", "--workers", "2").start()
    valkey = service.valkey_pid()
    assert valkey is not None
    children = subprocess.run(
        ["ps", "-o", "pid=,comm=", "--ppid", str(service.pid)], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    servers = [line for line in children if "valkey" in line]
    assert len(servers) == 1 and int(servers[0].split()[0]) == valkey, children

    # The data directory's lock is the parent's, which started the server: no worker holds it.
    lock = data_lock(service.data_dir)
    assert lock in open_files(service.pid)
    assert (service.data_dir / LOCKFILE).read_text().startswith(f"{service.pid} neardup serve on ")
    # The other children: the two workers and multiprocessing's resource tracker.
    others = [int(line.split()[0]) for line in children if line.strip() and "valkey" not in line]
    assert len(others) >= 2, children
    assert all(lock not in open_files(pid) for pid in [*others, valkey])

    for i in range(8):  # spread over both workers; each sees the other's writes
        check(service, f"w{i}", TEXT_A)
    assert httpx.get(f"{service.url}/v1/collections/default", timeout=10.0).json()["documents"] == 8
    metrics = httpx.get(f"{service.url}/metrics", timeout=10.0).text
    line = next(m for m in metrics.splitlines() if m.startswith("neardup_documents_checked_total"))
    assert float(line.split()[-1]) == 8  # counted over every worker, not just the one that answered

    assert service.stop() == 0, service.log()
    assert not alive(valkey)


def data_lock(data_dir: Path) -> Path:
    return (data_dir / LOCKFILE).resolve()


def open_files(pid: int) -> set[Path]:
    """The files process ``pid`` has open (its own user's processes: /proc/PID/fd is readable)."""
    paths = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            paths.add(Path(os.readlink(fd)))
        except OSError:  # closed meanwhile
            continue
    return paths


def test_a_second_service_on_the_same_data_dir_exits_and_the_first_keeps_serving(
    tmp_path: Path, start_service: type[Service]
) -> None:
    data_dir = tmp_path / "data"
    first = start_service(data_dir).start()
    check(first, "a", TEXT_A)
    valkey = first.valkey_pid()
    assert valkey is not None

    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    command = [*neardup_command(), "serve", "--host", "127.0.0.1", "--port", str(free_port())]
    started = time.monotonic()
    second = subprocess.Popen(
        [*command, "--data-dir", str(data_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        out, err = second.communicate(timeout=20)
    finally:
        if second.poll() is None:  # it did not refuse: stop it (its server dies with it)
            second.kill()
            second.communicate()
    assert second.returncode != 0
    assert time.monotonic() - started < 10
    assert "Traceback" not in err.decode() and not out.strip()
    [line] = err.decode().strip().splitlines()
    assert line.startswith("neardup: error: the data directory ")
    assert f"in use by pid {first.pid} (neardup serve on {first.url})" in line, line

    # The first service and its server were not touched.
    assert first.valkey_pid() == valkey and alive(valkey)
    assert httpx.get(f"{first.url}/readyz", timeout=10.0).status_code == 200
    check(first, "b", TEXT_B)
    assert found(first, "a", TEXT_A)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    return subprocess.run(
        [*neardup_command(), *args], capture_output=True, text=True, timeout=30, env=base | (env or {})
    )


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["serve", "--port", "0"], {}, "port"),
        (["serve", "--workers", "0"], {}, "workers"),
        (["serve", "--redis-url", "http://example.org"], {}, "redis_url must start with"),
        (["serve"], {"NEARDUP_PORT": "eighty"}, "port"),
        (["serve"], {"NEARDUP_DEFAULT_THRESHOLD": "2"}, "default_threshold"),
    ],
)
def test_bad_settings_are_one_line_without_a_traceback(
    args: list[str], env: dict[str, str], words: str, tmp_path: Path
) -> None:
    result = run_cli(*args, "--data-dir", str(tmp_path / "data"), env=env)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("neardup: error: invalid settings:") and words in line


def test_a_port_in_use_fails_cleanly_and_stops_the_embedded_server(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(
            "serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(tmp_path / "d")
        )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "address already in use" in result.stderr.lower()
    pid = (
        int((tmp_path / "d" / "valkey.pid").read_text()) if (tmp_path / "d" / "valkey.pid").exists() else None
    )
    assert pid is None or not alive(pid)


def test_no_command_prints_help() -> None:
    result = run_cli()
    assert result.returncode == 2 and "serve" in result.stderr
