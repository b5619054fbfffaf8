"""neardup's Valkey module, its site commands (ND.LINK, ND.MATCHLINK: native/valkey/sites.cpp) against
real servers: they check their arguments and write nothing on an error; ND.MATCHLINK's estimates are
the service's (formats 2 and 3: every kind of format 3's pairs); links replay from the append-only
file; a module older than a command gets the Lua link step."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import redis

from neardup.storage import RedisStore
from neardup.storage.embedded import EmbeddedValkey
from tests.storage.test_valkey_module import dump

pytestmark = pytest.mark.anyio


def link_args(pairs: list[tuple[int, int]], **change: object) -> list[object]:
    """ND.LINK's arguments on the keys e:<n> (entries), x:<site> (shared) and d:<n> (records)."""
    args: dict[str, object] = {
        "version": "1", "edges": "e:", "shared": "x:", "records": "d:", "width": 5, "edge_group": 32,
        "record_group": 120, "floor": 0, "cutoff": -1, "max_partners": 16, "max_others": 256,
        "pairs": b"".join(x.to_bytes(8, "big") + y.to_bytes(8, "big") for x, y in pairs),
    } | change  # fmt: skip
    return list(args.values())


def test_nd_link_checks_its_arguments_and_records_an_edge(
    servers: tuple[EmbeddedValkey, EmbeddedValkey],
) -> None:
    client = redis.Redis.from_url(servers[0].url)
    try:
        modules = {m[b"name"]: m[b"ver"] for m in client.module_list()}
        # version 7: ND.LINK's protocol 2 (site layout 2, scripts.LINK_MODULE_VERSION) and ND.BANDS's 5
        # (scripts.SITE_PAGE_MODULE_VERSION); 6: ND.MATCHLINK's protocol 3 and ND.BANDS's 4;
        # ND.MATCHLINK's protocol 2 came with 4, ND.POSTINGS with 5 (PACKED_PASSAGES_MODULE_VERSION)
        assert modules[b"neardup"] == 7
        cases = [
            ("wrong number", link_args([(1, 2)])[:-1]),
            ("protocol version", link_args([(1, 2)], version="3")),
            ("out of range", link_args([(1, 2)], width=6)),
            ("out of range", link_args([(1, 2)], edge_group=0)),
            ("out of range", link_args([(1, 2)], cutoff=-2)),
            ("out of range", link_args([(1, 2)], floor=-1)),
            ("16 bytes", [*link_args([])[:-1], b"\0" * 15]),
        ]
        for message, args in cases:
            with pytest.raises(redis.ResponseError, match=message):
                client.execute_command("ND.LINK", *args)
        assert client.dbsize() == 0
        # Documents 1 (site 7) and 2 (site 9): one edge, on both entries, each site counting a page.
        client.hset("e:0", mapping={"1": (7).to_bytes(4, "big"), "2": (9).to_bytes(4, "big")})
        assert client.execute_command("ND.LINK", *link_args([(1, 2), (1, 2), (2, 1)])) == [1, 0]
        assert client.hgetall("e:0") == {
            b"1": (7).to_bytes(4, "big") + (2).to_bytes(5, "big") + (9).to_bytes(4, "big"),
            b"2": (9).to_bytes(4, "big") + (1).to_bytes(5, "big") + (7).to_bytes(4, "big"),
        }
        assert client.hgetall("x:7") == {b"9": b"1"} and client.hgetall("x:9") == {b"7": b"1"}
        # Retention: a record older than the cutoff is gone, so its edges are not recorded.
        client.hset("e:0", "3", (11).to_bytes(4, "big"))
        client.hset("d:0", mapping={"1": b"5000:1:a", "3": b"100:1:c"})
        assert client.execute_command("ND.LINK", *link_args([(1, 3)], cutoff=1000)) == [0, 0]
        assert client.hget("x:7", "11") is None
        client.set("x:11", "not a hash")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("ND.LINK", *link_args([(1, 3)]))
        assert client.ping()
    finally:
        client.flushall()
        client.close()


