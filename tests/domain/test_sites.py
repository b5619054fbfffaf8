"""Sites (mirror detection) on a real server: pages and shared counts follow every insert, replace,
delete and expiry exactly: a replayed stream is compared with a recount from scratch built from the
service's own check answers; the stored edges are compared with the counts; the bounds hold."""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from neardup.domain import (
    CollectionParams,
    Document,
    DocumentNotFound,
    Index,
    InvalidParameters,
    SitesNotCounted,
)
from neardup.domain.models import site_of
from neardup.storage import ClusterStore, RedisStore, Store, keys
from tests.conftest import StoreTarget
from tests.domain.test_index import text, variant

pytestmark = pytest.mark.anyio

SITES = [f"site{i}.example" for i in range(6)]
THRESHOLD = 0.7


def test_site_of() -> None:
    assert site_of({"url": "https://Example.ORG:8080/a/b?c"}, "url") == "example.org"
    assert site_of({"url": "example.org/a"}, "url") == "example.org/a"  # not absolute: as it is
    assert site_of({"host": 42}, "host") == "42"
    assert site_of({"url": ""}, "url") is None
    assert site_of({"url": True}, "url") is None
    assert site_of({"url": ["x"]}, "url") is None
    assert site_of({"other": "x"}, "url") is None
    assert site_of(None, "url") is None
    assert site_of({"url": "x"}, None) is None
    assert len(site_of({"s": "é" * 500}, "s").encode()) <= 256  # type: ignore[union-attr]


def site_by_whole_url(value: str) -> str | None:
    """The definition site_of had when sites were first stored (urlsplit of the whole URL): stored
    site names depend on it, so it must not change."""
    text = value.strip()
    if "://" in text:
        try:
            host = urlsplit(text).hostname
        except ValueError:
            host = None
        if host:
            text = host.rstrip(".")
    if not text:
        return None
    raw = text.encode("utf-8", "surrogatepass")
    return raw[:256].decode("utf-8", "ignore") if len(raw) > 256 else text


URL_PIECES = st.sampled_from([*"aZ9.-_:/?#@[]%\t\n \x01é", "://", "https://", "//", "Example.ORG"])


@settings(max_examples=3000, deadline=None)
@given(st.lists(URL_PIECES, max_size=10).map("".join))
def test_site_of_a_url_is_its_host_as_urlsplit_finds_it_in_the_whole_url(value: str) -> None:
    # site_of splits only the head of a URL, up to its authority (cached per site): the same answer.
    assert site_of({"url": value}, "url") == site_by_whole_url(value)


def test_site_of_urls_of_one_site() -> None:
    for url, host in [
        ("https://User:pw@Example.ORG.:8080/a/b?c#d", "example.org"),
        ("http://[::1]:80/x", "::1"),
        ("//example.org/x://y", "example.org"),
        ("x:y://host/z", "x:y://host/z"),
        ("https://exa\tmple.org/p", "example.org"),
        ("https://...", None),
        ("http://[::1/x", "http://[::1/x"),
    ]:
        assert site_of({"url": url}, "url") == site_by_whole_url(url) == host, url


def test_site_field_is_validated_and_kept() -> None:
    for bad in ("", "x" * 200, 5):
        with pytest.raises(InvalidParameters):
            CollectionParams.create("x", site_field=bad)  # type: ignore[arg-type]
    p = CollectionParams.create("x", site_field="url")
    assert CollectionParams.from_dict(p.to_dict()) == p
    plain = CollectionParams.create("x").to_dict()
    assert plain["site_field"] is None and CollectionParams.from_dict(plain).site_field is None


async def test_both_stores_take_a_site_field(store_target: StoreTarget, store: Store) -> None:
    index = Index(store)
    params = CollectionParams.create("sites", site_field="url")
    assert (await index.create_collection(params))[1]
    await index.check("sites", [Document("a", text(1), page("a.example", "1"))])
    assert (await index.site("sites", "a.example")).pages == 1


