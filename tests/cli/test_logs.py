"""JSON log lines and the request id: an error logged while serving a request carries that request's id
(the one the client sent in X-Request-ID), in the format ``neardup serve --log-format json`` installs."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import httpx
import pytest

from neardup.logs import JsonFormatter, log_config
from neardup.main import create_app
from neardup.settings import Settings


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("neardup")
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


@pytest.mark.anyio
async def test_an_error_log_carries_the_request_id(json_log: io.StringIO) -> None:
    # Nothing listens on port 9: every store call fails, the service answers 503 and logs a warning.
    app = create_app(Settings(redis_url="redis://127.0.0.1:9/0", store_timeout=0.5))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://neardup.test") as client:
            response = await client.get("/v1/collections", headers={"X-Request-ID": "req-503"})
    assert response.status_code == 503 and response.headers["x-request-id"] == "req-503"
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    during = [line for line in lines if line.get("request_id") == "req-503"]
    # every line logged while serving it: the retry of the default collection, then the 503's warning
    assert {line["logger"] for line in during} == {"neardup", "neardup.api"}
    [warning] = [line for line in during if line["logger"] == "neardup.api"]
    assert warning["level"] == "warning"
    assert "store" in warning["message"] and warning["ts"].endswith("+00:00")


def test_exceptions_and_extra_fields_are_json() -> None:
    record = logging.LogRecord("neardup.x", logging.ERROR, __file__, 1, "failed %s", ("here",), None)
    record.status = 500
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "failed here" and entry["status"] == 500
    assert "ValueError: boom" in entry["exception"] and "request_id" not in entry


def test_log_config_formats() -> None:
    text = log_config("info", "text", access_log=True)
    assert text["loggers"]["neardup.access"]["level"] == "WARNING"  # uvicorn's access log prints instead
    as_json = log_config("info", "json", access_log=True)
    assert as_json["formatters"]["default"] == {"()": "neardup.logs.JsonFormatter"}
    assert as_json["loggers"]["neardup.access"]["level"] == "INFO"
    assert log_config("info", "json")["loggers"]["neardup.access"]["level"] == "WARNING"
