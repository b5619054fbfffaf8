"""A service process whose clock is ten minutes ahead (libfaketime, LD_PRELOAD) beside one with the right
time, both on one real 3-node cluster, both taking checks of the same near-duplicate groups from many
concurrent clients. The protocol compares times only on the server (pending marks and the abandon
sweep use TIME in the scripts), so the fast clock cannot make the other process's checks in flight
look abandoned: first seen still wins (exactly one original per group) and every acknowledged
document keeps its band entries (a query of its own text finds it). Records carry the server's time
(TIME), so the skewed process neither stamps its documents into the future nor judges expiry by its
own clock."""

from __future__ import annotations

import datetime
import json
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Service, check_concurrently, the_original_of_each_group
from tests.e2e.test_concurrency import group_texts

GROUPS = 120
VARIANTS = 4
CLIENTS = 24
SKEW = "+10m"
LIBFAKETIME = [
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/faketime/libfaketime.so.1"),
]

pytestmark = pytest.mark.slow


def libfaketime() -> Path:
    found = next((p for p in LIBFAKETIME if p.exists()), None)
    if found is None or shutil.which("faketime") is None:
        pytest.skip("Debian's faketime is not installed (scripts/test.sh installs it when run as root)")
    return found


@pytest.fixture
def services(tmp_path: Path, cluster_url: str) -> Iterator[tuple[Service, Service]]:
    cluster = {"NEARDUP_REDIS_URL": cluster_url, "NEARDUP_REDIS_CLUSTER": "true"}
    skewed_env = {
        **cluster,
        "LD_PRELOAD": str(libfaketime()),
        "FAKETIME": SKEW,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }
    normal = Service(tmp_path / "normal", env=cluster)
    skewed = Service(tmp_path / "skewed", "--log-format", "json", env=skewed_env)
    try:
        yield normal.start(), skewed.start()
    finally:
        normal.stop()
        skewed.stop()


def test_a_service_ten_minutes_ahead_breaks_neither_first_seen_nor_band_entries(
    services: tuple[Service, Service],
) -> None:
    normal, skewed = services
    with httpx.Client(base_url=normal.url, timeout=10.0) as http:
        assert http.post("/v1/collections", json={"name": "skew"}).status_code == 201
    # The fault is real: the skewed process's own clock (its log lines' time) is ten minutes ahead ...
    logged = [json.loads(line) for line in skewed.log().splitlines() if line.startswith("{")]
    ts = datetime.datetime.fromisoformat(logged[-1]["ts"]).timestamp()
    assert ts > time.time() + 500, logged[-1]
    # ... yet the records it writes carry the server's time, which expiry is judged by.
    with httpx.Client(base_url=skewed.url, timeout=10.0) as http:
        made = http.post("/v1/collections", json={"name": "skew-ttl", "ttl_seconds": 120})
        assert made.status_code == 201, made.text
        stored = http.put("/v1/collections/skew-ttl/documents/probe", json={"text": "a probe of the clock"})
        assert stored.status_code == 200, stored.text
        assert abs(stored.json()["inserted_at"] - time.time()) < 30
    with httpx.Client(base_url=normal.url, timeout=10.0) as http:
        fetched = http.get("/v1/collections/skew-ttl/documents/probe")
        assert fetched.status_code == 200 and abs(fetched.json()["inserted_at"] - time.time()) < 30

    rng = random.Random(7)
    vocabulary = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 9))) for _ in range(20_000)]
    jobs = [
        (f"g{group}-v{variant}", text)
        for group in range(GROUPS)
        for variant, text in enumerate(group_texts(rng, vocabulary))
    ]
    random.Random().shuffle(jobs)
    results = check_concurrently([normal.url, skewed.url], "skew", jobs, CLIENTS)  # half on each
    assert len(results) == GROUPS * VARIANTS
    the_original_of_each_group(results, GROUPS, VARIANTS)

    texts = dict(jobs)
    with httpx.Client(base_url=normal.url, timeout=30.0) as http:
        for doc_id, text in texts.items():
            answer = http.post("/v1/collections/skew/query", json={"text": text, "limit": 10})
            assert answer.status_code == 200, answer.text
            assert doc_id in [m["id"] for m in answer.json()["matches"]], doc_id