@pytest.fixture(params=["module", "lua"])
async def site_store(request: pytest.FixtureRequest) -> AsyncIterator[RedisStore]:
    """An emptied standalone store whose server has neardup's module (the link step is one ND.LINK
    command) or has not (the Lua link step): the site tests run on both."""
    url = request.getfixturevalue("redis_url" if request.param == "module" else "lua_redis_url")
    store = RedisStore.from_url(url, timeout=5.0)
    try:
        yield store
    finally:
        await store.close()


def page(site: str, path: str) -> dict[str, str]:
    return {"url": f"https://{site.upper()}/{path}"}


async def test_full_mirror_partial_mirror_and_common_page(site_store: RedisStore) -> None:
    index = Index(site_store)
    await index.create_collection(CollectionParams.create("web", threshold=0.7, site_field="url"))
    docs = []
    for k in range(10):  # a.example: 10 pages; b.example mirrors all; c.example 4 of them
        docs.append(Document(f"a{k}", text(100 + k), page("a.example", str(k))))
    for k in range(10):
        docs.append(Document(f"b{k}", variant(text(100 + k), k), page("b.example", str(k))))
    for k in range(4):
        docs.append(Document(f"c{k}", variant(text(100 + k), k + 1), page("c.example", str(k))))
    for k in range(4, 10):
        docs.append(Document(f"c{k}", text(200 + k), page("c.example", str(k))))
    docs.append(Document("nosite", variant(text(100), 3), {"title": "no url"}))
    results = await index.check("web", docs)
    assert results[10].duplicate_of == "a0"

    a = await index.site("web", "a.example")
    assert a.pages == 10
    assert [(m.site, m.pages, m.shared, m.other_shared) for m in a.mirrors] == [
        ("b.example", 10, 10, 10),
        ("c.example", 10, 4, 4),
    ]
    assert a.mirrors[0].share == 1.0 and a.mirrors[1].share == 0.4
    # the same host however it is written
    assert (await index.site("web", "https://A.example/x")).pages == 10
    unknown = await index.site("web", "nowhere.example")
    assert unknown.pages == 0 and unknown.mirrors == []

    pairs = await index.mirrors("web", min_share=0.5, min_pages=1)
    assert [(p.site, p.other, p.shared, p.share) for p in pairs] == [("a.example", "b.example", 10, 1.0)]
    every = await index.mirrors("web", min_share=0.0, min_pages=1)
    assert {(p.site, p.other) for p in every} == {
        ("a.example", "b.example"),
        ("b.example", "c.example"),
        ("a.example", "c.example"),
    }
    assert await index.mirrors("web", min_share=0.0, min_pages=11) == []
    assert len(await index.mirrors("web", min_share=0.0, limit=1)) == 1

    # deleting a mirror's pages takes their contribution away, on both sides
    for k in range(10):
        await index.delete_document("web", f"b{k}")
    a = await index.site("web", "a.example")
    assert [(m.site, m.shared) for m in a.mirrors] == [("c.example", 4)]
    assert (await index.site("web", "b.example")).pages == 0

    # no site_field: a 4xx-type error, not an empty answer
    await index.create_collection(CollectionParams.create("plain"))
    with pytest.raises(SitesNotCounted, match="site_field"):
        await index.site("plain", "a.example")


async def test_a_retried_check_records_its_edges_once(site_store: RedisStore) -> None:
    index = Index(site_store)
    await index.create_collection(CollectionParams.create("retry", threshold=0.7, site_field="url"))
    await index.check("retry", [Document("a", text(1), page("a.example", "1"))])
    copy = Document("b", variant(text(1), 1), page("b.example", "1"))
    first = await index.check("retry", [copy])
    again = await index.check("retry", [copy])  # unchanged copy: the retry path
    assert first[0].duplicate_of == again[0].duplicate_of == "a"
    a = await index.site("retry", "a.example")
    assert [(m.site, m.shared, m.other_shared) for m in a.mirrors] == [("b.example", 1, 1)]
    assert await stored_edges_agree(site_store, index, "retry")


