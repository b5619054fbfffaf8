"""/healthz, /readyz, /metrics and /docs over the real app and a real valkey-server."""

from __future__ import annotations

from typing import Any

import pytest
from httpx import AsyncClient

pytestmark = pytest.mark.anyio


async def test_health_and_readiness(client: AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json() == {"status": "ready"}


async def test_metrics_count_requests_per_route_template_and_documents(
    client: AsyncClient, texts: Any
) -> None:
    text = texts.words(1)
    await client.post("/v1/collections/default/check", json={"id": "a", "text": text})
    await client.post(
        "/v1/collections/default/check/batch",
        json={"documents": [{"id": "b", "text": text}, {"id": "c", "text": texts.words(2)}]},
    )
    await client.get("/v1/collections/nope")
    await client.get("/v1/collections/default/documents/some-id")
    await client.get("/no/such/path")
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()

    def value(prefix: str) -> float:
        [line] = [line for line in lines if line.startswith(prefix + " ") or line == prefix]
        return float(line.rsplit(" ", 1)[1])

    assert (
        value('neardup_http_requests_total{method="POST",route="/v1/collections/{name}/check",status="200"}')
        == 1
    )
    assert value('neardup_http_requests_total{method="GET",route="/v1/collections/{name}",status="404"}') == 1
    assert (
        value(
            'neardup_http_requests_total{method="GET",route="/v1/collections/{name}/documents/{doc_id:path}",'
            'status="404"}'
        )
        == 1
    )
    assert value('neardup_http_requests_total{method="GET",route="unmatched",status="404"}') == 1
    assert (
        value(
            'neardup_http_request_duration_seconds_count{method="POST",route="/v1/collections/{name}/check"}'
        )
        == 1
    )
    assert value("neardup_documents_checked_total") == 3
    assert value("neardup_documents_inserted_total") == 3
    assert value("neardup_duplicates_found_total") == 1
    # Raw ids and names never become label values.
    assert "some-id" not in response.text and "nope" not in response.text


async def test_openapi_documents_every_route(client: AsyncClient) -> None:
    assert (await client.get("/docs")).status_code == 200
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert set(paths) >= {
        "/v1/collections",
        "/v1/collections/{name}",
        "/v1/collections/{name}/check",
        "/v1/collections/{name}/check/batch",
        "/v1/collections/{name}/query",
        "/v1/collections/{name}/documents/{doc_id}",
        "/healthz",
        "/readyz",
        "/metrics",
    }
    check = paths["/v1/collections/{name}/check"]["post"]
    assert "requestBody" in check
    assert check["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "CheckResultOut"
    )
