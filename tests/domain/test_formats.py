"""The two verification modes side by side on a real server and a real cluster: the estimate sketch
(one-permutation bins, or every shingle of a short document) and exact mode (sorted shingle hashes,
sketches of different sizes in one batch). Each checks, replaces, deletes, recognises an unchanged retry
and reclaims evicted documents (which needs the band keys of what it stored); the registry entry carries
the stored format, and an entry of another one is refused."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from neardup import sketch
from neardup.domain import CollectionParams, Document, Index
from neardup.domain.banding import ESTIMATE_SALT, EXACT_SALT, readable, sketch_texts, stored_band_keys
from neardup.domain.errors import WrittenByNewerVersion
from neardup.domain.registry import FORMAT, decode_entry, encode_entry
from neardup.storage import Store
from tests import reference as ref

pytestmark = pytest.mark.anyio

FORMATS: dict[str, dict[str, Any]] = {
    "estimate": {},
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
    if fmt == "estimate":
        assert len(batch.stored(0)) == params.stored_bytes <= 4 * params.num_perm
    # only the bands * rows slots are computed: the keys of the whole signature
    full = sketch.signatures([text(1), "", text(2, 30)], num_perm=params.num_perm)
    salt = EXACT_SALT if fmt == "exact" else ESTIMATE_SALT
    keys = sketch.band_keys(full, params.bands, params.rows, salt=salt)
    assert (keys == batch.band_keys).all()


def test_registry_entry_round_trip_and_fence() -> None:
    for params in (CollectionParams.create("c"), CollectionParams.create("c", verify="exact", passages=True)):
        entry = encode_entry(params, "g")
        assert orjson.loads(entry)["format"] == FORMAT
        collection = decode_entry(entry)
        assert collection.params == params and (collection.keys.collection, collection.keys.gen) == ("c", "g")
    new = CollectionParams.create("c")
    assert (new.verify, new.bins, new.bands, new.rows) == ("estimate", 1408, 16, 6)
    assert CollectionParams.create("c", verify="exact").bins == 0
    entry = orjson.loads(encode_entry(new, "g"))
    for other in (None, 0, FORMAT + 1, "1"):
        entry["format"] = other
        with pytest.raises(WrittenByNewerVersion, match=f"stored format {other!r}"):
            decode_entry(orjson.dumps(entry))
    del entry["format"]
    with pytest.raises(WrittenByNewerVersion, match="stored format None"):
        decode_entry(orjson.dumps(entry))


def test_each_mode_reads_only_its_own_sketches() -> None:
    # A sketch of the other mode (or an estimate sketch with a mode byte no writer makes) is skipped,
    # never compared, and gives no band keys.
    estimate = CollectionParams.create("f")
    exact = CollectionParams.create("f", verify="exact")
    assert estimate.bands == exact.bands
    texts = [text(1), text(2, 30), text(3, 900)]
    a, b = sketch_texts(estimate, texts), sketch_texts(exact, texts)
    assert {a.stored(i)[1 + 8 * estimate.bands] for i in range(3)} >= {0, 16}  # dense and sparse documents
    for i in range(3):
        assert readable(estimate, a.stored(i)) and not readable(exact, a.stored(i))
        assert readable(exact, b.stored(i)) and not readable(estimate, b.stored(i))
        assert stored_band_keys(exact, a.stored(i)) == b""
        assert stored_band_keys(estimate, b.stored(i)) == b""
        bad = bytearray(a.stored(i))
        bad[1 + 8 * estimate.bands] = 1
        assert not readable(estimate, bytes(bad))