async def test_check_put_and_a_retried_put_count_the_same(site_store: RedisStore) -> None:
    """The same pages stored by a check, by a PUT, and by a PUT sent twice (a retry of one whose answer
    was lost: the second takes the unchanged path) give the same site counts and the same edges; so
    does a PUT that replaces a page with a copy of another site's."""
    index = Index(site_store)
    answers = []
    for how in ("check", "put", "put twice"):
        name = "agree-" + how.replace(" ", "-")
        await index.create_collection(CollectionParams.create(name, threshold=0.7, site_field="url"))
        await index.check(
            name, [Document(f"a{k}", text(400 + k), page("a.example", str(k))) for k in range(4)]
        )
        copies = [Document(f"b{k}", variant(text(400 + k), k), page("b.example", str(k))) for k in range(3)]
        # b3 first stored with a text of its own, then replaced by a copy of a3
        copies[:0] = [Document("b3", text(500), page("b.example", "3"))]
        copies.append(Document("b3", variant(text(403), 3), page("b.example", "3")))
        for doc in copies:
            if how == "check":
                await index.check(name, [doc])
            else:
                await index.put(name, doc)
                if how == "put twice":
                    await index.put(name, doc)
        answers.append([await index.site(name, s) for s in ("a.example", "b.example")])
        assert await stored_edges_agree(site_store, index, name)
    assert answers[0] == answers[1] == answers[2]
    a, b = answers[0]
    assert (a.pages, b.pages) == (4, 4)
    assert [(m.site, m.shared, m.other_shared) for m in a.mirrors] == [("b.example", 4, 4)]


async def stored_edges_agree(store: Store, index: Index, name: str) -> bool:
    """The raw state: every edge is symmetric and joins two sites, and pages/shared are exactly what
    the edges and entries say. Settles first: nothing is linked behind the reads' backs. On a cluster
    the site keys are on the state slot (``keys.SiteKeys``)."""
    await index.settle_links(name)
    collection = await index.registry.get(name)
    k: Any = collection.keys
    if isinstance(store, ClusterStore):
        k = k.cluster_sites
    client: Any = store.client  # type: ignore[attr-defined]
    entries: dict[int, tuple[int, list[tuple[int, int]]]] = {}
    async for key in client.scan_iter(match=f"{k.edge_prefix}*"):
        group = int(key.decode().rsplit(":", 1)[1])
        for slot, value in (await client.hgetall(key)).items():
            ordinal = group * keys.EDGE_GROUP + int(slot)
            site = int.from_bytes(value[:4], "big")
            step = keys.ORDINAL_WIDTH + 4
            partners = [
                (int.from_bytes(value[q : q + keys.ORDINAL_WIDTH], "big"),
                 int.from_bytes(value[q + keys.ORDINAL_WIDTH : q + step], "big"))
                for q in range(4, len(value), step)
            ]  # fmt: skip
            entries[ordinal] = (site, partners)
    pages: dict[int, int] = defaultdict(int)
    shared: dict[tuple[int, int], int] = defaultdict(int)
    for ordinal, (site, partners) in entries.items():
        pages[site] += 1
        assert len(partners) <= keys.SITE_PARTNERS
        for p, psite in partners:
            assert entries[p][0] == psite != site
            assert ordinal in [q for q, _ in entries[p][1]]
        for other in {s for _, s in partners}:
            shared[(site, other)] += 1
    stored_pages = {int(i): int(n) for i, n in (await client.hgetall(k.site_pages)).items()}
    assert stored_pages == dict(pages)
    stored_shared: dict[tuple[int, int], int] = {}
    for site in stored_pages:
        for other, n in (await shared_counts(client, k.shared(site))).items():
            stored_shared[(site, other)] = n
    assert stored_shared == dict(shared)
    return True


async def shared_counts(client: Any, key: str) -> dict[int, int]:
    """A site's shared counts as stored: a string of 8-byte records (other site id, count), each site
    once, every count above 0, at most SITE_OTHERS; no key when there are none."""
    raw = await client.get(key)
    if raw is None:
        return {}
    assert len(raw) % 8 == 0 and 0 < len(raw) <= 8 * keys.SITE_OTHERS
    records = list(struct.iter_unpack(">II", raw))
    assert len({o for o, _ in records}) == len(records) and all(n > 0 for _, n in records)
    return dict(records)


