"""First seen wins under real concurrency: 300 groups of 4 light variants of one text, sent in random
order by 32 concurrent clients to a real service, give exactly one non-duplicate per group, and every
other member of the group names that one as ``duplicate_of``."""

from __future__ import annotations

import random

import httpx

from tests.e2e.conftest import Service, check_concurrently, the_original_of_each_group

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

    results = check_concurrently([url], "e2e-race", [(doc_id, text) for doc_id, _, text in jobs], CLIENTS)
    assert len(results) == GROUPS * VARIANTS

    for group, original in enumerate(the_original_of_each_group(results, GROUPS, VARIANTS)):
        for member in (f"g{group}-v{variant}" for variant in range(VARIANTS)):
            if member != original:
                assert results[member]["duplicate_of"] == original, (member, results[member])
