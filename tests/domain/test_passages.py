"""Passage search in the domain against a real valkey-server (on a cluster: test_cluster_passages.py):
spans in both texts, containment and coverage, and the passage index following every way a document
goes (replace, delete, retention, max_documents, dropping the collection)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
import redis

from neardup.domain import (
    CollectionConflict,
    CollectionParams,
    Document,
    Index,
    InvalidInput,
    InvalidParameters,
    alignment,
    fingerprints,
    passage_search,
)
from neardup.domain.fingerprints import GUARANTEE_WORDS
from neardup.storage import EmbeddedValkey, RedisStore, keys
from neardup.storage.store import Postings

pytestmark = pytest.mark.anyio

_RNG = random.Random(15)
VOCABULARY = sorted(
    {"".join(_RNG.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(4000)}
)


def words(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(VOCABULARY) for _ in range(n)]


def essay(parts: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The parts joined by blank lines, and where each part is in the result."""
    text, where = "", []
    for part in parts:
        if text:
            text += "\n\n"
        where.append((len(text), len(text) + len(part)))
        text += part
    return text, where


def near(found: int, expected: int, text: str, words_off: int = 3) -> bool:
    """Within ``words_off`` words of the expected offset."""
    lo, hi = sorted((found, expected))
    return len(text[lo:hi].split()) <= words_off


@pytest.fixture
async def index(standalone_store: RedisStore) -> Index:
    ix = Index(standalone_store)
    await ix.create_collection(CollectionParams.create("p", passages=True))
    return ix


def postings(client: redis.Redis, collection: str) -> int:
    """Postings of a collection's passage index: its 8-byte records."""
    return sum(client.strlen(k) for k in client.keys(f"nd:{collection}:*:f:*")) // 8


def passage_keys(client: redis.Redis, collection: str) -> list[bytes]:
    return [k for k in client.keys(f"nd:{collection}:*") if k.split(b":")[3] in (b"f", b"p")]


async def test_three_copied_paragraphs_are_found_in_both_texts(index: Index) -> None:
    sources = {f"src{i}": " ".join(words(i, 600)) for i in range(20)}
    await index.check("p", [Document(i, t, {"n": i}) for i, t in sources.items()])
    copied = [
        (sources["src3"].split()[100:180], "src3"),
        (sources["src8"].split()[300:340], "src8"),
        (sources["src13"].split()[10:260], "src13"),
    ]
    parts = [" ".join(words(100, 300))]
    for chunk, _ in copied:
        parts += [" ".join(chunk), " ".join(words(101 + len(parts), 150))]
    text, where = essay(parts)
    result = await index.passages("p", text)

    assert [s.id for s in result.sources] == ["src13", "src3", "src8"]  # by containment
    for source in result.sources:
        [span] = source.spans
        chunk, _ = next(c for c in copied if c[1] == source.id)
        start, end = where[1 + 2 * [c[1] for c in copied].index(source.id)]
        assert near(span.start, start, text) and near(span.end, end, text)
        stored = sources[source.id]
        s_start = stored.index(" ".join(chunk))
        assert near(span.source_start, s_start, stored)
        assert near(span.source_end, s_start + len(" ".join(chunk)), stored)
        assert source.metadata == {"n": source.id}
    grams = len(text.split()) - 4
    assert result.sources[0].containment == pytest.approx((250 - 4) / grams, abs=0.03)
    copied_chars = sum(end - start for start, end in where[1::2])
    assert result.coverage == pytest.approx(copied_chars / len(text), abs=0.03)


