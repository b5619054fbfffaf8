"""A real ``neardup serve`` SIGKILLed right after answering a check of a site collection, before it
settled the check's cross-site links (it holds them for its next check, or 0.1 s): the link journal
entry its check wrote stays in the embedded server's append-only file, and the next service's site
read settles it from the stored sketches, so the mirror is counted in full (docs/design.md, "Sites")."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import redis

from tests.e2e.conftest import Service, wait_gone

WORDS = [f"w{i}" for i in range(4000)]


def page(k: int, site: str) -> dict[str, object]:
    body = " ".join(WORDS[k * 150 : k * 150 + 300])
    if site != "a":  # a near-copy: the mirror's own header word
        body = f"{site}mirror " + body
    return {"id": f"{site}/{k}", "text": body, "metadata": {"url": f"https://{site}.example/{k}"}}


def store_url(service: Service) -> str:
    """The embedded server's address, from its process title (``valkey-server 127.0.0.1:PORT``)."""
    pid = service.valkey_pid()
    assert pid is not None
    found = re.search(rb"127\.0\.0\.1:(\d+)", Path(f"/proc/{pid}/cmdline").read_bytes())
    assert found is not None
    return f"redis://127.0.0.1:{found.group(1).decode()}"


def journal_fields(service: Service, name: str) -> int:
    client = redis.Redis.from_url(store_url(service))
    try:
        return sum(int(client.hlen(key)) for key in client.scan_iter(match=f"nd:{name}:*:lj"))
    finally:
        client.close()


def test_a_service_killed_before_settling_its_links_loses_none(
    tmp_path: Path, start_service: type[Service]
) -> None:
    data_dir = tmp_path / "data"
    exercised = 0
    for attempt in range(3):  # the kill must beat the service's 0.1 s settle timer: it nearly always does
        name = f"web{attempt}"
        first = start_service(data_dir).start()
        with httpx.Client(base_url=first.url, timeout=30.0) as http:
            created = http.post("/v1/collections", json={"name": name, "threshold": 0.8, "site_field": "url"})
            assert created.status_code == 201, created.text
            original = http.post(
                f"/v1/collections/{name}/check/batch", json={"documents": [page(k, "a") for k in range(6)]}
            )
            assert original.status_code == 200, original.text
            mirror = http.post(
                f"/v1/collections/{name}/check/batch", json={"documents": [page(k, "b") for k in range(6)]}
            )
            assert mirror.status_code == 200, mirror.text
        valkey = first.valkey_pid()  # read before the kill: the server removes its pid file as it exits
        first.kill()  # no shutdown: the pairs it verified for the mirror's batch were only in its memory
        assert valkey is not None and wait_gone(valkey, 10.0)
        assert [r["duplicate_of"] for r in mirror.json()["results"]] == [f"a/{k}" for k in range(6)]

        second = start_service(data_dir).start()
        left = journal_fields(second, name)
        with httpx.Client(base_url=second.url, timeout=30.0) as http:
            a = http.get(f"/v1/collections/{name}/sites/a.example")
            assert a.status_code == 200, a.text
            assert a.json()["pages"] == 6
            assert [
                (m["site"], m["pages"], m["shared"], m["share"], m["share_of_other"])
                for m in a.json()["mirrors"]
            ] == [("b.example", 6, 6, 1.0, 1.0)]
            pairs = http.get(f"/v1/collections/{name}/mirrors", params={"min_share": 0.5, "min_pages": 1})
            assert [(p["site"], p["other"], p["shared"]) for p in pairs.json()["pairs"]] == [
                ("a.example", "b.example", 6)
            ]
        assert journal_fields(second, name) == 0  # the read settled what the killed one left
        second.stop()
        exercised += left > 0
        if exercised:
            break
    assert exercised, "every kill came after the settle timer: the journal's recovery was not exercised"