class Recount:
    """The counts from scratch, from the service's answers: live versions of each id, and the matches
    each check answered (an edge lives while both versions do)."""

    def __init__(self) -> None:
        self.version: dict[str, int] = {}
        self.site: dict[tuple[str, int], str] = {}
        self.edges: set[frozenset[tuple[str, int]]] = set()
        self.clock = 0

    def insert(self, doc: Document, matched: list[str]) -> None:
        ends = [(m, self.version[m]) for m in matched if m in self.version]
        self.clock += 1
        self.version[doc.id] = self.clock
        me = (doc.id, self.clock)
        site = site_of(doc.metadata, "url")
        if site is not None:
            self.site[me] = site
            for end in ends:
                if end in self.site and self.site[end] != site:
                    self.edges.add(frozenset((me, end)))

    def counts(self, live: set[str]) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
        alive = {(i, v) for i, v in self.version.items() if i in live}
        pages: dict[str, int] = defaultdict(int)
        for end in alive:
            if end in self.site:
                pages[self.site[end]] += 1
        partner_sites: dict[tuple[str, int], set[str]] = defaultdict(set)
        for edge in self.edges:
            x, y = tuple(edge)
            if x in alive and y in alive:
                partner_sites[x].add(self.site[y])
                partner_sites[y].add(self.site[x])
        shared: dict[tuple[str, str], int] = defaultdict(int)
        for end, others in partner_sites.items():
            for other in others:
                shared[(self.site[end], other)] += 1
        return dict(pages), dict(shared)


async def replay(
    index: Index,
    name: str,
    recount: Recount,
    rng: random.Random,
    steps: int,
    *,
    replacements_first: bool = False,
) -> None:
    """``replacements_first``: a batch replaces a stored page only as its first document (a new id
    instead): a document checked before a replacement in its own batch meets the old version on one
    server, not on a cluster (docs/design.md, "Batches"), and the cluster parity tests compare answers."""
    bases = [text(1000 + b) for b in range(25)]
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.15 and recount.version:
            victim = rng.choice(sorted(recount.version))
            with contextlib.suppress(DocumentNotFound):  # expired meanwhile: gone for clients too
                await index.delete_document(name, victim)
            recount.version.pop(victim, None)
            continue
        batch = []
        for _ in range(rng.randint(1, 4)):
            site = rng.choice(SITES)
            # a new page, or a replacement (same id, another text) of one of this site's pages
            doc_id = f"{site}/{rng.randrange(12)}"
            if (
                replacements_first
                and batch
                and (doc_id in recount.version or doc_id in {d.id for d in batch})
            ):
                doc_id = f"{site}/new{recount.clock}.{len(batch)}"
            body = variant(bases[rng.randrange(len(bases))], rng.randrange(1000))
            metadata = page(site, doc_id) if rng.random() > 0.05 else None
            batch.append(Document(doc_id, body, metadata))
        # min_similarity = the threshold: the matches sites count (index.MAX_LINKS_PER_DOCUMENT)
        results = await index.check(name, batch, min_similarity=THRESHOLD)
        for doc, result in zip(batch, results, strict=True):
            recount.insert(doc, [m.id for m in result.matches])


async def compare(index: Index, store: Store, name: str, recount: Recount) -> None:
    live = set()
    for doc_id in list(recount.version):
        with contextlib.suppress(DocumentNotFound):
            await index.get_document(name, doc_id)
            live.add(doc_id)
    pages, shared = recount.counts(live)
    assert len(shared) >= 4  # the stream makes real cross-site matches
    for site in SITES:
        answer = await index.site(name, site)
        assert answer.pages == pages.get(site, 0), site
        got = {(site, m.site): m.shared for m in answer.mirrors if m.shared}
        want = {pair: n for pair, n in shared.items() if pair[0] == site}
        assert got == want, site
    pairs = await index.mirrors(name, min_share=0.0, min_pages=1, limit=1000)
    got_pairs = {}
    for p in pairs:
        if p.shared:
            got_pairs[(p.site, p.other)] = p.shared
        if p.other_shared:
            got_pairs[(p.other, p.site)] = p.other_shared
    assert got_pairs == shared
    assert await stored_edges_agree(store, index, name)


