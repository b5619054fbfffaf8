"""Limits and key isolation: whatever id or collection name a client sends (braces, colons, globs,
line breaks, dot segments, any Unicode, very long), it is refused with a 422 or stored and read back
exactly, and it never touches another collection's data. Plus the edges of every size limit."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson
import pytest
import redis
from httpx import AsyncClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.anyio

SENTINEL = "sentinel"
C = "/v1/collections"
SENTINEL_TEXT = "the sentinel collection holds this text about lighthouses and keepers and storms at sea"

#: Characters that mean something to Redis key names, glob patterns, paths, logs or JSON.
TRICKY = "{}:*?[]/\\.. \n\r\t\x00\x7f\u2028\u200b\ufeff%#&=+'\"文書🎉é"
ids = st.one_of(
    st.text(alphabet=TRICKY + "ab", min_size=0, max_size=12),
    st.text(max_size=40),
    st.sampled_from(["..", ".", "../default", "*", "{default}", "nd:collections", "a:b:c", "x" * 100]),
    st.text(alphabet="x{:}", min_size=95, max_size=130),
)
names = st.one_of(
    st.text(alphabet=TRICKY + "abAB09_-", min_size=0, max_size=12),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,70}", fullmatch=True),
    st.sampled_from(["..", ".", "default", SENTINEL, "collections", "nd", "a..b", "x" * 64, "x" * 65]),
)


def encode(segment: str) -> str:
    """A path segment as a client must send it: everything escaped, dots too (no dot segments)."""
    return quote(segment, safe="").replace(".", "%2E")


async def sentinel_state(client: AsyncClient, sync_redis: redis.Redis) -> Any:
    """What another collection's data looks like, through the API and in the store."""
    info = (await client.get(f"{C}/{SENTINEL}")).json()
    doc = (await client.get(f"{C}/{SENTINEL}/documents/s1")).json()
    matches = (await client.post(f"{C}/{SENTINEL}/query", json={"text": SENTINEL_TEXT})).json()
    keys = sorted(key for key in sync_redis.scan_iter(count=1000) if SENTINEL.encode() in key)
    dumps = [(key, sync_redis.dump(key)) for key in keys]
    return info, doc, matches, dumps


@pytest.fixture
async def with_sentinel(client: AsyncClient) -> AsyncClient:
    assert (await client.post(C, json={"name": SENTINEL})).status_code == 201
    put = await client.put(
        f"{C}/{SENTINEL}/documents/s1", json={"text": SENTINEL_TEXT, "metadata": {"keep": True}}
    )
    assert put.status_code == 200
    return client


@given(doc_id=ids)
@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
async def test_any_id_is_refused_or_round_trips_exactly_within_its_collection(
    with_sentinel: AsyncClient, sync_redis: redis.Redis, doc_id: str
) -> None:
    client = with_sentinel
    before = await sentinel_state(client, sync_redis)
    path = f"{C}/default/documents/{encode(doc_id)}"
    checked = await client.post(
        f"{C}/default/check", json={"id": doc_id, "text": "seven eight nine ten eleven twelve"}
    )
    # Replaces what the check stored under the same id.
    put = await client.put(path, json={"text": "one two three four five six", "metadata": {"id": doc_id}})
    if put.status_code == 422:
        assert checked.status_code == 422, checked.text
        assert "id" in put.json()["message"]
    else:
        assert put.status_code == 200 and checked.status_code == 200, (put.text, checked.text)
        assert put.json()["id"] == doc_id and checked.json()["id"] == doc_id
        got = await client.get(path)
        assert got.status_code == 200 and got.json()["id"] == doc_id
        assert got.json()["metadata"] == {"id": doc_id}
        assert (await client.delete(path)).status_code == 204
        assert (await client.get(path)).status_code == 404
    assert await sentinel_state(client, sync_redis) == before


@given(name=names)
@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
async def test_any_collection_name_is_refused_or_isolated(
    with_sentinel: AsyncClient, sync_redis: redis.Redis, name: str
) -> None:
    client = with_sentinel
    if name in (SENTINEL, "default"):
        return  # the fixtures' own collections: covered by the create-twice tests
    before = await sentinel_state(client, sync_redis)
    created = await client.post(C, json={"name": name})
    path = f"{C}/{encode(name)}"
    if created.status_code == 422:
        assert created.json()["message"].startswith("body.name")
        assert (await client.get(path, follow_redirects=True)).status_code < 500
        listed = [c["name"] for c in (await client.get(C)).json()["collections"]]
        assert sorted(listed) == ["default", SENTINEL]
    else:
        assert created.status_code == 201, created.text
        assert (await client.get(path)).json()["name"] == name
        check = await client.post(f"{path}/check", json={"id": "s1", "text": SENTINEL_TEXT})
        assert check.status_code == 200 and check.json()["duplicate"] is False  # sees nothing of sentinel
        assert (await client.delete(path)).status_code == 204
    assert await sentinel_state(client, sync_redis) == before


# --- the edges of each limit (TEST_LIMITS in conftest: text 20,000 B, batch 50, id 100 B,
# --- metadata 200 B, body 200,000 B, query limit 100) ----------------------------------------------


