"""Operations of a real ``neardup serve``: Prometheus series the index reports (signature time, store
calls, candidates), X-Request-ID, JSON access and error logs with the request id, and a graceful
shutdown that finishes a request in flight on SIGTERM."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

TEXT = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat by the door"


def metric(body: str, name: str) -> float:
    for line in body.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_metrics_of_the_index(service: Any) -> None:
    with httpx.Client(base_url=service.url) as http:
        http.post("/v1/collections", json={"name": "ops", "threshold": 0.5})
        http.post("/v1/collections/ops/check", json={"id": "a", "text": TEXT})
        http.post("/v1/collections/ops/check", json={"id": "b", "text": TEXT + " and the dog"})
        body = http.get("/metrics").text
    assert metric(body, "neardup_signatures_computed_total") >= 2
    assert metric(body, "neardup_signature_batch_duration_seconds_count") >= 2
    assert metric(body, "neardup_store_call_duration_seconds_count") >= 3
    assert metric(body, "neardup_store_errors_total") == 0
    assert metric(body, "neardup_candidates_per_document_count") >= 2
    assert metric(body, "neardup_candidates_per_document_sum") >= 1  # b found a in its buckets
    assert "neardup_candidates_rejected_total" in body


def test_request_id_is_honoured_or_made(service: Any) -> None:
    with httpx.Client(base_url=service.url) as http:
        assert (
            http.get("/healthz", headers={"X-Request-ID": "job-42.7"}).headers["x-request-id"] == "job-42.7"
        )
        made = http.get("/healthz").headers["x-request-id"]
        assert len(made) == 32 and made.isalnum()
        for insane in ("with space", "x" * 300, "-leading-dash"):
            replaced = http.get("/healthz", headers={"X-Request-ID": insane}).headers["x-request-id"]
            assert replaced != insane and len(replaced) == 32
        # errors carry it too
        assert "x-request-id" in http.get("/v1/collections/nope").headers


def json_lines(path: Path) -> Iterator[dict[str, Any]]:
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            yield json.loads(line)


def test_json_logs_and_graceful_shutdown(start_service: Any, tmp_path: Path) -> None:
    running = start_service(tmp_path / "data", "--log-format", "json", "--access-log")
    # A batch whose body is still arriving when SIGTERM comes: in flight for sure.
    documents = [{"id": f"d{i}", "text": f"{TEXT} number {i}"} for i in range(200)]
    body = json.dumps({"documents": documents}).encode()
    half = len(body) // 2
    signalled = threading.Event()

    def slow_body() -> Iterator[bytes]:
        yield body[:half]
        # Let the server parse the headers first: a connection without a request yet is idle, and
        # uvicorn rightly closes idle connections at shutdown.
        time.sleep(0.5)
        running.process.send_signal(signal.SIGTERM)
        signalled.set()
        time.sleep(0.5)  # the server is shutting down meanwhile
        yield body[half:]

    with httpx.Client(base_url=running.url, timeout=20) as http:
        response = http.post(
            "/v1/collections/default/check/batch",
            content=slow_body(),
            headers={"content-type": "application/json", "x-request-id": "in-flight-1"},
        )
    assert signalled.is_set()
    assert response.status_code == 200, response.text
    assert len(response.json()["results"]) == 200
    assert running.process.wait(15) == 0
    assert "Traceback" not in running.log()

    records = list(json_lines(running.log_path))
    access = [r for r in records if r.get("logger") == "neardup.access"]
    [batch] = [r for r in access if r.get("request_id") == "in-flight-1"]
    assert batch["status"] == 200 and batch["route"] == "/v1/collections/{name}/check/batch"
    assert batch["duration_ms"] >= 400
    assert any(r["logger"].startswith("uvicorn") for r in records)  # uvicorn's own lines are JSON too


@pytest.mark.parametrize("malloc", ["mimalloc", "libc"])
def test_embedded_valkey_with_either_malloc(start_service: Any, tmp_path: Path, malloc: str) -> None:
    running = start_service(tmp_path / "data", env={"NEARDUP_VALKEY_MALLOC": malloc})
    with httpx.Client(base_url=running.url) as http:
        first = http.post("/v1/collections/default/check", json={"id": "a", "text": TEXT}).json()
        second = http.post("/v1/collections/default/check", json={"id": "b", "text": TEXT}).json()
    assert first["duplicate"] is False and second["duplicate_of"] == "a"
    pid = running.valkey_pid()
    assert pid is not None
    assert ("libmimalloc" in Path(f"/proc/{pid}/maps").read_text()) == (malloc == "mimalloc")


def test_an_unknown_valkey_malloc_is_refused(e2e_fixtures: Any, tmp_path: Path) -> None:
    import subprocess

    env = {"NEARDUP_VALKEY_MALLOC": "tcmalloc", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [*e2e_fixtures.neardup_command(), "serve", "--data-dir", str(tmp_path / "d")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "valkey_malloc" in result.stderr
