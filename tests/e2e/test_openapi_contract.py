"""The OpenAPI document is the exact contract: schemathesis's command line, with every one of its checks
(``--checks all``: valid requests accepted, invalid ones refused with a 4xx, no 5xx, answers, status
codes, headers and content types as documented, ``Allow`` on 405s, auth not ignored, a created resource
found and a deleted one gone) and all four phases (examples, coverage, fuzzing and the stateful phase,
which follows the document's links), against a real ``neardup serve`` with API keys and small limits.
Bounded and seeded: about a thousand requests, the same every run, in seconds.

The only requests not sent are those that break a rule the document states in words JSON Schema has
none for (UTF-8 byte sizes, bands * rows <= num_perm: see contract_hooks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Service
from tests.e2e.contract_hooks import breaks_stated_limits

KEY = "contract-rw-key-0123456789abcdef"
HERE = Path(__file__).resolve().parent
ENV = {
    "NEARDUP_API_KEYS": f"rw:{KEY}",
    "NEARDUP_MAX_BODY_BYTES": "200000",
    "NEARDUP_MAX_TEXT_BYTES": "100000",
    "NEARDUP_MAX_ID_LENGTH": "64",
    "NEARDUP_MAX_METADATA_BYTES": "512",
    "NEARDUP_MAX_BATCH_DOCUMENTS": "50",
    "NEARDUP_MAX_QUERY_LIMIT": "100",
}
#: Examples per operation and phase (16 operations).
EXAMPLES = 40


@pytest.fixture(scope="module")
def contract_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = Service(tmp_path_factory.mktemp("contract") / "data", env=ENV)
    try:
        yield running.start()
    finally:
        running.stop()
        running.reap_valkey()


def schemathesis_run(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEMATHESIS_")}
    env |= {"SCHEMATHESIS_HOOKS": "contract_hooks", "PYTHONPATH": str(HERE), "NO_COLOR": "1"}
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{service.url}/openapi.json",
        "--checks",
        "all",
        "--header",
        f"Authorization: Bearer {KEY}",
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        "1",
        "--no-color",
        *args,
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_schemathesis_with_every_check_and_phase_reports_nothing(contract_service: Service) -> None:
    done = schemathesis_run(contract_service)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-12000:]
    # It did test: every operation, every phase, and the stateful phase followed links.
    assert "Tested: 16" in report, report[-3000:]
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in report, report[-3000:]
    assert "No issues found" in report or " passed" in report, report[-3000:]


def test_the_document_states_the_running_service_limits(contract_service: Service) -> None:
    schema: dict[str, Any] = httpx.get(f"{contract_service.url}/openapi.json").json()
    components = schema["components"]["schemas"]
    doc_id = components["CheckRequest"]["properties"]["id"]
    assert (doc_id["maxLength"], doc_id["x-maxUtf8Bytes"], doc_id["minLength"]) == (64, 64, 1)
    for name in ("CheckRequest", "BatchDocument", "DocumentPut"):
        assert components[name]["properties"]["metadata"]["x-maxJsonBytes"] == 512
        assert components[name]["properties"]["metadata"]["x-maxDepth"] == 32
    assert components["QueryRequest"]["properties"]["text"]["maxLength"] == 100_000
    assert components["BatchCheckRequest"]["properties"]["documents"]["maxItems"] == 50
    assert components["QueryRequest"]["properties"]["limit"]["maximum"] == 100
    assert components["CheckRequest"]["properties"]["insert"]["type"] == "boolean"
    put = schema["paths"]["/v1/collections/{name}/documents/{doc_id}"]["put"]
    [path_id] = [p for p in put["parameters"] if p["name"] == "doc_id"]
    assert path_id["schema"]["pattern"] == doc_id["pattern"]
    assert put["requestBody"]["x-maxBytes"] == 200_000
    created = schema["paths"]["/v1/collections"]["post"]["responses"]["201"]
    assert "CheckInCollection" in created["links"]


def test_the_hooks_read_the_stated_depth_limit_as_the_service_applies_it(contract_service: Service) -> None:
    schema: dict[str, Any] = httpx.get(f"{contract_service.url}/openapi.json").json()
    check = schema["components"]["schemas"]["CheckRequest"]
    with httpx.Client(base_url=contract_service.url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        for levels in (31, 32, 33):
            metadata: Any = 1
            for _ in range(levels - 1):
                metadata = [metadata]
            body = {"id": "deep", "text": "x", "metadata": {"a": metadata}}
            refused = http.post("/v1/collections/default/check", json=body).status_code == 422
            assert breaks_stated_limits(schema, check, body) == refused == (levels > 32), levels


def test_strict_types_and_allow_headers(contract_service: Service) -> None:
    with httpx.Client(base_url=contract_service.url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        assert http.post("/v1/collections", json={"name": "strict"}).status_code in (200, 201)
        check = "/v1/collections/strict/check"
        assert http.post(check, json={"id": "a", "text": "x", "insert": 0}).status_code == 422
        assert http.post(check, json={"id": "a", "text": "x", "insert": "true"}).status_code == 422
        assert http.post(check, json={"id": "a\tb", "text": "x"}).status_code == 422
        assert http.post(check, json={"id": "a\u0085b", "text": "x"}).status_code == 422  # C1 control
        # What the pattern allows is accepted: a no-break space or a soft hyphen is not a control.
        assert http.post(check, json={"id": "a\u00a0b\u00ad", "text": "x"}).status_code == 200
        create = {"name": "strict2", "num_perm": 64.0, "size": 3}
        assert http.post("/v1/collections", json=create).status_code == 201  # 64.0 is a JSON integer
        assert http.post("/v1/collections", json={"name": "s3", "size": "3"}).status_code == 422
        assert http.post("/v1/collections", json={"name": "s3", "size": True}).status_code == 422
        assert http.post("/v1/collections", json={"name": "s3", "threshold": "0.5"}).status_code == 422
        for path, allowed in (
            ("/v1/collections", "GET, POST"),
            ("/v1/collections/strict", "DELETE, GET"),
            ("/v1/collections/strict/documents/a", "DELETE, GET, PUT"),
            ("/v1/collections/strict/check", "POST"),
        ):
            answer = http.request("PATCH", path)
            assert answer.status_code == 405 and answer.headers["allow"] == allowed, (path, answer.headers)
