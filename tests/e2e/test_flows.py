"""The v1 API over real HTTP against a real ``neardup serve`` with its embedded valkey-server:
collections, check/query/document flows, and near-duplicate detection on real prose."""

from __future__ import annotations

import httpx

LIGHTHOUSE = """\
The lighthouse on the northern point was built in 1874, after two ships ran aground on the reef in a
single winter. Its first keeper, a retired sailor named Thomas Avery, kept a logbook in which he noted
the weather every four hours, the ships that passed, and the birds that struck the lantern glass during
the autumn migration. The lamp burned whale oil at first, then kerosene, and finally electricity when a
cable was laid across the bay in 1931. For most of its working life the light turned once every twelve
seconds, a rhythm that fishermen learned to count in the dark as surely as they counted their own
breathing. The keepers' cottage still stands beside the tower, its walls two feet thick against the
wind, and the small garden behind it, where generations of keepers grew potatoes and kale in the thin
soil, has been replanted by volunteers from the village. Visitors can climb the one hundred and twelve
steps of the spiral stair to the gallery, from which on a clear day the mountains on the far side of the
sound are visible, blue and faint above the water. The logbooks, bound in faded green cloth, are kept in
the museum in town, and the curator will show them to anyone who asks, turning the brittle pages with
cotton gloves while explaining how the handwriting changed from one keeper to the next over a century
of storms, shipwrecks, rescues and long quiet nights when nothing at all happened on the sea.
"""

# A light edit: two words changed, a sentence's punctuation and capitals touched, a line break moved.
LIGHTHOUSE_EDITED = (
    LIGHTHOUSE.replace("retired sailor", "retired seaman")
    .replace("two feet thick", "three feet thick")
    .replace("The lamp burned whale oil at first,", "THE LAMP burned whale oil at first -")
    .replace("spiral\nstair", "spiral stair")
)

BREAD = """\
Baking bread at home begins with patience rather than with flour. A simple loaf needs only flour, water,
salt and yeast, but the way these are combined and the time they are given decide almost everything
about the result. Mixing the flour and water first and letting them rest for half an hour allows the
flour to absorb the water fully, which makes the dough easier to knead and gives a more open crumb. The
salt and yeast are added afterwards, and the dough is folded every half hour for the first two hours of
its rise instead of being kneaded hard on the counter. A long, cool fermentation, perhaps overnight in
the refrigerator, develops a deeper flavour than a quick rise in a warm kitchen, because the yeast and
the bacteria in the dough have time to produce the acids and aromatic compounds that make good bread
taste of more than wheat. Shaping the loaf gently, so as to keep the gas that has built up, and baking
it in a very hot oven with steam for the first twenty minutes gives a crisp, well coloured crust. The
hardest part for most people is the last step: waiting for the bread to cool completely before cutting
it, since the inside is still cooking from the heat it holds when it comes out of the oven.
"""


def test_collections_lifecycle(http: httpx.Client) -> None:
    assert http.get("/v1/collections/default").json()["name"] == "default"
    created = http.post("/v1/collections", json={"name": "e2e-pages", "threshold": 0.7, "shingle": "char"})
    assert created.status_code == 201
    assert (
        http.post(
            "/v1/collections", json={"name": "e2e-pages", "threshold": 0.7, "shingle": "char"}
        ).status_code
        == 200
    )
    assert http.post("/v1/collections", json={"name": "e2e-pages", "threshold": 0.9}).status_code == 409
    names = {c["name"] for c in http.get("/v1/collections").json()["collections"]}
    assert {"default", "e2e-pages"} <= names
    assert http.delete("/v1/collections/e2e-pages").status_code == 204
    assert http.get("/v1/collections/e2e-pages").status_code == 404


def test_a_lightly_edited_copy_of_real_prose_is_a_duplicate_and_other_prose_is_not(
    http: httpx.Client,
) -> None:
    assert http.post("/v1/collections", json={"name": "e2e-prose"}).status_code == 201
    check = "/v1/collections/e2e-prose/check"

    first = http.post(
        check, json={"id": "lighthouse", "text": LIGHTHOUSE, "metadata": {"source": "a"}}
    ).json()
    assert first["duplicate"] is False and first["inserted"] is True

    copy = http.post(check, json={"id": "lighthouse-copy", "text": LIGHTHOUSE_EDITED}).json()
    assert copy["duplicate"] is True and copy["duplicate_of"] == "lighthouse"
    assert copy["matches"][0]["id"] == "lighthouse" and copy["matches"][0]["metadata"] == {"source": "a"}
    assert 0.8 <= copy["matches"][0]["similarity"] < 1.0

    other = http.post(check, json={"id": "bread", "text": BREAD}).json()
    assert other["duplicate"] is False and other["matches"] == []

    found = http.post("/v1/collections/e2e-prose/query", json={"text": LIGHTHOUSE, "limit": 5}).json()[
        "matches"
    ]
    assert [m["id"] for m in found] == ["lighthouse", "lighthouse-copy"]
    assert found[0]["similarity"] == 1.0


def test_batch_check_in_order(http: httpx.Client) -> None:
    assert http.post("/v1/collections", json={"name": "e2e-batch"}).status_code == 201
    documents = [
        {"id": "b1", "text": BREAD},
        {"id": "l1", "text": LIGHTHOUSE},
        {"id": "b2", "text": BREAD.replace("patience", "care")},
        {"id": "l2", "text": LIGHTHOUSE_EDITED},
    ]
    results = http.post("/v1/collections/e2e-batch/check/batch", json={"documents": documents}).json()[
        "results"
    ]
    assert [(r["id"], r["duplicate_of"]) for r in results] == [
        ("b1", None),
        ("l1", None),
        ("b2", "b1"),
        ("l2", "l1"),
    ]


def test_documents_put_get_delete(http: httpx.Client) -> None:
    assert http.post("/v1/collections", json={"name": "e2e-docs"}).status_code == 201
    path = "/v1/collections/e2e-docs/documents/https%3A%2F%2Fexample.org%2Fbread"
    assert http.put(path, json={"text": BREAD, "metadata": {"lang": "en"}}).status_code == 200
    got = http.get(path).json()
    assert (
        got["id"] == "https://example.org/bread"
        and got["metadata"] == {"lang": "en"}
        and got["inserted_at"] > 0
    )
    checked = http.post(
        "/v1/collections/e2e-docs/check", json={"id": "again", "text": BREAD, "insert": False}
    )
    assert checked.json()["duplicate_of"] == "https://example.org/bread"
    assert http.delete(path).status_code == 204
    assert http.get(path).status_code == 404
    assert http.delete(path).status_code == 404


def test_bad_requests_over_real_http_are_4xx_with_a_message(http: httpx.Client) -> None:
    check = "/v1/collections/default/check"
    headers = {"content-type": "application/json"}
    for status, response in (
        (422, http.post(check, content=b"{oops", headers=headers)),
        (422, http.post(check, json={"id": "", "text": "t"})),
        (404, http.post("/v1/collections/missing/check", json={"id": "a", "text": "t"})),
        (404, http.get("/v1/collections/default/documents/missing")),
        (413, http.post(check, content=b"x" * 2_100_000, headers=headers)),
    ):
        assert response.status_code == status, response.text
        assert response.json()["message"] and "Traceback" not in response.text


def test_health_metrics_and_docs(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"status": "ready"}
    metrics = http.get("/metrics").text
    assert "neardup_http_requests_total" in metrics and "neardup_documents_checked_total" in metrics
    assert http.get("/docs").status_code == 200
    assert "/v1/collections/{name}/check/batch" in http.get("/openapi.json").json()["paths"]