@pytest.mark.parametrize("ttl", [None, 4])
async def test_counts_never_drift(site_store: RedisStore, ttl: int | None) -> None:
    """Checks in batches with replacements and deletes (and, with a TTL, documents expiring halfway):
    the counts equal a recount from scratch after each phase."""
    index = Index(site_store)
    name = f"drift{ttl or 0}"
    await index.create_collection(
        CollectionParams.create(name, threshold=THRESHOLD, site_field="url", ttl_seconds=ttl)
    )
    rng = random.Random(17)
    recount = Recount()
    await replay(index, name, recount, rng, 60)
    await compare(index, site_store, name, recount)
    if ttl:
        await asyncio.sleep(ttl + 0.3)  # every document so far expires
        await replay(index, name, recount, rng, 25)
        await compare(index, site_store, name, recount)
        counted = [(await index.site(name, s)).pages for s in SITES]
        assert 0 < sum(counted) < len(recount.version)  # the expired ones left, the new ones count
    else:
        await replay(index, name, recount, rng, 60)
        await compare(index, site_store, name, recount)


async def test_evicted_documents_leave_the_counts(site_store: RedisStore) -> None:
    index = Index(site_store)
    await index.create_collection(
        CollectionParams.create("evict", threshold=0.7, site_field="url", max_documents=4)
    )
    for k in range(4):
        await index.check("evict", [Document(f"a{k}", text(300 + k), page("a.example", str(k)))])
    for k in range(4):
        await index.check("evict", [Document(f"b{k}", variant(text(300 + k), 1), page("b.example", str(k)))])
    # the a pages are evicted by the b pages: none of them counts any longer
    a = await index.site("evict", "a.example")
    b = await index.site("evict", "b.example")
    assert a.pages == 0 and b.pages == 4
    assert b.mirrors == []
    assert await stored_edges_agree(site_store, index, "evict")


async def test_bounds_hold_for_a_page_on_every_site(site_store: RedisStore) -> None:
    """One license text on 40 sites: each copy keeps at most SITE_PARTNERS partners, and the counts
    stay consistent with the edges kept."""
    index = Index(site_store)
    await index.create_collection(CollectionParams.create("crowd", threshold=0.7, site_field="url"))
    license_text = text(4242)
    for s in range(40):
        docs = [Document(f"s{s}/license", variant(license_text, s), page(f"s{s}.example", "license"))]
        docs += [
            Document(f"s{s}/{k}", text(5000 + 100 * s + k), page(f"s{s}.example", str(k))) for k in range(5)
        ]
        await index.check("crowd", docs)
    assert await stored_edges_agree(site_store, index, "crowd")
    first = await index.site("crowd", "s0.example")
    assert 0 < len(first.mirrors) <= keys.SITE_PARTNERS
    assert all(m.share == pytest.approx(1 / 6) for m in first.mirrors)
    assert await index.mirrors("crowd", min_share=0.5) == []


async def test_dropping_a_collection_unlinks_its_site_keys(
    standalone_store: RedisStore, sync_redis: redis.Redis
) -> None:
    index = Index(standalone_store)
    await index.create_collection(CollectionParams.create("gone", threshold=0.7, site_field="url"))
    await index.check(
        "gone",
        [
            Document("a", text(7), page("a.example", "1")),
            Document("b", variant(text(7), 2), page("b.example", "1")),
        ],
    )
    assert sync_redis.keys("nd:gone:*")
    await index.delete_collection("gone")
    assert sync_redis.keys("nd:gone:*") == []


async def test_a_site_keeps_at_most_site_others_other_sites(site_store: RedisStore) -> None:
    """Site a's 20 pages each copied onto 15 sites of their own: 300 other sites, more than
    keys.SITE_OTHERS; a keeps that many, each of those sites still counts its page, and every count
    agrees with the edges kept."""
    index = Index(site_store)
    await index.create_collection(CollectionParams.create("wide", threshold=0.7, site_field="url"))
    for k in range(20):
        docs = [Document(f"a{k}", text(7000 + k), page("a.example", str(k)))]
        docs += [
            Document(f"c{k}-{j}", variant(text(7000 + k), j), page(f"c{k}-{j}.example", "1"))
            for j in range(15)
        ]
        await index.check("wide", docs)
    a = await index.site("wide", "a.example")
    assert a.pages == 20 and len(a.mirrors) == keys.SITE_OTHERS
    assert all(m.share_of_other == 1.0 for m in a.mirrors)
    assert await stored_edges_agree(site_store, index, "wide")


