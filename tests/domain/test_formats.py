"""Sketch formats side by side on a real server and a real cluster: format 1 (the MinHash slots),
format 2 estimate (b-bit one-permutation bins), format 3 (the same bins, or every shingle of a short
document) and format 2 exact (sorted shingle hashes, sketches of different sizes in one batch). Every
one checks, replaces, deletes, recognises an unchanged retry and reclaims evicted documents (which
needs the band keys of what it stored); a registry entry written before format 2 is read as format 1."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from neardup import sketch
from neardup.domain import CollectionParams, Document, Index
from neardup.domain.banding import readable, sketch_texts, stored_band_keys
from neardup.domain.index import _decode_params, _encode_params
from neardup.storage import Store
from tests import reference as ref

pytestmark = pytest.mark.anyio

FORMATS: dict[str, dict[str, Any]] = {
    "v1": {"sketch_format": 1},
    "v2": {"sketch_format": 2},
    "v3": {},
    "exact": {"verify": "exact"},
}


def text(seed: int, length: int = 150) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(400)}" for _ in range(length))


def edited(base: str, every: int) -> str:
    words = base.split()
    return " ".join("changed" if i % every == 0 else w for i, w in enumerate(words))


@pytest.mark.parametrize("fmt", FORMATS)
async def test_each_format_checks_replaces_deletes_and_reclaims(store: Store, fmt: str) -> None:
    index = Index(store)
    params = CollectionParams.create("f", threshold=0.7, max_documents=6, **FORMATS[fmt])
    await index.create_collection(params)
    base, far = text(1), text(2)
    near = edited(base, 60)  # 2-3 words of 150 changed: Jaccard of 5-shingles about 0.86
    jaccard = ref.jaccard(ref.shingles(base), ref.shingles(near))
    assert 0.75 < jaccard < 0.95
    # one batch: sketches of several sizes (exact mode sends them with offsets)
    results = await index.check(
        "f", [Document("a", base), Document("b", near), Document("c", far), Document("d", "short text")]
    )
    assert [r.duplicate_of for r in results] == [None, "a", None, None]
    similarity = results[1].matches[0].similarity
    if fmt == "exact":
        assert similarity == pytest.approx(jaccard, abs=1e-6)  # the true Jaccard, not an estimate
    else:
        assert abs(similarity - jaccard) < 0.15
    # an unchanged retry keeps its place; a replacement removes the old version's band entries
    [again] = await index.check("f", [Document("a", base)])
    assert not again.duplicate and again.inserted
    [replaced] = await index.check("f", [Document("a", text(3))])
    assert not replaced.duplicate
    assert [m.id for m in await index.query("f", base)] == ["b"]
    await index.delete_document("f", "b")
    assert await index.query("f", base) == []
    # max_documents 6: later writes reclaim the oldest, by the band keys of their stored sketches
    for k in range(8):
        await index.check("f", [Document(f"n{k}", text(10 + k))])
    assert (await index.get_collection("f")).documents <= 6 + 2
    assert await index.query("f", far) == []  # "c" was evicted: it no longer matches


@pytest.mark.parametrize("fmt", FORMATS)
def test_stored_sketch_gives_back_its_band_keys(fmt: str) -> None:
    params = CollectionParams.create("f", **FORMATS[fmt])
    batch = sketch_texts(params, [text(1), "", text(2, 30)])
    for i in range(3):
        keys = stored_band_keys(params, batch.stored(i))
        assert keys == (b"" if batch.empty[i] else batch.band_keys[i].astype("<u8").tobytes())
    assert stored_band_keys(params, b"garbage") == b""
    # what a batch sends is each document's stored sketch, one after the other
    assert batch.signature_bytes == b"".join(batch.stored(i) for i in range(3))
    if fmt in ("v2", "v3"):
        assert len(batch.stored(0)) == params.stored_bytes <= 4 * params.num_perm
    if fmt != "v1":  # only the bands * rows slots are computed: the keys of the whole signature
        full = sketch.signatures([text(1), "", text(2, 30)], num_perm=params.num_perm)
        keys = sketch.band_keys(full, params.bands, params.rows, sketch_format=params.sketch_format)
        assert (keys == batch.band_keys).all()


def test_registry_entries_before_format_2_are_format_1() -> None:
    new = CollectionParams.create("c")
    assert (new.sketch_format, new.verify) == (3, "estimate") and new.bins > 0
    assert CollectionParams.create("c", verify="exact").sketch_format == 2  # exact mode is format 2's
    old = CollectionParams.create("c", sketch_format=1)
    # a format-1 entry is written as before format 2 (an older service reads it), and read back as v1
    assert "sketch_format" not in old.to_dict() and "bins" not in old.to_dict()
    entry = orjson.dumps({"params": old.to_dict(), "gen": "g"})
    assert _decode_params(entry).params == old
    assert _decode_params(_encode_params(new, "g")).params == new
    legacy = dict(name="c", threshold=0.8, num_perm=128, shingle="word", size=5, bands=16, rows=8, seed=1)
    legacy.update(ttl_seconds=None, max_documents=None, expected_documents=None)
    assert CollectionParams.from_dict(legacy) == CollectionParams.create("c", sketch_format=1)


def test_format_3_reads_only_its_own_sketches() -> None:
    # Formats 2 and 3 have the same band count and bins here: a sketch of the other one (or one with a
    # mode byte no writer makes) is skipped, never compared, and gives no band keys.
    two = CollectionParams.create("f", sketch_format=2)
    three = CollectionParams.create("f", sketch_format=3)
    assert (three.bins, three.stored_bytes) == (two.bins, two.stored_bytes + 1)
    texts = [text(1), text(2, 30), text(3, 900)]
    s2, s3 = sketch_texts(two, texts), sketch_texts(three, texts)
    assert {s3.stored(i)[1 + 8 * three.bands] for i in range(3)} >= {0, 16}  # dense and sparse documents
    for i in range(3):
        assert readable(three, s3.stored(i)) and not readable(two, s3.stored(i))
        assert readable(two, s2.stored(i)) and not readable(three, s2.stored(i))
        assert stored_band_keys(two, s3.stored(i)) == b""
        bad = bytearray(s3.stored(i))
        bad[1 + 8 * three.bands] = 1
        assert not readable(three, bytes(bad))
    assert _decode_params(_encode_params(three, "g")).params == three