async def test_every_limit_is_inclusive_and_the_next_unit_is_refused(client: AsyncClient) -> None:
    check = f"{C}/default/check"
    ok: list[dict[str, Any]] = [
        {"id": "x" * 100, "text": "t"},
        {"id": "é" * 50, "text": "t"},  # 100 bytes of UTF-8
        {"id": "a", "text": "x" * 20_000},
        {"id": "a", "text": "t", "metadata": {"k": "v" * 190}},  # {"k":"v..."} = 198 bytes
    ]
    for body in ok:
        assert (await client.post(check, json=body)).status_code == 200, body["id"][:5]
    refused = [
        ({"id": "x" * 101, "text": "t"}, "body.id", "at most 100"),
        ({"id": "é" * 50 + "x", "text": "t"}, "body.id", "101 bytes"),
        ({"id": "a", "text": "x" * 20_001}, "body.text", "at most 20000"),
        ({"id": "a", "text": "t", "metadata": {"k": "v" * 200}}, "body.metadata", "at most 200"),
    ]
    for bad, where, words in refused:
        response = await client.post(check, json=bad)
        assert response.status_code == 422
        assert response.json()["message"].startswith(where) and words in response.json()["message"]

    batch = f"{C}/default/check/batch"
    full: dict[str, list[dict[str, str]]] = {"documents": [{"id": f"d{i}", "text": "t"} for i in range(50)]}
    assert (await client.post(batch, json=full)).status_code == 200
    full["documents"].append({"id": "d50", "text": "t"})
    assert (await client.post(batch, json=full)).status_code == 422

    query = f"{C}/default/query"
    assert (await client.post(query, json={"text": "t", "limit": 100})).status_code == 200
    assert (await client.post(query, json={"text": "t", "limit": 101})).status_code == 422


def nested_metadata(levels: int) -> bytes:
    """Metadata as raw JSON, ``levels`` deep: an object holding arrays in arrays (built as bytes: the
    JSON encoders stop at a few hundred levels)."""
    return b'{"a": ' + b"[" * (levels - 1) + b"1" + b"]" * (levels - 1) + b"}"


def with_metadata(template: dict[str, Any], metadata: bytes) -> bytes:
    return orjson.dumps(template).replace(b'"METADATA"', metadata)


async def test_metadata_nested_deeper_than_32_levels_is_422_on_every_path_that_takes_it(
    client: AsyncClient,
) -> None:
    json = {"content-type": "application/json"}
    paths: list[tuple[str, str, dict[str, Any], str]] = [
        ("POST", f"{C}/default/check", {"id": "a", "text": "t", "metadata": "METADATA"}, "body.metadata"),
        (
            "POST",
            f"{C}/default/check/batch",
            {"documents": [{"id": "a", "text": "t", "metadata": "METADATA"}]},
            "body.documents.0.metadata",
        ),
        ("PUT", f"{C}/default/documents/a", {"text": "t", "metadata": "METADATA"}, "body.metadata"),
    ]
    for method, path, template, where in paths:
        # 32 levels (65 bytes, well inside the 200-byte limit) are stored and read back as sent.
        deepest = nested_metadata(32)
        ok = await client.request(method, path, content=with_metadata(template, deepest), headers=json)
        assert ok.status_code == 200, (path, ok.text)
        stored = (await client.get(f"{C}/default/documents/a")).json()["metadata"]
        assert stored == orjson.loads(deepest)
        # 33 levels is within the byte limit too: refused for its depth. 300 and 1000 could not even
        # be encoded for the store (a 500 before the limit).
        for levels in (33, 300, 1000):
            body = with_metadata(template, nested_metadata(levels))
            response = await client.request(method, path, content=body, headers=json)
            assert response.status_code == 422, (path, levels, response.text)
            message = response.json()["message"]
            assert message.startswith(where) and "more than 32 levels" in message, message


async def test_body_limit_is_413_before_json_and_names_the_setting(client: AsyncClient) -> None:
    body = b'{"text": "' + b"x" * 199_980 + b'"}'
    assert len(body) == 199_992
    put = f"{C}/default/documents/a"
    response = await client.put(put, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422  # inside the body limit, over the text limit
    too_big = b"{" + b" " * 200_000 + b"}"
    response = await client.put(put, content=too_big, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "NEARDUP_MAX_BODY_BYTES" in response.json()["message"]


async def test_collection_parameters_that_the_kernels_cannot_use_are_422(client: AsyncClient) -> None:
    # Found by the OpenAPI fuzzer: num_perm 54 passed validation and crashed choosing the bands (500).
    response = await client.post(C, json={"name": "odd", "num_perm": 54})
    assert response.status_code == 422 and "multiple of 8" in response.json()["message"]
    tiny = await client.post(C, json={"name": "tiny", "threshold": 5e-324, "num_perm": 56})
    assert tiny.status_code == 201, tiny.text


async def test_a_line_break_in_the_path_never_addresses_another_document(client: AsyncClient) -> None:
    # Found by the id property above: Starlette's `$` matches before a final line break, so
    # ".../documents/a%0A" used to store, read and delete document "a".
    docs = f"{C}/default/documents"
    assert (await client.put(f"{docs}/a", json={"text": "t", "metadata": {"v": 1}})).status_code == 200
    for path in (f"{docs}/a%0A", f"{docs}/%0Aa", f"{C}/default%0A", f"{C}/default%0A/documents/a"):
        for method in ("GET", "DELETE"):
            response = await client.request(method, path)
            assert response.status_code == 422, (method, path, response.text)
            message = response.json()["message"]
            assert "line break" in message or "collection name" in message
    assert (await client.get(f"{docs}/a")).json()["metadata"] == {"v": 1}


async def test_a_name_with_a_final_line_break_is_not_a_name(client: AsyncClient) -> None:
    # re's `$` matches before a final "\n": the name check used to let "pages\n" through.
    response = await client.post(C, json={"name": "pages\n"})
    assert response.status_code == 422 and "collection name" in response.json()["message"]