async def test_a_half_dropped_site_collection_is_swept_with_its_site_keys(
    standalone_store: RedisStore, sync_redis: redis.Redis
) -> None:
    index = Index(standalone_store)
    await index.create_collection(CollectionParams.create("halfgone", threshold=0.7, site_field="url"))
    await index.check(
        "halfgone",
        [
            Document("a", text(8), page("a.example", "1")),
            Document("b", variant(text(8), 2), page("b.example", "1")),
        ],
    )
    await index.settle_links("halfgone")
    assert sync_redis.keys("nd:halfgone:*:x:*") and sync_redis.keys("nd:halfgone:*:e:*")
    # the drop's script ran, then the dropping process died before unlinking anything
    await standalone_store._call(
        "drop_collection", [keys.REGISTRY, keys.state("halfgone"), keys.DROPPED], ["halfgone"]
    )
    assert await standalone_store.sweep_dropped(min_age_ms=0) == 1
    assert sync_redis.keys("nd:halfgone:*") == []


def site_dump(url: str) -> dict[tuple[bytes, ...], dict[bytes, bytes]]:
    """Every hash (and string, as {b"": value}) of a server's collections, comparable across servers:
    key names without the collection's random generation, records without their insertion time (each
    server's own clock), the state without its generation and clock."""
    client = redis.Redis.from_url(url)
    try:
        out: dict[tuple[bytes, ...], dict[bytes, bytes]] = {}
        for key in client.scan_iter(match="nd:*", count=1000):
            parts = key.split(b":")
            if key == keys.REGISTRY.encode():
                continue
            fields = client.hgetall(key) if client.type(key) == b"hash" else {b"": client.get(key)}
            if parts[1].startswith(b"{"):
                for own in (b"gen", b"clock", b"tick"):  # the collection's clock is each server's own
                    fields.pop(own, None)
                out[tuple(parts)] = fields
                continue
            if parts[3] == b"d":
                fields = {f: value[value.index(b":") :] for f, value in fields.items()}
            out[(parts[1], *parts[3:])] = fields
        return out
    finally:
        client.close()


async def linked_stream(index: Index, params: CollectionParams, seed: int) -> None:
    """The collection created and filled with replay's stream (replacements, deletes, evictions), then
    a page on 40 sites, then long pages and shortened copies of them on other sites."""
    await index.create_collection(params)
    await replay(index, params.name, Recount(), random.Random(seed), 80)
    for s in range(40):
        copy = Document(f"s{s}/license", variant(text(4242), s), page(f"s{s}.example", "license"))
        await index.check(params.name, [copy], min_similarity=THRESHOLD)
    # Replay's pages are short (~116 shingles: wide sparse format-3 sketches); with 1,408 bins these
    # are dense (400 words), narrow sparse (330, 240) and wide (200): the pairs meet every kind of
    # format 3's estimate (both dense, both wide, and on the bins' minima), in one batch, some of them
    # within 0.02 of the threshold.
    for s in range(6):
        words = text(5000 + s, 400).split()
        batch = [
            Document(f"long{s}/{n}", variant(" ".join(words[:n]), s + n), page(SITES[(s + k) % 6], str(n)))
            for k, n in enumerate((400, 400, 330, 240, 200))
        ]
        await index.check(params.name, batch, min_similarity=THRESHOLD)


