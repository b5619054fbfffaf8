"""Whatever a client sends, it gets a 4xx with a message, never a 500 or a trace; a store that is down
is a 503 with Retry-After, and the service recovers by itself when the store is back."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from httpx import AsyncClient

from neardup.main import create_app
from neardup.settings import Settings
from neardup.storage import EmbeddedValkey, RedisStore

MakeClient = Callable[..., Awaitable[AsyncClient]]
CHECK = "/v1/collections/default/check"
JSON = {"content-type": "application/json"}

pytestmark = pytest.mark.anyio


def assert_error(response: Any, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) >= {"error", "message"}, body
    assert "Traceback" not in response.text
    for word in words:
        assert word in body["message"], (word, body["message"])


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b'{"id": "a", "text": "t"',
        b"",
        b"null",
        b"[]",
        b'"text"',
        b'{"id": "a", "text": "\\ud800"}',  # a lone surrogate cannot become UTF-8
        b'{"id": "a", "text": "t", "metadata": {"n": NaN}}',
        b"[" * 5000 + b"]" * 5000,
        b"\xff\xfe garbage",
    ],
)
async def test_malformed_bodies_are_4xx(client: AsyncClient, raw: bytes) -> None:
    response = await client.post(CHECK, content=raw, headers=JSON)
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["message"]


DEEP_ARRAYS = b"[" * 1000 + b"]" * 1000  # inside orjson's 1,024 levels: it parses
DEEP_OBJECTS = b'{"a":' * 1000 + b"1" + b"}" * 1000
TOO_DEEP = b"[" * 1100 + b"]" * 1100  # past orjson's limit: not JSON it reads


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/collections", {"name": "n", "threshold": 0.5}),
        ("POST", CHECK, {"id": "a", "text": "t", "metadata": {"k": 1}, "insert": True, "min_similarity": 1}),
        ("POST", f"{CHECK}/batch", {"documents": [{"id": "a", "text": "t", "metadata": {"k": 1}}]}),
        ("POST", "/v1/collections/default/query", {"text": "t", "limit": 3}),
        ("PUT", "/v1/collections/default/documents/a", {"text": "t", "metadata": {"k": 1}}),
    ],
    ids=["create", "check", "batch", "query", "put"],
)
async def test_deeply_nested_bodies_are_4xx_whole_or_in_any_field(
    client: AsyncClient, method: str, path: str, body: dict[str, Any]
) -> None:
    bodies = [DEEP_ARRAYS, DEEP_OBJECTS, TOO_DEEP]
    for field in body:
        for deep in (DEEP_ARRAYS, DEEP_OBJECTS):
            bodies.append(orjson.dumps({**body, field: "DEEP"}).replace(b'"DEEP"', deep))
    if "documents" in body:  # a deep document, and a deep field of a document
        [doc] = body["documents"]
        bodies.append(b'{"documents": [' + DEEP_ARRAYS + b"]}")
        for field in doc:
            for deep in (DEEP_ARRAYS, DEEP_OBJECTS):
                deep_field = orjson.dumps({"documents": [{**doc, field: "DEEP"}]})
                bodies.append(deep_field.replace(b'"DEEP"', deep))
    for raw in bodies:
        response = await client.request(method, path, content=raw, headers=JSON)
        assert 400 <= response.status_code < 500, (raw[:40], response.text)
        assert response.json()["message"]


async def test_huge_numbers_in_metadata_are_not_a_server_error(client: AsyncClient) -> None:
    raw = b'{"id": "a", "text": "t", "metadata": {"n": 123456789012345678901234567890, "m": -1e400}}'
    assert (await client.post(CHECK, content=raw, headers=JSON)).status_code < 500


async def test_a_huge_number_in_a_refused_field_is_echoed_as_text_not_a_server_error(
    client: AsyncClient,
) -> None:
    raw = b'{"name": "big", "max_documents": 1022627160075585576302018560, "rows": -5}'
    response = await client.post("/v1/collections", content=raw, headers=JSON)
    assert response.status_code == 422, response.text
    inputs = {tuple(d["loc"]): d.get("input") for d in response.json()["detail"]}
    assert inputs[("body", "max_documents")] == "1022627160075585576302018560"
    assert inputs[("body", "rows")] == -5


async def test_invalid_json_says_where(client: AsyncClient) -> None:
    assert_error(await client.post(CHECK, content=b'{"id": "a",, }', headers=JSON), 422, "not valid JSON")


async def test_a_body_that_is_not_json_says_to_send_json(client: AsyncClient) -> None:
    response = await client.post(CHECK, content=b"id=a&text=t", headers={"content-type": "text/plain"})
    assert_error(response, 422, "Content-Type: application/json")


async def test_wrong_types_and_missing_fields_name_the_field(client: AsyncClient) -> None:
    assert_error(await client.post(CHECK, json={"id": 5, "text": "t"}), 422, "body.id")
    assert_error(await client.post(CHECK, json={"id": "a"}), 422, "body.text")
    assert_error(
        await client.post(CHECK, json={"id": "a", "text": "t", "insert": "maybe"}), 422, "body.insert"
    )
    assert_error(
        await client.post(CHECK, json={"id": "a", "text": "t", "metadata": "m"}), 422, "body.metadata"
    )
    assert_error(await client.post(CHECK, json={"id": "a", "text": "t", "extra": 1}), 422, "body.extra")


async def test_empty_unprintable_and_long_ids_are_422(client: AsyncClient) -> None:
    assert_error(await client.post(CHECK, json={"id": "", "text": "t"}), 422, "body.id")
    for bad in ("a\nb", "a\x00b", "tab\there", "\u2028"):
        assert_error(await client.post(CHECK, json={"id": bad, "text": "t"}), 422, "control characters")
    assert_error(await client.post(CHECK, json={"id": "x" * 101, "text": "t"}), 422, "at most 100")
    assert (await client.post(CHECK, json={"id": "x" * 100, "text": "t"})).status_code == 200


async def test_oversized_text_and_metadata_are_422_with_the_limit(client: AsyncClient) -> None:
    assert_error(await client.post(CHECK, json={"id": "a", "text": "x" * 20_001}), 422, "at most 20000")
    # 7,000 three-byte characters: under the limit in characters, over it in UTF-8 bytes.
    assert_error(await client.post(CHECK, json={"id": "a", "text": "文" * 7_000}), 422, "at most 20000")
    assert (await client.post(CHECK, json={"id": "a", "text": "x" * 20_000})).status_code == 200
    response = await client.post(CHECK, json={"id": "a", "text": "t", "metadata": {"k": "v" * 300}})
    assert_error(response, 422, "metadata", "at most 200")


async def test_oversized_bodies_are_413(client: AsyncClient) -> None:
    response = await client.post(
        CHECK, content=b'{"id": "a", "text": "' + b"x" * 300_000 + b'"}', headers=JSON
    )
    assert_error(response, 413, "200000 bytes", "NEARDUP_MAX_BODY_BYTES")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit is enforced while reading
        yield b'{"id": "a", "text": "'
        for _ in range(30):
            yield b"x" * 10_000
        yield b'"}'

    assert_error(await client.post(CHECK, content=chunks(), headers=JSON), 413, "200000 bytes")


async def test_unknown_routes_and_methods(client: AsyncClient) -> None:
    assert_error(await client.get("/v2/anything"), 404, "no such endpoint")
    assert_error(await client.put("/v1/collections"), 405, "not allowed")
    assert_error(await client.get(CHECK), 405, "not allowed")
    assert (await client.request("BREW", "/v1/collections")).status_code in (400, 405)


async def test_unexpected_errors_are_a_json_500_without_a_trace(
    settings: Settings, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(settings)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret internals")

    client = await make_client(app=app)
    with caplog.at_level(logging.ERROR):
        response = await client.get("/boom")
    assert_error(response, 500, "internal error", "logged")
    assert "secret" not in response.text and "RuntimeError" not in response.text
    assert "secret internals" in caplog.text  # the trace went to the server's log


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_store_unreachable_is_503_with_retry_after(make_client: MakeClient) -> None:
    client = await make_client(Settings(redis_url=f"redis://127.0.0.1:{closed_port()}/0", store_timeout=1.0))
    assert (await client.get("/healthz")).status_code == 200  # alive, just not ready
    for method, path, body in (
        ("GET", "/readyz", None),
        ("GET", "/v1/collections", None),
        ("POST", "/v1/collections", {"name": "x"}),
        ("POST", CHECK, {"id": "a", "text": "t"}),
        ("POST", "/v1/collections/default/query", {"text": "t"}),
        ("GET", "/v1/collections/default/documents/a", None),
    ):
        response = await client.request(method, path, json=body)
        assert_error(response, 503)
        assert int(response.headers["retry-after"]) >= 1


async def test_the_service_recovers_when_the_store_comes_back(
    tmp_path: Path, make_client: MakeClient
) -> None:
    server = EmbeddedValkey(tmp_path / "valkey")
    url = server.start()
    try:
        client = await make_client(Settings(redis_url=url, store_timeout=1.0))
        assert (
            await client.post(CHECK, json={"id": "a", "text": "one two three four five six"})
        ).status_code == 200
        server.stop()
        assert_error(await client.get("/readyz"), 503)
        assert_error(await client.post(CHECK, json={"id": "b", "text": "t"}), 503)
        server = EmbeddedValkey(tmp_path / "valkey", port=server.port)
        server.start()
        assert (await client.get("/readyz")).status_code == 200
        assert (await client.get("/v1/collections/default/documents/a")).status_code == 200
    finally:
        server.stop()


async def test_the_default_collection_appears_once_the_store_is_reachable(
    tmp_path: Path, make_client: MakeClient
) -> None:
    port = closed_port()
    client = await make_client(Settings(redis_url=f"redis://127.0.0.1:{port}/0", store_timeout=1.0))
    assert (await client.get("/readyz")).status_code == 503
    with EmbeddedValkey(tmp_path / "valkey", port=port):
        assert (await client.get("/readyz")).status_code == 200
        assert (await client.get("/v1/collections/default")).status_code == 200


# --- a store that fails at the moment a given store call is made ------------------------------------

UNCHANGED_TEXT = " ".join(f"word{i} other{i % 7}" for i in range(60))


def stop_server_at(monkeypatch: pytest.MonkeyPatch, method: str, server: EmbeddedValkey) -> list[str]:
    """The real server is stopped right before ``RedisStore.<method>`` runs: that call, and every later
    one, meets a store that is gone. Returns the list the calls are recorded in."""
    real = getattr(RedisStore, method)
    calls: list[str] = []

    async def stopping(self: RedisStore, *args: Any, **kwargs: Any) -> Any:
        calls.append(method)
        server.stop()
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(RedisStore, method, stopping)
    return calls


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    """A server of this test alone, on a fixed port: stopped and started again by the test."""
    server = EmbeddedValkey(tmp_path / "valkey", port=closed_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def metric(client: AsyncClient, name: str) -> float:
    metrics = (await client.get("/metrics")).text
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(name))


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", CHECK, {"id": "a", "text": UNCHANGED_TEXT, "metadata": {"k": 1}}),
        (
            "POST",
            f"{CHECK}/batch",  # with a new document, which fails with it: they share one store call
            {
                "documents": [
                    {"id": "a", "text": UNCHANGED_TEXT, "metadata": {"k": 1}},
                    {"id": "new", "text": "another text entirely, about something else"},
                ]
            },
        ),
        ("PUT", "/v1/collections/default/documents/a", {"text": UNCHANGED_TEXT, "metadata": {"k": 1}}),
    ],
    ids=["check", "batch", "put"],
)
async def test_a_store_failure_while_looking_up_an_unchanged_copy_is_503(
    own_server: EmbeddedValkey,
    make_client: MakeClient,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    path: str,
    body: dict[str, Any],
) -> None:
    client = await make_client(Settings(redis_url=own_server.url, store_timeout=1.0))
    stored = {"id": "a", "text": UNCHANGED_TEXT, "metadata": {"k": 1}}
    assert (await client.post(CHECK, json=stored)).status_code == 200
    calls = stop_server_at(monkeypatch, "lookup", own_server)
    # Sent again unchanged: the store answers "replace", and the stored copy is looked up to compare.
    response = await client.request(method, path, json=body)
    assert calls == ["lookup"]
    assert_error(response, 503, "store")
    assert int(response.headers["retry-after"]) >= 1
    monkeypatch.undo()
    own_server.start()  # the same port: the service reconnects by itself
    assert (await client.request(method, path, json=body)).status_code == 200


async def test_a_store_failure_while_reclaiming_after_a_write_keeps_the_write_acknowledged(
    own_server: EmbeddedValkey, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await make_client(Settings(redis_url=own_server.url, store_timeout=1.0))
    created = await client.post("/v1/collections", json={"name": "ttl", "ttl_seconds": 3600})
    assert created.status_code == 201
    errors_before = await metric(client, "neardup_store_errors_total")
    calls = stop_server_at(monkeypatch, "due", own_server)
    response = await client.post("/v1/collections/ttl/check", json={"id": "a", "text": UNCHANGED_TEXT})
    assert calls == ["due"]  # reclaiming runs after the write, and met a store that was gone
    assert response.status_code == 200, response.text
    assert response.json()["inserted"] is True
    # The failed call went through the store guard: counted like every failed store call.
    assert await metric(client, "neardup_store_errors_total") == errors_before + 1
    monkeypatch.undo()
    own_server.start()
    assert (await client.get("/v1/collections/ttl/documents/a")).status_code == 200
