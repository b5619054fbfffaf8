"""The embedded Valkey of a real ``neardup serve`` is supervised: SIGKILLed (as the OOM killer or a crash
would), it is started again on the same port and data directory, checks answer again without a restart
of the service, nothing acknowledged is lost and ``/metrics`` counts the restarts; when it cannot be
started again (its data directory is gone), ``/healthz`` answers 503 so that an orchestrator restarts
the service."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import httpx

from tests.e2e.conftest import Service, alive, wait_gone

CHECK = "/v1/collections/default/check"
#: How long the service may take to answer checks again after its server was killed (it restarts at
#: once; the rest is the server's start and a loaded machine).
RECOVERY_SECONDS = 30.0


def text_of(i: int) -> str:
    return " ".join(f"w{i}x{j} v{(i * 31 + j) % 997}y{i}" for j in range(40))


def metric(http: httpx.Client, name: str) -> float | None:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def new_server(service: Service, old: int, timeout: float) -> int:
    """The pid of the server that replaced ``old``, once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = service.valkey_pid()
        if pid is not None and pid != old and alive(pid):
            return pid
        time.sleep(0.05)
    raise AssertionError(f"no new valkey-server within {timeout} s:\n{service.log()}")


def test_a_killed_store_is_restarted_twice_and_loses_nothing_acknowledged(
    tmp_path: Path, start_service: type[Service]
) -> None:
    service = start_service(tmp_path / "data", env={"NEARDUP_STORE_RESTART_BACKOFF": "0.2"}).start()
    acknowledged: list[int] = []
    with httpx.Client(base_url=service.url, timeout=10.0) as http:
        assert metric(http, "neardup_store_restarts_total") == 0
        i = 0
        for kill in range(2):
            for _ in range(20):
                assert http.post(CHECK, json={"id": f"d{i}", "text": text_of(i)}).status_code == 200
                acknowledged.append(i)
                i += 1
            pid = service.valkey_pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            assert wait_gone(pid, 10.0)
            killed_at = time.monotonic()
            new_server(service, pid, RECOVERY_SECONDS)
            # Checks answer again by themselves (503 with Retry-After until then), within the bound.
            status = 0
            while time.monotonic() - killed_at < RECOVERY_SECONDS:
                response = http.post(CHECK, json={"id": f"d{i}", "text": text_of(i)})
                status = response.status_code
                if status == 200:
                    acknowledged.append(i)
                    i += 1
                    break
                assert status == 503 and int(response.headers["retry-after"]) >= 1, response.text
                time.sleep(0.05)
            assert status == 200, f"kill {kill + 1}: checks did not answer again:\n{service.log()}"
            assert http.get("/readyz").status_code == 200
            assert http.get("/healthz").status_code == 200
        assert metric(http, "neardup_store_restarts_total") == 2
        assert metric(http, "neardup_store_supervisor_failed") == 0
        for n in acknowledged:
            got = http.get(f"/v1/collections/default/documents/d{n}")
            assert got.status_code == 200, (n, got.text)
        for n in acknowledged[::7]:
            query = http.post("/v1/collections/default/query", json={"text": text_of(n)})
            assert [m["id"] for m in query.json()["matches"]] == [f"d{n}"]
    assert "starting it again" in service.log()


def test_a_store_whose_data_directory_is_gone_is_not_restarted_and_healthz_says_so(
    tmp_path: Path, start_service: type[Service]
) -> None:
    data_dir = tmp_path / "data"
    service = start_service(data_dir, env={"NEARDUP_STORE_RESTART_BACKOFF": "0.1"}).start()
    with httpx.Client(base_url=service.url, timeout=10.0) as http:
        assert http.post(CHECK, json={"id": "a", "text": text_of(1)}).status_code == 200
        pid = service.valkey_pid()
        assert pid is not None
        shutil.rmtree(data_dir)  # the volume lost; an empty store in its place would answer "no documents"
        os.kill(pid, signal.SIGKILL)
        assert wait_gone(pid, 10.0)
        deadline = time.monotonic() + RECOVERY_SECONDS
        health = http.get("/healthz")
        while health.status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
            health = http.get("/healthz")
        assert health.status_code == 503, service.log()
        assert health.json()["error"] == "store_failed"
        assert "is gone" in health.json()["message"]
        assert http.get("/readyz").status_code == 503
        check = http.post(CHECK, json={"id": "b", "text": text_of(2)})
        assert check.status_code == 503 and "retry-after" in check.headers
        assert metric(http, "neardup_store_supervisor_failed") == 1
        assert not data_dir.exists()  # not made again


def test_every_worker_reads_the_supervisor_of_the_one_server(
    tmp_path: Path, start_service: type[Service]
) -> None:
    # The server and its supervisor live in the parent process; each worker reads the supervisor's
    # status file for /healthz and /metrics.
    service = start_service(tmp_path / "data", "--workers", "2").start()
    with httpx.Client(base_url=service.url, timeout=10.0) as http:
        pid = service.valkey_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert wait_gone(pid, 10.0)
        new_server(service, pid, RECOVERY_SECONDS)
        deadline = time.monotonic() + RECOVERY_SECONDS
        while http.post(CHECK, json={"id": "after", "text": text_of(5)}).status_code != 200:
            assert time.monotonic() < deadline, service.log()
            time.sleep(0.05)
    # a new connection each time, so that both workers answer: every answer carries the one count
    counts = set()
    for _ in range(8):
        with httpx.Client(base_url=service.url, timeout=10.0) as fresh:
            counts.add(metric(fresh, "neardup_store_restarts_total"))
            assert fresh.get("/healthz").status_code == 200
    assert counts == {1.0}