async def test_module_and_lua_link_steps_store_the_same(redis_url: str, lua_redis_url: str) -> None:
    """The same stream on a server with neardup's module (ND.LINK; ND.BANDS counting the pages) and on
    one without (the Lua loop; _common.lua's add_site_page): the same answers and the same keys, byte
    for byte. The stream has replacements, deletes and
    evictions (max_documents), a page copied onto 40 sites, and then a link call of every pair of
    ordinals under tight bounds, so that both bounds refuse edges."""
    dumps, answers, hincrby = [], [], []
    for url in (redis_url, lua_redis_url):
        store = RedisStore.from_url(url, timeout=30.0)
        try:
            # every check's links ride the next check (none is settled by a timer): one order on both
            index = Index(store, settle_delay=3600)
            name = "same"
            params = CollectionParams.create(name, threshold=THRESHOLD, site_field="url", max_documents=150)
            await linked_stream(index, params, seed=5)
            await index.settle_links(name)
            k = (await index.registry.get(name)).keys
            seq = int(await store.client.hget(k.state, "seq"))
            pairs = [(x, y) for x in range(seq - 60, seq + 1) for y in range(seq - 200, seq + 1)]
            blob = b"".join(x.to_bytes(8, "big") + y.to_bytes(8, "big") for x, y in pairs)
            reply = await store._call("link", [k.state], [*store._head(k), 3, 2, blob])  # tight bounds
            answers.append((int(reply[1]), int(reply[2])))
            answers.append(await store.link(k, pairs))  # again, with the real bounds
            stats = await store.client.info("commandstats")
            dumps.append(site_dump(url))
            assert ("cmdstat_nd.link" in stats) == (url == redis_url)
            hincrby.append(stats["cmdstat_hincrby"]["calls"])
            assert await stored_edges_agree(store, index, name)
        finally:
            await store.close()
    assert answers[:2] == answers[2:]
    assert all(added > 0 and refused > 0 for added, refused in answers[:2]), answers
    # with the module the pages are counted in ND.BANDS, not by add_site_page's HINCRBY
    assert hincrby[0] < hincrby[1] - 100, hincrby
    assert dumps[0] == dumps[1]
    assert any(key[1] == b"x" for key in dumps[0]) and any(key[1] == b"e" for key in dumps[0])
    shared = [fields for key, fields in dumps[0].items() if key[1] == b"x"]
    assert shared and all(set(fields) == {b""} for fields in shared)  # strings (site_dump: {b"": value})


@pytest.mark.parametrize("verify", ["estimate", "exact"])
async def test_a_check_settles_the_last_one_s_links_as_a_link_call_after_it_would(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, verify: str
) -> None:
    """A check carries the cross-site pairs the service verified for the previous check of the
    collection and links them in its own script (no call of their own, no second verification on the
    server); the same stream with a link.lua call right after each check stores the same keys, byte
    for byte, and gives the same answers. The stream has replacements, deletes, evictions, a page on
    40 sites, and long pages and shortened copies (estimates: dense, narrow and wide sparse sketches)."""
    dumps, answers, link_calls, checks = [], [], [], []
    for carried in (True, False):
        client = redis.Redis.from_url(redis_url)
        client.flushall()
        client.config_resetstat()
        client.close()
        store = RedisStore.from_url(redis_url, timeout=30.0)
        calls: list[int] = []
        link = store.link

        async def counted(
            k: keys.CollectionKeys, pairs: Any, settles: Any = (), link: Any = link, calls: list[int] = calls
        ) -> tuple[int, int]:
            calls.append(len(pairs))
            return await link(k, pairs, settles)  # type: ignore[no-any-return]

        monkeypatch.setattr(store, "link", counted)
        try:
            index = Index(store, settle_delay=3600)
            name = "carried"
            if not carried:  # each check's pairs linked by a link.lua call as soon as it answers
                check = index.check

                async def check_then_link(
                    *args: Any, check: Any = check, index: Index = index, **kwargs: Any
                ) -> Any:
                    results = await check(*args, **kwargs)
                    await index._pending.flush(args[0])
                    return results

                monkeypatch.setattr(index, "check", check_then_link)
            params = CollectionParams.create(
                name, threshold=THRESHOLD, site_field="url", max_documents=150, verify=verify
            )
            await linked_stream(index, params, seed=9)
            answers.append(
                [await index.site(name, s) for s in SITES] + [await index.site(name, "s0.example")]
            )
            stats = await store.client.info("commandstats")
            checks.append(stats["cmdstat_evalsha"]["calls"])
            assert await stored_edges_agree(store, index, name)
            dumps.append(site_dump(redis_url))
            link_calls.append(calls)
        finally:
            await store.close()
    # carried: only the retried checks of unchanged copies link on their own, and the last check's
    # pairs at the first site read
    assert sum(n > 0 for n in link_calls[0]) < 5 < 20 < len(link_calls[1]), link_calls
    assert answers[0] == answers[1]
    assert any(m.mirrors for m in answers[0])
    assert dumps[0] == dumps[1]
    assert not any(key[1] == b"lj" for key in dumps[0])  # every journal entry settled