def test_nd_link_protocol_2_keeps_shared_counts_packed(
    servers: tuple[EmbeddedValkey, EmbeddedValkey],
) -> None:
    """Site layout 2's shared counts (keys.SITE_LAYOUT), byte for byte: per other site 8 bytes, its id
    then its count (4 bytes big-endian each), in the order first counted; a bound that refuses a new
    site writes nothing."""
    client = redis.Redis.from_url(servers[0].url)

    def record(site: int, n: int) -> bytes:
        return site.to_bytes(4, "big") + n.to_bytes(4, "big")

    try:
        # Documents 1, 2 of site 7; 3 of site 9; 4 of site 11; 5 of site 13.
        entries = {"1": 7, "2": 7, "3": 9, "4": 11, "5": 13}
        client.hset("e:0", mapping={o: s.to_bytes(4, "big") for o, s in entries.items()})
        assert client.execute_command("ND.LINK", *link_args([(3, 1), (3, 2), (1, 4)], version="2")) == [3, 0]
        assert client.get("x:7") == record(9, 2) + record(11, 1)
        assert client.get("x:9") == record(7, 1) and client.get("x:11") == record(7, 1)
        # At most 2 other sites: 5 (site 13) would be site 7's third, so its edge is refused.
        assert client.execute_command("ND.LINK", *link_args([(5, 2)], version="2", max_others=2)) == [0, 1]
        assert client.get("x:7") == record(9, 2) + record(11, 1) and not client.exists("x:13")
        client.hset("x:13", "1", "1")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("ND.LINK", *link_args([(5, 2)], version="2"))
    finally:
        client.flushall()
        client.close()


@pytest.mark.parametrize("sketch_format", [2, 3])
async def test_nd_link_replays_from_the_append_only_file(tmp_path: Path, sketch_format: int) -> None:
    """Links replay from the append-only file: each check links the pairs the service verified for the
    one before in its own script (ND.LINK), a site read the rest (link.lua's ND.LINK); the server never
    verifies (no ND.MATCHLINK). Format 3's documents are of two lengths: sparse sketches (~200
    shingles) and dense ones (~600)."""
    from neardup.domain import CollectionParams, Document, Index

    server = EmbeddedValkey(tmp_path / "data")
    server.start()
    store = RedisStore.from_url(server.url)
    try:
        index = Index(store)
        params = CollectionParams.create("m", threshold=0.7, site_field="url", sketch_format=sketch_format)
        await index.create_collection(params)
        words = [f"w{i}" for i in range(1000)]
        for site in range(4):
            docs = [
                Document(
                    f"{site}/{k}",
                    " ".join(words[k * 20 : k * 20 + (600 if k % 2 else 200)]) + f" s{site}",
                    {"url": f"https://s{site}.example/{k}"},
                )
                for k in range(8)
            ]
            await index.check("m", docs)
        assert (await index.site("m", "s0.example")).mirrors
        before = dump(server.url)
        aof = b"".join(p.read_bytes() for p in (server.data_dir / "appendonlydir").glob("*.incr.aof"))
        stats = await store.client.info("commandstats")
        assert "cmdstat_nd.matchlink" not in stats and stats["cmdstat_nd.link"]["calls"] >= 3
        assert b"nd.link" in aof.lower() and b"nd.matchlink" not in aof.lower()
        server.stop()
        server.start()
        assert dump(server.url) == before
    finally:
        await store.close()
        server.stop()


