"""Crowded buckets (a site's template, boilerplate, a page copied thousands of times) on a real server
and a real cluster. A collection first takes thousands of light variants of one template page, then
pairs (P, P2): P shares about 60% of its text with the template, P2 is P with one word changed. Every
P2 must find its P, however many variants came first: candidates are ranked by how many of the
document's buckets hold them, and a full bucket takes no more appends (keys.BUCKET_CAP)."""

from __future__ import annotations

import random

import pytest

from neardup.domain import CollectionParams, Document, Index
from neardup.storage import Store
from neardup.storage.keys import BUCKET_CAP
from tests.conftest import StoreTarget

pytestmark = pytest.mark.anyio

WORDS = 400  # words of the template page


def words(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [f"w{rng.randrange(100_000)}" for _ in range(n)]


def edited(text: list[str], seed: int, changes: int) -> list[str]:
    rng = random.Random(seed)
    out = list(text)
    for _ in range(changes):
        out[rng.randrange(len(out))] = f"x{rng.randrange(10**9)}"
    return out


async def load_crowd_then_pairs(index: Index, name: str, variants: int, pairs: int) -> list[str]:
    """The template's variants, then each P; returns the ids of the P2 that found their P."""
    await index.create_collection(CollectionParams.create(name, threshold=0.8))
    template = words(1, WORDS)
    for start in range(0, variants, 500):
        batch = [
            Document(f"v{i}", " ".join(edited(template, 10 + i, 4)))
            for i in range(start, min(variants, start + 500))
        ]
        await index.check(name, batch)
    ps = {j: template[: int(WORDS * 0.6)] + words(1000 + j, int(WORDS * 0.4)) for j in range(pairs)}
    await index.check(name, [Document(f"p{j}", " ".join(p)) for j, p in ps.items()])
    p2s = [Document(f"p{j}-2", " ".join(edited(p, 5000 + j, 1))) for j, p in ps.items()]
    found = []
    for result in await index.check(name, p2s, insert=False):
        j = result.id.removeprefix("p").removesuffix("-2")
        if f"p{j}" in [m.id for m in result.matches]:
            found.append(result.id)
    return found


@pytest.mark.slow
async def test_a_crowd_of_2000_template_variants_hides_no_pair(store: Store) -> None:
    found = await load_crowd_then_pairs(Index(store), "crowd", 2000, 60)
    assert len(found) >= 60 * 0.99, f"{len(found)} of 60 pairs found"


@pytest.mark.slow
async def test_a_crowd_of_20000_template_variants_hides_no_pair(store: Store) -> None:
    found = await load_crowd_then_pairs(Index(store), "crowd20k", 20_000, 100)
    assert len(found) >= 100 * 0.99, f"{len(found)} of 100 pairs found"


async def test_a_full_bucket_keeps_its_first_ordinals_and_takes_no_more(
    store: Store, store_target: StoreTarget
) -> None:
    """The same text checked BUCKET_CAP + 50 times: every bucket stops at BUCKET_CAP ordinals, and a
    later copy still finds the earliest ones (its duplicate_of is the first)."""
    index = Index(store)
    await index.create_collection(CollectionParams.create("full", threshold=0.8))
    text = " ".join(words(7, 200))
    for start in range(0, BUCKET_CAP + 50, 100):
        await index.check("full", [Document(f"c{i}", text) for i in range(start, start + 100)])
    [late] = await index.check("full", [Document("late", text)], insert=False)
    assert late.duplicate_of == "c0"
    client = store_target.sync_client()
    try:
        sizes = [
            len(value)
            for key in client.scan_iter(match="nd:full:*:b:*", count=1000)
            for value in client.hgetall(key).values()
        ]
    finally:
        client.close()
    assert sizes and max(sizes) == 4 * BUCKET_CAP
