"""Mirror detection over HTTP: a collection with site_field, GET .../sites/{site} and .../mirrors, on
the real app, on a standalone server and on a cluster (the same answers)."""

from __future__ import annotations

from typing import Any

import pytest
from httpx import AsyncClient

pytestmark = pytest.mark.anyio


async def test_sites_and_mirrors(client: AsyncClient, texts: Any) -> None:
    created = await client.post(
        "/v1/collections", json={"name": "web", "threshold": 0.7, "site_field": "url"}
    )
    assert created.status_code == 201, created.text
    assert created.json()["site_field"] == "url"
    again = await client.post("/v1/collections", json={"name": "web", "threshold": 0.7})
    assert again.status_code == 409 and "site_field" in again.json()["message"]

    docs = []
    for k in range(6):
        original = texts.words(10 + k)
        docs.append({"id": f"a{k}", "text": original, "metadata": {"url": f"https://a.example/{k}"}})
        if k < 4:  # b.example copies 4 of a's 6 pages
            docs.append(
                {"id": f"b{k}", "text": texts.edited(original), "metadata": {"url": f"http://B.example/{k}"}}
            )
    response = await client.post("/v1/collections/web/check/batch", json={"documents": docs})
    assert response.status_code == 200, response.text

    site = await client.get("/v1/collections/web/sites/a.example")
    assert site.status_code == 200, site.text
    assert site.json() == {
        "site": "a.example",
        "pages": 6,
        "mirrors": [
            {
                "site": "b.example",
                "pages": 4,
                "shared": 4,
                "share": 4 / 6,
                "other_shared": 4,
                "share_of_other": 1.0,
            }
        ],
    }
    by_url = await client.get("/v1/collections/web/sites/https%3A%2F%2Fa.example%2Fpath")
    assert by_url.json()["pages"] == 6
    unknown = await client.get("/v1/collections/web/sites/nowhere.example")
    assert unknown.json() == {"site": "nowhere.example", "pages": 0, "mirrors": []}

    pairs = (await client.get("/v1/collections/web/mirrors", params={"min_share": 0.9})).json()["pairs"]
    assert pairs == [
        {
            "site": "b.example", "other": "a.example", "pages": 4, "other_pages": 6, "shared": 4,
            "other_shared": 4, "share": 1.0, "share_of_other": 4 / 6,
        }
    ]  # fmt: skip
    none = await client.get("/v1/collections/web/mirrors", params={"min_pages": 5})
    assert none.json() == {"pairs": []}
    bad = await client.get("/v1/collections/web/mirrors", params={"min_share": 2})
    assert bad.status_code == 422
    assert (await client.get("/v1/collections/nope/mirrors")).status_code == 404
    # a collection without a site_field
    plain = await client.get("/v1/collections/default/sites/a.example")
    assert plain.status_code == 409 and "site_field" in plain.json()["message"]
    assert (await client.get("/v1/collections/default/mirrors")).status_code == 409


async def test_a_put_page_counts_as_a_checked_one(client: AsyncClient, texts: Any) -> None:
    """PUT /documents/{id} of a copy on another site counts as a check of it does, first time and on a
    retry (the same PUT again)."""
    created = await client.post(
        "/v1/collections", json={"name": "put", "threshold": 0.7, "site_field": "url"}
    )
    assert created.status_code == 201, created.text
    original = texts.words(40)
    stored = await client.put(
        "/v1/collections/put/documents/a1",
        json={"text": original, "metadata": {"url": "https://a.example/1"}},
    )
    assert stored.status_code in (200, 201), stored.text
    copy = {"text": texts.edited(original), "metadata": {"url": "https://b.example/1"}}
    shared = []
    for _ in range(2):  # the PUT, then its retry
        response = await client.put("/v1/collections/put/documents/b1", json=copy)
        assert response.status_code in (200, 201), response.text
        site = (await client.get("/v1/collections/put/sites/b.example")).json()
        shared.append([(m["site"], m["shared"], m["other_shared"]) for m in site["mirrors"]])
    assert shared == [[("a.example", 1, 1)]] * 2
