"""Site ids on a real server, with neardup's module (ND.BANDS counts the pages) and without (the Lua
steps): a site forgotten at 0 pages frees its id for the next new site, so a replacement of a site's
only page keeps its id and ``sseq`` grows only with the sites held at once; at the last id (4 bytes) a
page of a new site is refused whole with CollectionFull (a 409), and no site ever takes a live one's id."""

from __future__ import annotations

import contextlib
import random

import pytest

from neardup.domain import CollectionFull, CollectionParams, Document, DocumentNotFound, Index
from neardup.storage import RedisStore, keys
from tests.domain.test_index import text, variant
from tests.domain.test_sites import THRESHOLD, page, site_dump, site_store, stored_edges_agree

pytestmark = pytest.mark.anyio

__all__ = ["site_store"]  # the fixture (module and Lua paths), used here

LAST = keys.MAX_SITE_ID


async def site_state(
    store: RedisStore, index: Index, name: str
) -> tuple[int, int, dict[str, int], dict[int, int]]:
    """sseq, sfree, the site names' ids and the free stack, as stored."""
    k = (await index.registry.get(name)).keys
    client = store.client
    sseq, sfree = await client.hmget(k.state, "sseq", "sfree")
    names = {n.decode(): int(i) for n, i in (await client.hgetall(k.site_names)).items()}
    free = {int(n): int(i) for n, i in (await client.hgetall(k.site_free)).items()}
    return int(sseq or 0), int(sfree or 0), names, free


async def test_a_replaced_only_page_keeps_its_site_id(site_store: RedisStore) -> None:
    index = Index(site_store)
    await index.create_collection(CollectionParams.create("ids", threshold=THRESHOLD, site_field="url"))
    for n in range(5):  # the same id with another text: a replacement of the site's only page
        await index.check("ids", [Document("a/1", text(900 + n), page("a.example", "1"))])
    assert await site_state(site_store, index, "ids") == (1, 0, {"a.example": 1}, {})
    assert (await index.site("ids", "a.example")).pages == 1
    # the only page deleted: the site is forgotten and its id freed; the next new site takes it
    await index.delete_document("ids", "a/1")
    assert await site_state(site_store, index, "ids") == (1, 1, {}, {1: 1})
    assert (await index.site("ids", "a.example")).pages == 0
    await index.check("ids", [Document("b/1", text(950), page("b.example", "1"))])
    await index.check("ids", [Document("c/1", text(951), page("c.example", "1"))])
    assert await site_state(site_store, index, "ids") == (2, 0, {"b.example": 1, "c.example": 2}, {})
    assert await stored_edges_agree(site_store, index, "ids")


async def test_at_the_last_site_id_a_new_site_is_refused_and_no_site_takes_a_live_one_s_id(
    site_store: RedisStore,
) -> None:
    index = Index(site_store)
    name = "full"
    await index.create_collection(CollectionParams.create(name, threshold=THRESHOLD, site_field="url"))
    await index.check(
        name,
        [
            Document("a/1", text(1), page("a.example", "1")),
            Document("a/2", text(2), page("a.example", "2")),
        ],
    )
    k = (await index.registry.get(name)).keys
    await site_store.client.hset(k.state, "sseq", LAST - 1)  # as after 2^32 - 2 sites held at once
    [b] = await index.check(name, [Document("b/1", variant(text(1), 1), page("b.example", "1"))])
    assert b.duplicate_of == "a/1"
    assert await site_state(site_store, index, name) == (LAST, 0, {"a.example": 1, "b.example": LAST}, {})
    seq = await site_store.client.hget(k.state, "seq")

    # no id left: a page of a new site is refused, alone or beside a known site's page, with nothing written
    for batch in (
        [Document("c/1", text(3), page("c.example", "1"))],
        [Document("a/3", text(4), page("a.example", "3")), Document("c/1", text(3), page("c.example", "1"))],
    ):
        with pytest.raises(CollectionFull, match="sites"):
            await index.check(name, batch)
        assert await site_store.client.hget(k.state, "seq") == seq
        for doc in batch:
            with pytest.raises(DocumentNotFound):
                await index.get_document(name, doc.id)
    assert await site_state(site_store, index, name) == (LAST, 0, {"a.example": 1, "b.example": LAST}, {})

    # pages of the sites it holds are still taken; a replacement of b's only page keeps b's id
    await index.check(name, [Document("a/3", text(4), page("a.example", "3"))])
    await index.check(name, [Document("b/1", text(5), page("b.example", "1"))])
    assert await site_state(site_store, index, name) == (LAST, 0, {"a.example": 1, "b.example": LAST}, {})
    # b's page goes: its id is free and the new site takes it; a.example is untouched throughout
    await index.delete_document(name, "b/1")
    await index.check(name, [Document("c/1", variant(text(2), 2), page("c.example", "1"))])
    assert await site_state(site_store, index, name) == (LAST, 0, {"a.example": 1, "c.example": LAST}, {})
    a = await index.site(name, "a.example")
    assert a.pages == 3 and [(m.site, m.shared) for m in a.mirrors] == [("c.example", 1)]
    await index.delete_document(name, "c/1")
    a = await index.site(name, "a.example")
    assert a.pages == 3 and a.mirrors == []
    assert await site_state(site_store, index, name) == (LAST, 1, {"a.example": 1}, {1: LAST})
    assert await stored_edges_agree(site_store, index, name)


async def churn(store: RedisStore, name: str) -> int:
    """Sites of one or two pages come and go (pages checked, replaced, deleted; copies across sites
    link them), so sites are forgotten and new ones take their ids. Returns the most ids ever free."""
    index = Index(store, settle_delay=3600)  # every check's links ride the next: one order on both
    await index.create_collection(CollectionParams.create(name, threshold=THRESHOLD, site_field="url"))
    k = (await index.registry.get(name)).keys
    rng = random.Random(11)
    most_free = 0
    for _ in range(120):
        site = f"s{rng.randrange(12)}.example"
        doc_id = f"{site}/{rng.randrange(2)}"
        if rng.random() < 0.35:
            with contextlib.suppress(DocumentNotFound):
                await index.delete_document(name, doc_id)
        else:
            body = variant(text(rng.randrange(5)), rng.randrange(1000))
            await index.check(name, [Document(doc_id, body, page(site, doc_id))], min_similarity=THRESHOLD)
        most_free = max(most_free, int(await store.client.hget(k.state, "sfree") or 0))
    await index.settle_links(name)
    assert await stored_edges_agree(store, index, name)
    return most_free


async def test_module_and_lua_free_and_reuse_site_ids_the_same(redis_url: str, lua_redis_url: str) -> None:
    dumps = []
    for url in (redis_url, lua_redis_url):
        store = RedisStore.from_url(url, timeout=30.0)
        try:
            assert await churn(store, "churn") > 0
            dumps.append(site_dump(url))
        finally:
            await store.close()
    assert dumps[0] == dumps[1]
    [state] = [fields for key, fields in dumps[0].items() if key[1].startswith(b"{")]
    assert int(state[b"sseq"]) <= 12  # 12 site names: every id issued is reused, none burned
    assert any(key[1] == b"x" for key in dumps[0])  # the sites shared pages
