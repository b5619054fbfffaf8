"""First seen wins under real concurrency: 300 groups of 4 light variants of one text, sent in random
order by 32 concurrent clients to a real service, give exactly one non-duplicate per group, and every
other member of the group names that one as ``duplicate_of``."""

from __future__ import annotations

import asyncio
import random

import httpx

from tests.e2e.conftest import Service

GROUPS = 300
VARIANTS = 4
CLIENTS = 32
WORDS = 400


def group_texts(rng: random.Random, vocabulary: list[str]) -> list[str]:
    """One text and three light variants: recased and repunctuated, one word replaced, one inserted."""
    words = [rng.choice(vocabulary) for _ in range(WORDS)]
    recased = " ".join(w.upper() + "," if i % 7 == 0 else w for i, w in enumerate(words))
    replaced = list(words)
    replaced[rng.randrange(WORDS)] = "replacement"
    inserted = list(words)
    inserted.insert(rng.randrange(WORDS), "insertion")
    return [" ".join(words), recased, " ".join(replaced), " ".join(inserted)]


def test_exactly_one_original_per_group_with_32_concurrent_clients(service: Service) -> None:
    url = service.url
    rng = random.Random(20240611)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(20_000)]
    jobs = [
        (f"g{group}-v{variant}", group, text)
        for group in range(GROUPS)
        for variant, text in enumerate(group_texts(rng, vocabulary))
    ]
    random.Random().shuffle(jobs)  # a new order every run: the guarantee must hold for any of them

    with httpx.Client(base_url=url, timeout=10.0) as http:
        assert http.post("/v1/collections", json={"name": "e2e-race"}).status_code == 201

    results: dict[str, dict[str, object]] = {}

    async def client(queue: asyncio.Queue[tuple[str, int, str]]) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30.0) as http:
            while True:
                try:
                    doc_id, _, text = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                response = await http.post(
                    "/v1/collections/e2e-race/check", json={"id": doc_id, "text": text}
                )
                assert response.status_code == 200, response.text
                results[doc_id] = response.json()

    async def run() -> None:
        queue: asyncio.Queue[tuple[str, int, str]] = asyncio.Queue()
        for job in jobs:
            queue.put_nowait(job)
        await asyncio.gather(*(client(queue) for _ in range(CLIENTS)))

    asyncio.run(run())
    assert len(results) == GROUPS * VARIANTS

    for group in range(GROUPS):
        members = [f"g{group}-v{variant}" for variant in range(VARIANTS)]
        originals = [m for m in members if not results[m]["duplicate"]]
        assert len(originals) == 1, {m: results[m] for m in members}
        [original] = originals
        for member in members:
            if member != original:
                assert results[member]["duplicate_of"] == original, (member, results[member])