async def test_a_module_older_than_nd_link_gets_the_lua_link_step(
    servers: tuple[EmbeddedValkey, EmbeddedValkey], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server running the module of an earlier release (version 1: ND.BANDS, no ND.LINK), played by
    # asking for a version above this module's: the band step still uses the module, links take Lua.
    from neardup.domain import CollectionParams, Document, Index
    from neardup.storage import scripts

    monkeypatch.setattr(scripts, "LINK_MODULE_VERSION", 99)
    store = RedisStore.from_url(servers[0].url)
    try:
        index = Index(store)
        await index.create_collection(CollectionParams.create("old", threshold=0.7, site_field="url"))
        body = " ".join(f"w{i}" for i in range(200))
        await index.check("old", [Document("a", body, {"url": "https://a.example/1"})])
        await index.check("old", [Document("b", body + " x", {"url": "https://b.example/1"})])
        assert [m.site for m in (await index.site("old", "a.example")).mirrors] == ["b.example"]
        stats = await store.client.info("commandstats")
        assert "cmdstat_nd.bands" in stats
        assert "cmdstat_nd.link" not in stats and "cmdstat_nd.matchlink" not in stats
    finally:
        await store.close()


def match_link_args(
    docs: list[tuple[int, bytes, list[tuple[int, bytes]]]], sketch_format: int | None = None, **change: object
) -> list[object]:
    """ND.MATCHLINK's arguments on the keys e:<n>, x:<site>, d:<n> (as link_args), for sketches of
    MATCH_FIXED bytes then MATCH_BINS bins: per document (ordinal, sketch, candidates), each sketch put
    in the pool once. Protocol 1 (format 2) without a ``sketch_format``, else protocol 2 with it."""
    pool: list[bytes] = []

    def at(sketch: bytes) -> bytes:
        if sketch not in pool:
            pool.append(sketch)
        return pool.index(sketch).to_bytes(4, "big")

    blob = b""
    for x, sketch, candidates in docs:
        blob += x.to_bytes(5, "big") + at(sketch) + len(candidates).to_bytes(4, "big")
        blob += b"".join(c.to_bytes(5, "big") + at(s) for c, s in candidates)
    args: dict[str, object] = {
        "version": "1", "edges": "e:", "shared": "x:", "records": "d:", "width": 5, "edge_group": 32,
        "record_group": 120, "floor": 0, "cutoff": -1, "max_partners": 16, "max_others": 256,
        "max_links": 16, "least": repr(MATCH_THRESHOLD - 1e-6),
        **({} if sketch_format is None else {"version": "2", "format": sketch_format}),
        "fixed": MATCH_FIXED, "bins": MATCH_BINS, "bits": 2, "sketches": b"".join(pool), "documents": blob,
    } | change  # fmt: skip
    return list(args.values())


MATCH_FIXED, MATCH_BINS, MATCH_THRESHOLD = 1 + 8 * 4, 256, 0.7


@pytest.mark.parametrize("sketch_format", [None, 2])
def test_nd_matchlink_verifies_as_the_service_and_links_the_best_first(
    servers: tuple[EmbeddedValkey, EmbeddedValkey], sketch_format: int | None
) -> None:
    """ND.MATCHLINK's estimates of format 2 (protocol 1, or 2 naming the format) decide exactly as the
    service's (sketch.bbit_similarity at the threshold - 1e-6): candidates on the document's own site,
    of no site, or with an unreadable sketch are skipped; the matches are linked best first, the best
    one on each other site first, at most <max links>; bad arguments get an error and write nothing."""
    from neardup import sketch as native

    rng = np.random.default_rng(3)
    stride = MATCH_BINS * 2 // 8
    query = rng.integers(0, 256, stride, dtype=np.uint8)
    head = b"\x02" + bytes(MATCH_FIXED - 1)
    rows, sites = [], []
    for k in range(40):  # copies of the query with more and more of their bytes redrawn
        row = query.copy()
        redraw = rng.random(stride) < k / 40
        row[redraw] = rng.integers(0, 256, int(redraw.sum()), dtype=np.uint8)
        rows.append(row)
        sites.append(100 + k % 5)  # five other sites
    estimates = native.bbit_similarity(query, np.stack(rows), bins=MATCH_BINS, bits=2).tolist()
    matches = [k for k, e in enumerate(estimates) if e >= MATCH_THRESHOLD - 1e-6]
    assert 3 < len(matches) < 35  # the threshold falls inside the candidates' estimates
    client = redis.Redis.from_url(servers[0].url)
    try:
        client.flushall()
        x = 1000
        entries = {str(x % 32): (7).to_bytes(4, "big")}
        candidates = []
        for k, row in enumerate(rows):
            c = 2000 + k
            candidates.append((c, head + row.tobytes()))
            client.hset(f"e:{c // 32}", str(c % 32), sites[k].to_bytes(4, "big"))
        client.hset(f"e:{x // 32}", mapping=entries)
        # skipped: one of the document's own site, one of no site (no entry), one unreadable sketch
        client.hset("e:100", "0", (7).to_bytes(4, "big"))
        same_site, no_site, unreadable = (
            (3200, head + query.tobytes()),
            (3300, head + query.tobytes()),
            (3400, bytes(len(head) + stride)),
        )
        client.hset("e:106", "8", (100).to_bytes(4, "big"))  # 3400's entry: another site
        sketch = head + query.tobytes()
        everything = [same_site, no_site, unreadable, *candidates]
        doc = [(x, sketch, everything)]

        def args(**change: object) -> list[object]:
            return match_link_args(doc, sketch_format, **change)

        cases = [
            ("wrong number", args()[:-1]),
            ("wrong number", [*args()[:13], *args()[-5:]] if sketch_format else [*args(), b""]),
            ("protocol version", args(version="4")),
            ("out of range", args(bins=100)),
            ("not a number", args(least="0.7x")),
            ("<size> bytes each", args(sketches=b"\0" * 10)),
            ("in range", args(documents=args()[-1][:-3])),  # type: ignore[index]
            ("in range", [*args()[:-1], b"\0" * 5 + (99).to_bytes(4, "big") + bytes(4)]),
        ]
        before = dump(servers[0].url)
        for message, wrong in cases:
            with pytest.raises(redis.ResponseError, match=message):
                client.execute_command("ND.MATCHLINK", *wrong)
        assert dump(servers[0].url) == before
        added, refused, found = client.execute_command("ND.MATCHLINK", *args(max_links=8))
        assert found == len(matches) and (added, refused) == (min(8, len(matches)), 0)
        ranked = sorted(matches, key=lambda k: (-estimates[k], 2000 + k))
        best_per_site: list[int] = []
        for k in ranked:
            if sites[k] not in [sites[j] for j in best_per_site]:
                best_per_site.append(k)
        order = (best_per_site + [k for k in ranked if k not in best_per_site])[:8]
        entry = client.hget(f"e:{x // 32}", str(x % 32))
        assert entry is not None
        partners = [int.from_bytes(entry[q : q + 5], "big") for q in range(4, len(entry), 9)]
        assert partners == [2000 + k for k in order]
        # x is one page of site 7: each other site it has a partner on counts that one page
        assert client.hgetall("x:7") == {str(sites[k]).encode(): b"1" for k in order}
        # again: the same edges are there already, nothing changes
        assert client.execute_command("ND.MATCHLINK", *args(max_links=8))[:2] == [0, 0]
    finally:
        client.flushall()
        client.close()


def format3_texts() -> list[str]:
    """Texts whose format-3 sketches (MATCH_BINS bins) are of every mode: dense (> bins / 4 distinct
    shingles), narrow sparse (codes of 3 to 5 bits: compared on the bins' minima) and wide sparse (6
    bits or more: shingle by shingle), each with copies edited more and more and shortened or
    lengthened ones (pairs of two modes), so the estimates spread from 0 to 1."""
    rng = np.random.default_rng(17)
    vocabulary = [f"w{i}" for i in range(3000)]
    out = []
    for length in (20, 30, 45, 55, 64, 80):  # with 256 bins: wide, wide, narrow, narrow, dense, dense
        words = list(rng.choice(vocabulary, size=length + 40))
        for edits in (0, 1, 3, 6):
            copy = list(words[:length])
            for at in rng.choice(length, size=edits, replace=False):
                copy[at] = f"e{rng.integers(10**6)}"
            out.append(" ".join(copy))
        out.append(" ".join(words[: length + 8]))
    return out


def test_nd_matchlink_estimates_format_3_as_the_service(
    servers: tuple[EmbeddedValkey, EmbeddedValkey],
) -> None:
    """ND.MATCHLINK (protocol 2, format 3) keeps a candidate exactly when the service's estimate
    (sketch.adaptive_similarity, float32) is >= <least>: at <least> = the service's estimate it is
    found, one step above it (the next double) it is not, for every pair of texts of every mode. A
    sketch of an unknown mode, or of format 2 in a format 3 call, is skipped (not estimated: even a
    <least> below 0 does not keep it)."""
    from neardup import sketch as native

    texts = format3_texts()
    _, bins = native.adaptive_sketches(texts, bins=MATCH_BINS)
    modes = [int(row[0]) for row in bins]
    assert 0 in modes and any(3 <= m <= 5 for m in modes) and any(m >= 6 for m in modes)
    head = b"\x03" + bytes(MATCH_FIXED - 1)
    stored = [head + row.tobytes() for row in bins]
    client = redis.Redis.from_url(servers[0].url)
    try:
        client.flushall()
        x, c = 1000, 2000
        client.hset(f"e:{x // 32}", str(x % 32), (7).to_bytes(4, "big"))
        client.hset(f"e:{c // 32}", str(c % 32), (8).to_bytes(4, "big"))
        kinds = set()
        pipe = client.pipeline(transaction=False)
        expected = []
        for i, query in enumerate(bins):
            estimates = native.adaptive_similarity(query, bins, bins=MATCH_BINS).tolist()
            for j, e in enumerate(estimates):
                kinds.add((min(modes[i], modes[j]) >= 6, modes[i] == modes[j] == 0))
                doc = [(x, stored[i], [(c, stored[j])])]
                for least, found in ((e, 1), (math.nextafter(e, 2.0), 0)):
                    pipe.execute_command(
                        "ND.MATCHLINK", *match_link_args(doc, 3, least=repr(least), max_links=0)
                    )
                    expected.append(found)
        assert kinds == {(True, False), (False, True), (False, False)}  # wide, dense, on the minima
        assert [reply[2] for reply in pipe.execute()] == expected
        spread = native.adaptive_similarity(bins[0], bins, bins=MATCH_BINS)
        assert ((spread > 0.05) & (spread < 0.95)).sum() >= 3
        # unreadable: a mode byte of no format-3 sketch, a format-2 tag; a readable unrelated one is kept
        bad_mode = head + bytes([2]) + stored[0][MATCH_FIXED + 1 :]
        format2 = b"\x02" + stored[0][1:]
        for sketch, found in ((bad_mode, 0), (format2, 0), (stored[-1], 1)):
            doc = [(x, stored[0], [(c, sketch)])]
            assert (
                client.execute_command("ND.MATCHLINK", *match_link_args(doc, 3, least="-1", max_links=0))[2]
                == found
            )
        bad = [(x, stored[0], [(c, stored[1])])]
        for change in ({"format": 4}, {"bits": 1}):
            with pytest.raises(redis.ResponseError, match="out of range"):
                client.execute_command("ND.MATCHLINK", *match_link_args(bad, 3, **change))
    finally:
        client.flushall()
        client.close()


def match_link_batch_args(
    first: int,
    batch: list[bytes],
    linked: list[bool],
    candidates: list[list[int]],
    stored: dict[int, bytes],
    split: bool = False,
    **change: object,
) -> list[object]:
    """ND.MATCHLINK's protocol 3 (check.lua's) on the keys of match_link_args, format 3: documents first,
    first + 1, ... with the sketches `batch`, those `linked`, every document's candidates (ordinals of
    this batch or of `stored`), the stored ones' sketches in the order they first appear: all in one
    argument, or with `split` one argument each."""
    order: list[int] = []
    for cands in candidates:
        for c in cands:
            if not first <= c < first + len(batch) and c not in order:
                order.append(c)
    fetched = [stored[c] for c in order]
    args: dict[str, object] = {
        "version": "3", "edges": "e:", "shared": "x:", "records": "d:", "width": 5, "edge_group": 32,
        "record_group": 120, "floor": 0, "cutoff": -1, "max_partners": 16, "max_others": 256,
        "max_links": 16, "least": repr(MATCH_THRESHOLD - 1e-6), "format": 3, "fixed": MATCH_FIXED,
        "bins": MATCH_BINS, "bits": 2, "first": first, "sketches": b"".join(batch),
        "flags": b"".join(b"1" if k else b"0" for k in linked),
    } | change  # fmt: skip
    out = list(args.values()) + [b"".join(c.to_bytes(5, "big") for c in cands) for cands in candidates]
    return out + (fetched if split else [b"".join(fetched)] if fetched else [])


def test_nd_matchlink_protocol_3_links_as_protocol_2(servers: tuple[EmbeddedValkey, EmbeddedValkey]) -> None:
    """Protocol 3 (module version 6: what check.lua sends) takes the batch's sketches as check.lua has
    them, every document's candidates as ND.BANDS gave them and the other candidates' sketches in the
    order they first appear; it links exactly what protocol 2 links given the same pool (the same keys,
    byte for byte, and the same replies): candidates of this batch and stored ones, a document not to
    link (its candidates still name the fetched order), one of no site, a sketch of zero bytes; and it
    checks its layout before writing anything."""
    from neardup import sketch as native

    texts = format3_texts()
    _, bins = native.adaptive_sketches(texts, bins=MATCH_BINS)
    head = b"\x03" + bytes(MATCH_FIXED - 1)
    sketches = [head + row.tobytes() for row in bins]
    size = len(sketches[0])
    first, n = 1000, 8
    batch = sketches[:n]
    stored = {2000 + k: s for k, s in enumerate(sketches[n:])}
    stored[2100] = bytes(size)  # absent or of another size: check.lua sends zero bytes
    rng = np.random.default_rng(5)
    candidates = []
    for i in range(n):
        own = [first + j for j in range(i)]  # documents of this batch are stored before i
        cands = list(rng.choice(own, size=min(len(own), 2), replace=False)) if own else []
        cands += [*rng.choice(sorted(stored), size=6, replace=False), 2100]
        candidates.append([int(c) for c in cands])
    linked = [i != 3 for i in range(n)]  # document 3: no site (not linked)

    def setup(client: redis.Redis) -> None:
        client.flushall()
        for i in range(n):
            if i != 3:
                o = first + i
                client.hset(f"e:{o // 32}", str(o % 32), (i % 3 + 1).to_bytes(4, "big"))
        for c in stored:
            client.hset(f"e:{c // 32}", str(c % 32), (c % 5 + 2).to_bytes(4, "big"))

    client = redis.Redis.from_url(servers[0].url)
    try:
        # protocol 2: a pool with the batch's sketches, then the stored ones; the linked documents only
        docs = []
        for i in range(n):
            if linked[i]:
                cands = [(c, batch[c - first] if c < first + n else stored[c]) for c in candidates[i]]
                docs.append((first + i, batch[i], cands))
        replies, dumps = [], []
        setup(client)
        replies.append(client.execute_command("ND.MATCHLINK", *match_link_args(docs, 3, least="0.2")))
        dumps.append(dump(servers[0].url))
        for split in (False, True):
            setup(client)
            args = match_link_batch_args(first, batch, linked, candidates, stored, split, least="0.2")
            replies.append(client.execute_command("ND.MATCHLINK", *args))
            dumps.append(dump(servers[0].url))
        assert replies[0][0] > 3 and replies[0][2] > 3  # edges were added, matches found
        assert replies[1] == replies[0] and replies[2] == replies[0]
        assert dumps[1] == dumps[0] and dumps[2] == dumps[0]

        setup(client)
        before = dump(servers[0].url)
        good = match_link_batch_args(first, batch, linked, candidates, stored, True, least="0.2")
        base = len(good) - n - len({c for cs in candidates for c in cs if c >= first + n})
        cases = [
            ("wrong number", good[:18]),
            ("out of range", [*good[:17], -1, *good[18:]]),
            ("fetched sketch", [*good[:18], batch[0][:-1] + b"".join(batch[1:]), *good[19:]]),  # sketches
            ("fetched sketch", [*good[:19], b"1" * (n - 1) + b"2", *good[20:]]),  # a flag
            ("fetched sketch", [*good[:20], b"\0" * 4, *good[21:]]),  # candidates not of 5 bytes
            ("fetched sketch", good[:-1]),  # one fetched sketch missing
            ("fetched sketch", [*good, stored[2000]]),  # one too many
            ("fetched sketch", [*good[:-1], good[-1][:-1]]),  # one cut short
        ]
        assert base == 20
        for message, wrong in cases:
            with pytest.raises(redis.ResponseError, match=message):
                client.execute_command("ND.MATCHLINK", *wrong)
        assert dump(servers[0].url) == before
        # no documents (check.lua's readiness call): nothing written
        assert client.execute_command("ND.MATCHLINK", *good[:17], 0, b"", b"") == [0, 0, 0]
        assert dump(servers[0].url) == before
    finally:
        client.flushall()
        client.close()


def test_nd_bands_protocols_4_and_5_count_a_page_as_add_site_page(
    servers: tuple[EmbeddedValkey, EmbeddedValkey],
) -> None:
    """ND.BANDS's protocol 4 (module version 6), and 5 (version 7: the site keys and the entry named
    from a key base and the ordinal, what check.lua sends), count the document's page of a site as
    _common.lua's add_site_page does: a new name interned with the next id of the state's sseq, the
    page counted, the entry written; a known name keeps its id. The same pages through protocols 4, 5
    and 3 with the Lua function store the same bytes (band groups included); an empty name counts
    nothing (check.lua's readiness call, in read mode, writes nothing); a site key of another type is
    refused with nothing written."""
    site_keys = ["st", "sn", "si", "sp"]
    pages = [("a.example", 5), ("b.example", 6), ("a.example", 40), ("c.example", 41), ("b.example", 70)]
    add_site_page = """
local id = redis.call('HGET', KEYS[2], ARGV[2])
if id then id = tonumber(id) else
  id = redis.call('HINCRBY', KEYS[1], 'sseq', 1)
  redis.call('HSET', KEYS[2], ARGV[2], id)
  redis.call('HSET', KEYS[3], id, ARGV[2])
end
redis.call('HINCRBY', KEYS[4], id, 1)
local ord = tonumber(ARGV[1])
redis.call('HSET', 'e:' .. math.floor(ord / 32), ord % 32, struct.pack('>I4', id))
"""

    def bands(ordinal: int, mode: str = "insert") -> list[object]:
        field = (ordinal % 3).to_bytes(8, "little")
        return ["p:", 0, 0, 0, 16, mode, ordinal.to_bytes(5, "big"), field, 256, 0, 256, 5]

    client = redis.Redis.from_url(servers[0].url)
    try:
        dumps, replies = [], []
        for path in ("4", "5", "lua"):
            client.flushall()
            client.hset("st", mapping={"seq": 3, "sseq": 7})
            got = []
            for name, ordinal in pages:
                if path == "4":
                    page = [*site_keys, f"e:{ordinal // 32}", str(ordinal % 32), name]
                    got.append(client.execute_command("ND.BANDS", "4", *bands(ordinal), *page))
                elif path == "5":  # the key base is "": sn, si, sp, e:<n>
                    got.append(client.execute_command("ND.BANDS", "5", *bands(ordinal), "st", "", 32, name))
                else:
                    got.append(client.execute_command("ND.BANDS", "3", *bands(ordinal)))
                    client.eval(add_site_page, 4, *site_keys, ordinal, name)
            replies.append(got)
            dumps.append(dump(servers[0].url))
        assert replies[0] == replies[1] == replies[2]
        assert dumps[0] == dumps[1] == dumps[2]
        assert client.hgetall("sn") == {b"a.example": b"8", b"b.example": b"9", b"c.example": b"10"}
        assert client.hgetall("sp") == {b"8": b"2", b"9": b"2", b"10": b"1"}
        assert client.hget("st", "sseq") == b"10"
        ready = ["4", *bands(0, "read"), "", "", "", "", "", "", ""]
        ready[7] = b""  # no ordinal in read mode
        client.execute_command("ND.BANDS", *ready)
        ready = ["5", *bands(0, "read"), "", "", "", ""]
        ready[7] = b""
        client.execute_command("ND.BANDS", *ready)
        client.execute_command("ND.BANDS", "5", *bands(91), "st", "", 32, "")  # no site: bands only
        no_site = ["4", *bands(90), *site_keys, "e:2", "26", ""]  # a document of no site: bands only
        client.execute_command("ND.BANDS", *no_site)
        assert client.hget("e:2", "26") is None and client.hget("e:2", "27") is None
        assert client.hgetall("sp") == {
            b"8": b"2",
            b"9": b"2",
            b"10": b"1",
        }
        before = dump(servers[0].url)
        client.set("wrong", "x")
        for keys in (["st", "sn", "si", "wrong"], ["wrong", "sn", "si", "sp"], ["st", "sn", "wrong", "sp"]):
            with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
                client.execute_command("ND.BANDS", "4", *bands(95), *keys, "e:2", "31", "d.example")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("ND.BANDS", "4", *bands(95), *site_keys, "wrong", "31", "d.example")
        with pytest.raises(redis.ResponseError, match="wrong number"):
            client.execute_command("ND.BANDS", "4", *bands(95), *site_keys, "e:2", "31")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command("ND.BANDS", "5", *bands(95), "wrong", "", 32, "d.example")
        client.hset("wrongsn", "x", "1")
        client.set("wrongsp", "x")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):  # "wrong" + "sn" is a hash, + "sp" not
            client.execute_command("ND.BANDS", "5", *bands(95), "st", "wrong", 32, "d.example")
        client.delete("wrongsn", "wrongsp")
        client.delete("wrong")
        assert dump(servers[0].url) == before
    finally:
        client.flushall()
        client.close()