async def test_a_long_text_is_searched_off_the_loop_with_the_same_answer(
    index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text past INLINE_CHARS is fingerprinted and aligned in a thread; the answer is the one the
    loop's own path gives."""
    sources = {f"src{i}": " ".join(words(200 + i, 600)) for i in range(5)}
    await index.check("p", [Document(i, t) for i, t in sources.items()])
    parts = [
        " ".join(words(300, 3000)),
        " ".join(sources["src2"].split()[50:250]),
        " ".join(words(301, 3000)),
    ]
    text, where = essay(parts)
    assert len(text) > passage_search.INLINE_CHARS
    threaded = await index.passages("p", text)
    monkeypatch.setattr(passage_search, "INLINE_CHARS", len(text))
    assert await index.passages("p", text) == threaded
    [source] = threaded.sources
    [span] = source.spans
    assert source.id == "src2" and near(span.start, where[1][0], text) and near(span.end, where[1][1], text)


async def test_a_passage_many_stored_documents_hold_is_reported(index: Index) -> None:
    """A paragraph in 80 stored documents (past the 64 a posting keeps) is copied text like any other:
    its span is reported against one of them, the others that were found grouped under it with their
    own offsets."""
    paragraph = " ".join(words(500, 120))
    docs = [Document(f"d{i}", f"{' '.join(words(600 + i, 200))}\n\n{paragraph}") for i in range(80)]
    await index.check("p", docs)
    text, where = essay([" ".join(words(700, 300)), paragraph, " ".join(words(701, 300))])
    result = await index.passages("p", text, limit=100)
    [source] = result.sources
    [span] = source.spans
    assert near(span.start, where[1][0], text) and near(span.end, where[1][1], text)
    assert span.also_in_count >= 32 and result.documents == span.also_in_count + 1
    assert len(span.also_in) == passage_search.ALSO_IN_SHOWN and result.more_sources == 0
    places = [(c.id, c.source_start, c.source_end) for c in span.also_in]
    for stored_id, start, end in [(source.id, span.source_start, span.source_end), *places]:
        stored = next(d.text for d in docs if d.id == stored_id)
        at = stored.index(paragraph)
        assert near(start, at, stored) and near(end, at + len(paragraph), stored)
    assert result.coverage == pytest.approx((where[1][1] - where[1][0]) / len(text), abs=0.02)


async def test_copies_of_one_passage_do_not_crowd_out_the_sources_of_another(index: Index) -> None:
    """A long passage in 70 stored documents and a short one in 50 others: ranked by score alone, the 64
    documents read would all hold the long one (each shares many more keys); the search reads the best
    source of each passage first, so both are found, each with its copies grouped under it."""
    long, short = " ".join(words(1000, 400)), " ".join(words(1001, 40))
    docs = [Document(f"l{i:02}", f"{' '.join(words(1100 + i, 100))}\n\n{long}") for i in range(70)]
    docs += [Document(f"s{i:02}", f"{' '.join(words(1200 + i, 100))}\n\n{short}") for i in range(50)]
    await index.check("p", docs)
    text, where = essay([" ".join(words(1300, 100)), long, " ".join(words(1301, 100)), short])
    result = await index.passages("p", text, limit=10)
    assert sorted(s.id[0] for s in result.sources) == ["l", "s"]
    for source, part in zip(result.sources, (where[1], where[3]), strict=True):
        [span] = source.spans
        assert near(span.start, part[0], text) and near(span.end, part[1], text)
        assert span.also_in_count >= 8
    assert result.coverage == pytest.approx(
        (where[1][1] - where[1][0] + where[3][1] - where[3][0]) / len(text), abs=0.02
    )


async def test_a_search_reads_the_postings_in_bounded_calls(
    index: Index, standalone_store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However long the text, one store call reads at most PASSAGE_KEYS_PER_CALL postings; the answer
    does not depend on how the keys are split into calls."""
    sources = {f"src{i}": " ".join(words(400 + i, 600)) for i in range(5)}
    await index.check("p", [Document(i, t) for i, t in sources.items()])
    text, where = essay([" ".join(words(410, 2500)), " ".join(sources["src4"].split()[100:200])])
    whole = await index.passages("p", text)
    sent: list[int] = []
    postings = standalone_store.postings

    async def counted(k: keys.CollectionKeys, fingerprint_keys: bytes) -> Postings:
        sent.append(len(fingerprint_keys) // fingerprints.KEY_BYTES)
        return await postings(k, fingerprint_keys)

    monkeypatch.setattr(standalone_store, "postings", counted)
    monkeypatch.setattr(keys, "PASSAGE_KEYS_PER_CALL", 100)
    assert await index.passages("p", text) == whole
    distinct = len(fingerprints.wanted(fingerprints.features(text).keys)) // fingerprints.KEY_BYTES
    assert max(sent) == 100 and sum(sent) == distinct and len(sent) == -(-distinct // 100)
    [source] = whole.sources
    assert source.id == "src4" and near(source.spans[0].start, where[1][0], text)


async def test_each_passage_gets_its_best_source_before_a_further_copy_takes_a_place(index: Index) -> None:
    """A passage held by 20 stored documents beside one held by one: with limit 10 both passages'
    sources are listed (not ten copies of the first), the 19 other copies are grouped under the first
    passage, and coverage is the share inside the spans returned."""
    common, rare = " ".join(words(800, 150)), " ".join(words(801, 80))
    docs = [Document(f"c{i:02}", f"{' '.join(words(900 + i, 200))}\n\n{common}") for i in range(20)]
    docs.append(Document("rare", f"{' '.join(words(950, 200))}\n\n{rare}\n\n{' '.join(words(951, 50))}"))
    await index.check("p", docs)
    text, where = essay([" ".join(words(960, 100)), common, " ".join(words(961, 100)), rare])
    result = await index.passages("p", text, limit=10)
    assert [s.id for s in result.sources][1:] == ["rare"]
    first, second = result.sources
    [copied] = first.spans
    assert first.id.startswith("c")
    assert near(copied.start, where[1][0], text) and near(copied.end, where[1][1], text)
    assert copied.also_in_count == 19 and len(copied.also_in) == passage_search.ALSO_IN_SHOWN
    assert {c.id for c in copied.also_in} < {d.id for d in docs[:20]} - {first.id}
    [alone] = second.spans
    assert alone.also_in_count == 0 and alone.also_in == []
    assert near(alone.start, where[3][0], text) and near(alone.end, where[3][1], text)
    spans = [alignment.Span(s.start, s.end, 0, 0) for src in result.sources for s in src.spans]
    assert result.coverage == round(alignment.coverage(len(text), spans), 4) == result.coverage_all
    copied_chars = where[1][1] - where[1][0] + where[3][1] - where[3][0]
    assert result.coverage == pytest.approx(copied_chars / len(text), abs=0.02)
    assert (result.documents, result.more_sources) == (21, 0)

    cut = await index.passages("p", text, limit=1)
    [only] = cut.sources
    assert only.id == first.id and only.spans == first.spans and cut.more_sources == 1
    assert cut.coverage == pytest.approx((where[1][1] - where[1][0]) / len(text), abs=0.02)
    assert cut.coverage_all == result.coverage_all and cut.documents == 21


async def test_offsets_are_code_points_of_the_texts_as_given(index: Index) -> None:
    stored = "Ünïcode prefix 日本 — " + " ".join(words(7, 80)) + " ✓ suffix"
    await index.check("p", [Document("u", stored)])
    chunk = " ".join(stored.split()[10:60])
    text = "Ça commence: " + chunk.upper().replace(" ", "  \n ") + " ... fin"
    [source] = (await index.passages("p", text)).sources
    [span] = source.spans
    assert text[span.start : span.end].split()[0].lower() == chunk.split()[0]
    assert text[span.start : span.end].split()[-1].lower() == chunk.split()[-1]
    assert stored[span.source_start : span.source_end] == chunk


async def test_a_verbatim_passage_of_the_guaranteed_length_is_always_found(index: Index) -> None:
    docs = [Document(f"d{i}", " ".join(words(1000 + i, 400))) for i in range(30)]
    await index.check("p", docs)
    rng = random.Random(3)
    for trial in range(40):
        doc = rng.choice(docs)
        at = rng.randrange(0, 400 - GUARANTEE_WORDS)
        chunk = " ".join(doc.text.split()[at : at + GUARANTEE_WORDS])
        text = " ".join(words(5000 + trial, 200)) + " " + chunk + " " + " ".join(words(6000 + trial, 200))
        result = await index.passages("p", text, min_words=1)
        assert doc.id in [s.id for s in result.sources], (trial, at)


async def test_a_text_with_nothing_copied_gets_no_span(index: Index) -> None:
    await index.check("p", [Document(f"d{i}", " ".join(words(i, 500))) for i in range(30)])
    for seed in range(20):
        result = await index.passages("p", " ".join(words(9000 + seed, 1500)))
        assert result.sources == [] and result.coverage == 0.0


async def test_lightly_edited_passage_is_one_span(index: Index) -> None:
    source = " ".join(words(1, 800))
    await index.check("p", [Document("s", source)])
    chunk = source.split()[200:500]
    rng = random.Random(4)
    for i in rng.sample(range(len(chunk)), 24):  # 8% of the words substituted
        chunk[i] = rng.choice(VOCABULARY)
    del chunk[50], chunk[150]
    text = " ".join(words(2, 200)) + " " + " ".join(chunk) + " " + " ".join(words(3, 200))
    [found] = (await index.passages("p", text)).sources
    assert len(found.spans) == 1


async def test_replacing_and_deleting_remove_the_old_passages(
    standalone_store: RedisStore, redis_url: str
) -> None:
    index = Index(standalone_store)
    await index.create_collection(CollectionParams.create("p", passages=True))
    first, second = " ".join(words(1, 300)), " ".join(words(2, 300))
    await index.check("p", [Document("a", first)])
    assert [s.id for s in (await index.passages("p", first)).sources] == ["a"]
    await index.put("p", Document("a", second))
    assert (await index.passages("p", first)).sources == []
    assert [s.id for s in (await index.passages("p", second)).sources] == ["a"]
    await index.check("p", [Document("b", first)])
    await index.delete_document("p", "a")
    assert [s.id for s in (await index.passages("p", first + " " + second)).sources] == ["b"]
    await index.delete_document("p", "b")
    client = redis.Redis.from_url(redis_url)
    try:
        assert passage_keys(client, "p") == []  # no posting and no blob left behind
        await index.check("p", [Document("c", first)])
        assert passage_keys(client, "p") != []
        await index.delete_collection("p")
        assert client.keys("nd:p:*") == []
    finally:
        client.close()


async def test_max_documents_evicts_passages_too(standalone_store: RedisStore, redis_url: str) -> None:
    index = Index(standalone_store)
    params = CollectionParams.create("m", passages=True, max_documents=2)
    await index.create_collection(params)
    texts = [" ".join(words(i, 200)) for i in range(70)]
    for i, t in enumerate(texts):
        await index.check("m", [Document(f"d{i}", t)])
    assert (await index.passages("m", texts[0])).sources == []  # evicted at once
    assert [s.id for s in (await index.passages("m", texts[-1])).sources] == ["d69"]
    client = redis.Redis.from_url(redis_url)
    try:  # reclaimed: blobs of at most the live documents (and those not reclaimed yet) remain
        blobs = sum(client.hlen(k) for k in client.keys("nd:m:*:p:*"))
        assert blobs <= 2 + 64
    finally:
        client.close()


async def test_expired_documents_lose_their_passages(standalone_store: RedisStore, redis_url: str) -> None:
    index = Index(standalone_store)
    params = CollectionParams.create("t", passages=True, ttl_seconds=1)
    await index.create_collection(params)
    old = " ".join(words(1, 200))
    await index.check("t", [Document("old", old)])
    assert [s.id for s in (await index.passages("t", old)).sources] == ["old"]
    await asyncio.sleep(1.2)
    assert (await index.passages("t", old)).sources == []  # expired: gone for clients at once
    await index.check("t", [Document("new", " ".join(words(2, 200)))])  # a write reclaims
    client = redis.Redis.from_url(redis_url)
    try:
        assert sum(client.hlen(k) for k in client.keys("nd:t:*:p:*")) == 1
        # the postings left are exactly the new document's: one per distinct key of its blob
        new = fingerprints.features(" ".join(words(2, 200)))
        keys = fingerprints.wanted(new.grams[new.selected])  # distinct, as indexed
        distinct = len(keys) // fingerprints.KEY_BYTES
        state = client.hgetall("nd:{t}:state")
        assert int(state[b"pN"]) == distinct == postings(client, "t")
    finally:
        client.close()


async def test_collections_without_passages_refuse_the_search(standalone_store: RedisStore) -> None:
    index = Index(standalone_store)
    await index.create_collection(CollectionParams.create("plain"))
    with pytest.raises(CollectionConflict, match="without passages"):
        await index.passages("plain", "some text")
    with pytest.raises(InvalidInput, match="min_words"):
        await index.passages("plain", "x", min_words=0)


async def test_passages_are_a_parameter_of_the_entry() -> None:
    params = CollectionParams.create("off").to_dict()
    assert params["passages"] is False and CollectionParams.from_dict(params).passages is False
    on = CollectionParams.create("on", passages=True)
    assert CollectionParams.from_dict(on.to_dict()) == on
    with pytest.raises(InvalidParameters, match="passages"):
        CollectionParams.create("x", passages="yes")  # type: ignore[arg-type]


async def test_module_and_lua_paths_write_the_same_passage_index(tmp_path: Path) -> None:
    """The passage step: ND.PASSAGES on the embedded server, Lua elsewhere (the index groups are strings,
    the blob groups hashes)."""
    servers = [EmbeddedValkey(tmp_path / "module"), EmbeddedValkey(tmp_path / "lua", module=False)]
    answers, dumps = [], []
    for server in servers:
        server.start()
        store = RedisStore.from_url(server.url)
        try:
            index = Index(store)
            await index.create_collection(CollectionParams.create("p", passages=True))
            docs = [Document(f"d{i % 80}", " ".join(words(i, 300))) for i in range(120)]  # 40 replaced
            for start in range(0, len(docs), 25):
                await index.check("p", docs[start : start + 25])
            await index.delete_document("p", "d7")
            found = await index.passages("p", docs[3].text + " " + docs[83].text + " " + docs[89].text)
            answers.append([(s.id, s.containment, s.spans) for s in found.sources])
            client = redis.Redis.from_url(server.url)
            try:
                dumps.append(  # key names without the collection's random generation
                    {
                        tuple(k.split(b":")[3:]): (
                            client.hgetall(k) if client.type(k) == b"hash" else client.get(k)
                        )
                        for k in client.keys("nd:p:*")
                        if k.split(b":")[3] in (b"f", b"p")
                    }
                )
            finally:
                client.close()
        finally:
            await store.close()
            server.stop()
    assert answers[0] == answers[1] and sorted(a[0] for a in answers[0]) == ["d3", "d9"]
    assert dumps[0] == dumps[1] and dumps[0]


def test_attribution_is_the_greedy_one_and_places_every_source_once() -> None:
    """alignment.attribute (a lazy greedy) against the plain greedy, on random spans: the same sources
    in the same order with the same spans; every source is either attributed or a copy under a span it
    overlaps, and never both for one span."""
    rng = random.Random(4)
    for _ in range(200):
        found = []
        for n in range(rng.randint(1, 12)):
            spans, at = [], rng.randint(0, 50)
            for _ in range(rng.randint(1, 4)):
                start = at + rng.randint(0, 60)
                at = start + rng.randint(5, 120)
                hits = rng.randint(1, 9)
                span = alignment.Span(start, at, 0, 0)
                spans.append(alignment.Aligned(span, 0, 0, hits, hits, rng.choice((0, 0, 1, 2))))
            found.append(alignment.Found(n, round(rng.random(), 2), f"s{n}", spans))
        order = alignment.attribute(found)

        expected, covered, left = [], [], sorted(found, key=lambda f: (-f.containment, f.key))
        while left:
            scored = []
            for rank, f in enumerate(left):
                new = [
                    a
                    for a in f.spans
                    if 2 * sum(1 for k in range(a.span.start, a.span.end) if k not in covered)
                    >= a.span.end - a.span.start
                ]
                gain = len({k for a in new for k in range(a.span.start, a.span.end)} - set(covered))
                if gain:
                    scored.append((gain, rank, f, new))
            if not scored:
                break
            # near ties (within NEAR_TIE_WORDS words of the best gain): fewest differing edge words,
            # then the least gain, then the most hits, then the rank
            top = max(g for g, *_ in scored)
            tie = alignment.NEAR_TIE_WORDS * alignment._CHARS_PER_WORD
            close = [c for c in scored if c[0] >= top - tie]
            g, _, f, new = min(
                close, key=lambda c: (sum(a.differing for a in c[3]), c[0], -sum(a.hits for a in c[3]), c[1])
            )
            best = (g, f, new)
            expected.append((best[1].payload, [a.span for a in best[2]]))
            covered += [k for a in best[2] for k in range(a.span.start, a.span.end)]
            left.remove(best[1])
        assert [(f.payload, [t.span.span for t in spans]) for f, spans in order] == expected

        placed = {(f.payload, id(t.span)) for f, spans in order for t in spans}
        for _, spans in order:
            for t in spans:
                for f, copy in t.copies:
                    assert (f.payload, id(copy)) not in placed and copy.span.start < t.span.span.end
                    assert copy.span.end > t.span.span.start
                    placed.add((f.payload, id(copy)))
                assert len({f.payload for f, _ in t.copies}) == len(t.copies)
        assert {payload for payload, _ in placed} == {f.payload for f in found}