async def test_a_process_that_dies_before_settling_loses_no_link(redis_url: str) -> None:
    """Process A checks and dies holding the cross-site pairs of its last checks (never sent); process
    B's site read settles them from the link journal, verifying them from the stored sketches, and
    reads the same counts and keys as where A had settled them itself."""
    client = redis.Redis.from_url(redis_url)
    dumps, answers = [], []
    for dies in (True, False):
        client.flushall()
        a_store = RedisStore.from_url(redis_url, timeout=30.0)
        b_store = RedisStore.from_url(redis_url, timeout=30.0)
        try:
            a = Index(a_store, settle_delay=3600)
            name = "dies"
            params = CollectionParams.create(name, threshold=THRESHOLD, site_field="url", max_documents=150)
            await linked_stream(a, params, seed=11)
            if dies:
                assert client.hlen((await a.registry.get(name)).keys.link_journal) > 0
                for queue in a._pending._queues.values():  # what a SIGKILL leaves: nothing of A's memory
                    a._pending._cancel(queue)
                a._pending._queues.clear()
            else:
                await a.close()
            b = Index(b_store)
            answers.append([await b.site(name, s) for s in SITES] + [await b.site(name, "s0.example")])
            assert await stored_edges_agree(b_store, b, name)
            dumps.append(site_dump(redis_url))
        finally:
            await a_store.close()
            await b_store.close()
    client.close()
    assert answers[0] == answers[1]
    assert any(m.mirrors for m in answers[0])
    assert dumps[0] == dumps[1]


async def test_a_check_that_fails_gives_its_settle_back(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check that carried earlier pairs and failed (the store went away mid-call) leaves them to the
    next one: none is lost."""
    from neardup.domain import StoreUnavailable
    from neardup.storage.errors import StoreDown

    store = RedisStore.from_url(redis_url, timeout=5.0)
    try:
        index = Index(store, settle_delay=3600)
        await index.create_collection(CollectionParams.create("fails", threshold=0.7, site_field="url"))
        await index.check("fails", [Document("a", text(11), page("a.example", "1"))])
        await index.check("fails", [Document("b", variant(text(11), 1), page("b.example", "1"))])
        real = store.check

        async def down(*args: Any, **kwargs: Any) -> Any:
            raise StoreDown("connection reset")

        monkeypatch.setattr(store, "check", down)
        with pytest.raises(StoreUnavailable):
            await index.check("fails", [Document("c", text(12), page("c.example", "1"))])
        monkeypatch.setattr(store, "check", real)
        assert index._pending.take("fails", (await index.registry.get("fails")).keys.gen) is not None
    finally:
        await store.close()


async def test_a_settle_of_a_recreated_collection_is_dropped(redis_url: str) -> None:
    """Pairs held for a collection that was dropped and created again are never linked into the new
    one (their ordinals name other documents there)."""
    store = RedisStore.from_url(redis_url, timeout=5.0)
    try:
        index = Index(store, settle_delay=3600)
        params = CollectionParams.create("again", threshold=0.7, site_field="url")
        await index.create_collection(params)
        await index.check("again", [Document("a", text(13), page("a.example", "1"))])
        await index.check("again", [Document("b", variant(text(13), 1), page("b.example", "1"))])
        await index.delete_collection("again")
        await index.create_collection(params)
        await index.check("again", [Document("x", text(14), page("x.example", "1"))])
        await index.check("again", [Document("y", text(15), page("y.example", "1"))])
        x = await index.site("again", "x.example")
        assert x.pages == 1 and x.mirrors == []
        assert await stored_edges_agree(store, index, "again")
    finally:
        await store.close()
