"""Property-based fuzzing of the OpenAPI document with schemathesis against a real ``neardup serve``:
for generated valid and invalid requests to every operation, no 5xx and no answer that breaks the
documented schema (status codes, content types, headers and bodies), and invalid requests refused
with a 4xx. Bounded and seeded: the same examples every run, in well under a minute.

Not checked: that every schema-valid request is accepted (schemathesis's positive_data_acceptance).
Some limits cannot be written in JSON Schema or depend on the deployment's settings: UTF-8 byte sizes,
"printable" ids (Unicode categories), bands*rows <= num_perm, NEARDUP_MAX_QUERY_LIMIT. Those answer a
documented 422 that names the field and the limit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from neardup.main import create_app
from neardup.settings import Settings
from tests.e2e.conftest import Service

KEY = "fuzz-rw-key-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
#: Examples per operation (there are 13): a few hundred requests in all.
EXAMPLES = 40
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    unsupported_method,  # a method a path does not have: 405 with Allow
    ignored_auth,  # each protected operation is also sent without the key: it must be a 401
]


@pytest.fixture(scope="module")
def fuzzed_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = Service(
        tmp_path_factory.mktemp("fuzz") / "data",
        env=ENV,
    )
    try:
        yield running.start()
    finally:
        running.stop()
        running.reap_valkey()


ENV = {
    "NEARDUP_API_KEYS": f"rw:{KEY}",
    "NEARDUP_MAX_BODY_BYTES": "200000",
    "NEARDUP_MAX_TEXT_BYTES": "100000",
}

# The document the service will serve, from the same app factory and settings, built in-process
# (nothing is started: the lifespan never runs).
schema = schemathesis.openapi.from_dict(
    create_app(Settings(redis_url="redis://127.0.0.1:1/0", api_keys=SecretStr(f"rw:{KEY}"))).openapi()
)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_error_and_every_answer_matches_the_schema(case: Any, fuzzed_service: Service) -> None:
    case.call_and_validate(base_url=fuzzed_service.url, headers=HEADERS, checks=CHECKS, timeout=10)
