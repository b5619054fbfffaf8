"""API keys: 401 without a known key, 403 for a read-only key that writes, open health and docs,
the key format refused with a reason that never echoes a key, and the bearer scheme in OpenAPI."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from httpx import AsyncClient
from pydantic import SecretStr, ValidationError

from neardup.api.auth import ApiKeys
from neardup.settings import Settings
from tests.api.conftest import TEST_LIMITS

MakeClient = Callable[..., Awaitable[AsyncClient]]

RW = "rw-key-0123456789abcdef"
RO = "ro-key-0123456789abcdef"
C = "/v1/collections"

pytestmark = pytest.mark.anyio


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def keyed(redis_url: str, make_client: MakeClient) -> AsyncClient:
    settings = Settings(
        redis_url=redis_url, store_timeout=2.0, api_keys=SecretStr(f"rw:{RW}, ro:{RO}"), **TEST_LIMITS
    )
    return await make_client(settings)


#: Every route, with a body that would succeed, and whether it writes.
CALLS: list[tuple[str, str, dict[str, Any] | None, bool]] = [
    ("GET", C, None, False),
    ("GET", f"{C}/default", None, False),
    ("POST", f"{C}/default/query", {"text": "one two three four five"}, False),
    ("POST", f"{C}/default/check", {"id": "r", "text": "one two", "insert": False}, False),
    ("POST", f"{C}/default/check/batch", {"documents": [{"id": "r", "text": "t"}], "insert": False}, False),
    ("GET", f"{C}/default/documents/seed", None, False),
    ("GET", "/metrics", None, False),
    ("POST", f"{C}/default/check", {"id": "w", "text": "one two"}, True),
    ("POST", f"{C}/default/check/batch", {"documents": [{"id": "w", "text": "t"}]}, True),
    ("PUT", f"{C}/default/documents/w2", {"text": "t"}, True),
    ("DELETE", f"{C}/default/documents/seed", None, True),
    ("POST", C, {"name": "made"}, True),
    ("DELETE", f"{C}/made", None, True),
]


async def test_without_a_key_every_endpoint_but_health_and_docs_is_401(keyed: AsyncClient) -> None:
    for method, path, body, _ in CALLS:
        for headers in ({}, bearer("not-a-configured-key-at-all"), {"Authorization": RW}, bearer("")):
            response = await keyed.request(method, path, json=body, headers=headers)
            assert response.status_code == 401, (method, path, headers, response.text)
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert response.json()["error"] == "unauthorized"
            assert "Bearer" in response.json()["message"]
    for path in ("/healthz", "/readyz", "/openapi.json", "/docs", "/", "/web/app.js"):
        assert (await keyed.get(path)).status_code == 200, path
    for sneaky in ("/web/%2E%2E/v1/collections", "/web/a/b.js", "/web/..js"):
        assert (await keyed.get(sneaky)).status_code == 401, sneaky


async def test_a_bad_body_without_a_key_is_still_401(keyed: AsyncClient) -> None:
    response = await keyed.post(
        f"{C}/default/check", content=b"{oops", headers={"content-type": "application/json"}
    )
    assert response.status_code == 401


async def test_read_write_key_does_everything_read_only_key_only_reads(keyed: AsyncClient) -> None:
    put = await keyed.put(f"{C}/default/documents/seed", json={"text": "seed text"}, headers=bearer(RW))
    assert put.status_code == 200
    for method, path, body, writes in CALLS:
        response = await keyed.request(method, path, json=body, headers=bearer(RO))
        if writes:
            assert response.status_code == 403, (method, path, response.text)
            assert response.json()["error"] == "forbidden"
            assert "read-only" in response.json()["message"]
        else:
            assert response.status_code == 200, (method, path, response.text)
    # Nothing the read-only key tried was stored or deleted.
    assert (await keyed.get(f"{C}/default/documents/seed", headers=bearer(RO))).status_code == 200
    assert (await keyed.get(f"{C}/default/documents/w2", headers=bearer(RO))).status_code == 404
    assert (await keyed.get(f"{C}/default", headers=bearer(RO))).json()["documents"] == 1

    for method, path, body, _ in CALLS:
        response = await keyed.request(method, path, json=body, headers=bearer(RW))
        assert response.status_code in (200, 201, 204), (method, path, response.text)


async def test_a_read_only_key_writing_with_a_bad_body_gets_403_first(keyed: AsyncClient) -> None:
    response = await keyed.put(
        f"{C}/default/documents/x",
        content=b"{oops",
        headers={**bearer(RO), "content-type": "application/json"},
    )
    assert response.status_code == 403


async def test_scheme_is_case_insensitive_and_unauthenticated_calls_are_counted(keyed: AsyncClient) -> None:
    assert (await keyed.get(C, headers={"Authorization": f"bearer {RO}"})).status_code == 200
    await keyed.get(C)
    metrics = (await keyed.get("/metrics", headers=bearer(RO))).text
    assert 'status="401"' in metrics


async def test_without_keys_configured_anyone_reads_and_writes(client: AsyncClient) -> None:
    assert (await client.post(C, json={"name": "open"})).status_code == 201
    assert (await client.get(C, headers=bearer("whatever-key-anyone-sends"))).status_code == 200


async def test_openapi_declares_the_bearer_scheme_on_protected_routes(keyed: AsyncClient) -> None:
    schema = (await keyed.get("/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    check = schema["paths"]["/v1/collections/{name}/check"]["post"]
    assert check["security"] == [{"bearer": []}]
    assert check["x-neardup-access"] == "write if insert"
    assert {"401", "403", "404", "413", "422", "503"} <= set(check["responses"])
    assert "security" not in schema["paths"]["/healthz"]["get"]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("KEY0123456789abcdef", "must be 'rw:KEY'"),
        ("admin:KEY0123456789abcdef", "must be 'rw:KEY'"),
        ("rw:short", "at least 16"),
        ("rw:has space in the key 123", "visible ASCII"),
        ("rw:same-key-0123456789,ro:same-key-0123456789", "twice"),
    ],
)
def test_malformed_keys_are_refused_without_echoing_them(spec: str, words: str) -> None:
    with pytest.raises(ValidationError) as error:
        Settings(api_keys=SecretStr(spec))
    assert words in str(error.value)
    assert "0123456789" not in str(error.value) and "short" not in str(error.value).split("at least")[0]


def test_keys_parse_and_compare() -> None:
    keys = ApiKeys.parse(f" rw:{RW} ,, ro:{RO} ,")
    assert keys.access_of(RW) == "rw" and keys.access_of(RO) == "ro"
    assert keys.access_of(RW[:-1]) is None and keys.access_of("") is None
    assert not ApiKeys.parse(" , ")
    assert Settings(api_keys=SecretStr(" ")).api_keys is None
    assert RW not in repr(Settings(api_keys=SecretStr(f"rw:{RW}")))
