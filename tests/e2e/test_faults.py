"""Faults injected into real processes on 127.0.0.1: the store SIGKILLed in the middle of a stream of
checks and restarted (503 + Retry-After while it is down, recovery without restarting the service,
nothing acknowledged lost), and a store that hangs (prompt 503s from the store timeout, no pile-up).

The store is a valkey-server the test starts itself (append-only file, ``appendfsync always``, the
default) and gives to the service through NEARDUP_REDIS_URL, so the test can kill and restart it on
the same port and data directory. Killing the *service* is covered by test_lifecycle.py (its
embedded server exits with it) and tests/storage/test_embedded.py (a leftover server on the data
directory is stopped by the next start).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from neardup.storage import EmbeddedValkey
from neardup.storage.embedded import find_free_port
from tests.e2e.conftest import Service

CHECK = "/v1/collections/default/check"


def text_of(i: int) -> str:
    """Unrelated texts: each document matches only itself."""
    return " ".join(f"w{i}x{j} v{(i * 31 + j) % 997}y{i}" for j in range(40))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    """A valkey-server on a fixed port, restartable on the same port and data directory."""
    server = EmbeddedValkey(tmp_path / "store", port=find_free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def restart(server: EmbeddedValkey) -> EmbeddedValkey:
    again = EmbeddedValkey(server.data_dir, port=server.port)
    again.start()
    return again


def test_store_killed_mid_stream_is_503_then_recovers_and_loses_nothing_acknowledged(
    tmp_path: Path, start_service: type[Service], store: EmbeddedValkey
) -> None:
    service = start_service(
        tmp_path / "svc", env={"NEARDUP_REDIS_URL": store.url, "NEARDUP_STORE_TIMEOUT": "1"}
    ).start()
    acknowledged: list[int] = []
    refused: list[httpx.Response] = []
    stop = threading.Event()

    def stream() -> None:
        with httpx.Client(base_url=service.url, timeout=10.0) as http:
            for i in range(5_000):  # bounded; the test stops it much earlier
                if stop.is_set():
                    return
                response = http.post(CHECK, json={"id": f"d{i}", "text": text_of(i)})
                if response.status_code == 200:
                    acknowledged.append(i)
                else:
                    refused.append(response)
                    time.sleep(0.05)

    def wait_for(condition: object, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not condition():  # type: ignore[operator]
            time.sleep(0.02)

    writer = threading.Thread(target=stream)
    writer.start()
    try:
        wait_for(lambda: len(acknowledged) >= 30, 20.0)
        assert len(acknowledged) >= 30, [r.text for r in refused[:3]]
        store.kill()  # SIGKILL: no shutdown, no final fsync by the server
        wait_for(lambda: len(refused) >= 3, 15.0)
        down = [r.status_code for r in refused]
        assert len(down) >= 3 and set(down) == {503}, down
        assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
        assert all(r.json()["error"] == "store_unavailable" for r in refused)
        with httpx.Client(base_url=service.url, timeout=10.0) as http:
            ready = http.get("/readyz")
            assert ready.status_code == 503 and "retry-after" in ready.headers
            assert http.get("/healthz").status_code == 200  # alive: an orchestrator must not restart it

        acked_before_restart = len(acknowledged)
        revived = restart(store)  # same port, same data directory; the service is not restarted
        try:
            wait_for(lambda: len(acknowledged) >= acked_before_restart + 30, 20.0)
            stop.set()
            writer.join(30.0)
            assert len(acknowledged) >= acked_before_restart + 30, "the service did not recover"

            with httpx.Client(base_url=service.url, timeout=10.0) as http:
                assert http.get("/readyz").status_code == 200
                for i in acknowledged:
                    got = http.get(f"/v1/collections/default/documents/d{i}")
                    assert got.status_code == 200, (i, got.text)
                for i in acknowledged[:: max(1, len(acknowledged) // 20)]:
                    query = http.post("/v1/collections/default/query", json={"text": text_of(i)})
                    assert [m["id"] for m in query.json()["matches"]] == [f"d{i}"]
        finally:
            revived.stop()
    finally:
        stop.set()
        writer.join(30.0)


def test_a_hung_store_gives_prompt_503s_not_piled_up_requests(
    tmp_path: Path, start_service: type[Service], store: EmbeddedValkey
) -> None:
    timeout = 0.5
    service = start_service(
        tmp_path / "svc", env={"NEARDUP_REDIS_URL": store.url, "NEARDUP_STORE_TIMEOUT": str(timeout)}
    ).start()
    with httpx.Client(base_url=service.url, timeout=10.0) as http:
        assert http.post(CHECK, json={"id": "before", "text": text_of(0)}).status_code == 200

    admin = redis.Redis.from_url(store.url)
    pause_ms = 4000
    try:

        def one(i: int) -> tuple[int, float, str | None]:
            started = time.monotonic()
            with httpx.Client(base_url=service.url, timeout=10.0) as http:
                response = http.post(CHECK, json={"id": f"hung{i}", "text": text_of(i)})
            return response.status_code, time.monotonic() - started, response.headers.get("retry-after")

        # The server stops answering every client for pause_ms.
        admin.execute_command("CLIENT", "PAUSE", pause_ms, "ALL")  # type: ignore[no-untyped-call]
        paused_at = time.monotonic()
        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(one, range(16)))
        answered_within = time.monotonic() - paused_at
    finally:
        admin.close()

    assert {status for status, _, _ in answers} == {503}, answers
    assert all(retry_after is not None and int(retry_after) >= 1 for _, _, retry_after in answers)
    # Each gave up after the store timeout (plus one retry), all together while the store still hung.
    slowest = max(seconds for _, seconds, _ in answers)
    assert slowest < 4 * timeout + 1.5, answers
    assert answered_within < pause_ms / 1000, answered_within

    time.sleep(max(0.0, pause_ms / 1000 - (time.monotonic() - paused_at)) + 0.2)
    with httpx.Client(base_url=service.url, timeout=10.0) as http:
        deadline = time.monotonic() + 10.0
        status = 0
        while time.monotonic() < deadline and status != 200:
            status = http.post(CHECK, json={"id": "after", "text": text_of(99)}).status_code
        assert status == 200
        assert http.get("/v1/collections/default/documents/before").status_code == 200
