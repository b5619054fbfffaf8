"""The passage fingerprint format (native/passages.cpp, neardup.domain.fingerprints): a pure-Python twin
of the definition, golden blobs, and the sampling guarantee."""

from __future__ import annotations

import hashlib
import random
import unicodedata

import numpy as np
import pytest

from neardup.domain import fingerprints
from neardup.domain.fingerprints import GUARANTEE_WORDS, K, W

M64 = 2**64 - 1
TOKEN_SEED, TOKEN_MUL = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F
GRAM_MUL = 0x100000001B3 * 2 + 1
PHASE_SALT = int.from_bytes(b"ndphase1", "big")


def fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    return h ^ (h >> 33)


def is_word_char(ch: str) -> bool:
    return ch.isalnum()


def reference(text: str) -> tuple[list[int], list[int], list[int], list[int]]:
    """Words, k-gram hashes and sampling, written from the definition in native/passages.cpp (texts
    of alphanumerics and separators only: no combining marks, no scripts without spaces)."""
    starts, ends, tokens = [], [], []
    i = 0
    while i < len(text):
        if not is_word_char(text[i]):
            i += 1
            continue
        j = i
        h = TOKEN_SEED
        while j < len(text) and is_word_char(text[j]):
            lower = text[j].lower()
            cp = ord(lower) if len(lower) == 1 else ord(text[j])
            h = ((h ^ cp) * TOKEN_MUL) & M64
            h ^= h >> 29
            j += 1
        starts.append(i)
        ends.append(j)
        tokens.append(fmix64(h))
        i = j
    grams = []
    for j in range(len(tokens) - K + 1):
        s = 0
        for t in tokens[j : j + K]:
            s = (s * GRAM_MUL + t) & M64
        grams.append(fmix64(s))
    selected: list[int] = []
    if grams:
        fold = 0
        for g in grams:
            fold ^= g
        phase = fmix64(fold ^ PHASE_SALT) % W
        selected = list(range(phase, len(grams), W)) if phase < len(grams) else [phase % len(grams)]
    return starts, ends, grams, selected


TEXTS = {
    "empty": "",
    "short": "Only four words here.",
    "ascii": " ".join(f"word{i % 37} Alpha{i % 11}" for i in range(120)),
    "accents": "Ça été très CURIEUX: l'élève naïve à Zürich, Ölmühle und Straße. " * 12,
    "mixed": "Prices: 12.50 EUR (VAT 20%)\n\ttabs\tand  spaces; état-major, O'Brien's 3rd try. " * 9,
    # long words and wide gaps: varints of two bytes
    "wide": (" " * 130).join(("Ü" * 140 + f"{i % 9}") if i % 3 == 0 else f"w{i % 17}" for i in range(90)),
}
#: sha256 of pack(features(text)): the blob the service sends, which the store now keeps byte for byte
#: (test_passage_module.py reads it back from both store paths). Changing any of them changes stored
#: passages. ``python tests/native/test_passages.py`` prints them from the code (golden_digests). They
#: did not change when the store stopped cutting keys to 3 bytes: what is sent stayed the same, and
#: the digests of the 3-byte stored form were dropped with it.
GOLDEN = {
    "empty": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "short": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "ascii": "c63f55006fb7baf20df15f29b545b4fa8bdaa5283e7442f23b8558df83df6120",
    "accents": "ec5ebbe418dc1b16d0b6777b9e31116ea19b64b050d4fc60f2d0f0916478c4ef",
    "mixed": "fb8fa2d338f871b60a9e5e72faa1d5ce37f48d64090bf754b7859c8401aa2912",
    "wide": "d50a08ce052e728e597b3464cfecbeac74915fe0c40edeff1022773198e50c93",
}


def golden_digests() -> dict[str, str]:
    """GOLDEN as the code computes it: to print when the blob format is (re)defined, never to make a
    failing test pass."""
    return {name: hashlib.sha256(fingerprints.blob(text)).hexdigest() for name, text in sorted(TEXTS.items())}


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_the_native_core_follows_the_definition(name: str) -> None:
    text = TEXTS[name]
    f = fingerprints.features(text)
    starts, ends, grams, selected = reference(text)
    assert f.starts.tolist() == starts and f.ends.tolist() == ends
    assert f.grams.tolist() == grams
    assert f.selected.tolist() == selected


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_golden_blobs(name: str) -> None:
    blob = fingerprints.blob(TEXTS[name])  # what the service sends and the store keeps, built in C++
    assert blob == fingerprints.pack(fingerprints.features(TEXTS[name]))  # the documented layout
    assert hashlib.sha256(blob).hexdigest() == GOLDEN[name]
    if blob:
        assert blob[0] == fingerprints.BLOB_FORMAT == 3
        source = fingerprints.unpack(blob)
        f = fingerprints.features(TEXTS[name])
        assert source.words == len(f.starts)
        keys = f.grams[f.selected]
        assert source.keys.tolist() == (keys & np.uint64(2**32 - 1)).tolist()  # whole 4-byte keys
        assert source.word.tolist() == f.selected.tolist()
        assert source.start.tolist() == f.starts[f.selected].tolist()
        assert source.end.tolist() == f.ends[f.selected + K - 1].tolist()
        assert source.nibbles.tolist() == f.nibbles.tolist()


def test_a_blob_holds_its_counts_keys_and_positions_compactly() -> None:
    for name in ("ascii", "accents", "mixed", "wide"):
        blob = fingerprints.blob(TEXTS[name])
        f = fingerprints.features(TEXTS[name])
        words, m, at = fingerprints.header(blob)
        assert (words, m) == (len(f.starts), len(f.selected)) and at <= 5
        low = f.grams[f.selected] & np.uint64(2**32 - 1)
        assert fingerprints.unpack_keys(blob[at : at + 4 * m]).tolist() == low.tolist()
        # then a byte of word step a key, its start step and length (1 or 2 varint bytes each here), and
        # a nibble a word
        assert at + 7 * m + (words + 1) // 2 <= len(blob) <= at + 9 * m + (words + 1) // 2
    wide = fingerprints.unpack(fingerprints.blob(TEXTS["wide"]))
    # 2-byte varints
    assert int(np.diff(wide.start).max()) >= 128 and int((wide.end - wide.start).max()) >= 128


def test_a_blob_of_another_format_or_cut_short_is_refused() -> None:
    blob = bytearray(fingerprints.blob(TEXTS["ascii"]))
    blob[0] = 4
    with pytest.raises(ValueError, match="format 4"):
        fingerprints.unpack(bytes(blob))
    with pytest.raises(ValueError, match="truncated"):
        fingerprints.unpack(fingerprints.blob(TEXTS["ascii"])[:-60])
    with pytest.raises(ValueError, match="truncated"):
        fingerprints.unpack(b"\3\xff")  # the counts cut short
    with pytest.raises(ValueError, match="longer than its contents"):
        fingerprints.unpack(fingerprints.blob(TEXTS["ascii"]) + b"\0")


def test_offsets_are_code_points_of_the_text_as_given() -> None:
    text = "🙂 Ǆemal ﬁne e\u0301te 日本語 x"  # no NFKC: ligatures and combining marks stay where they are
    f = fingerprints.features(text)
    assert [text[a:b] for a, b in zip(f.starts, f.ends, strict=True)] == [
        "Ǆemal", "ﬁne", "e\u0301te", "日", "本", "語", "x",
    ]  # fmt: skip
    assert unicodedata.normalize("NFKC", "ﬁ") == "fi"  # (what the signature path would have done)


def test_a_shared_run_of_the_guaranteed_length_holds_a_selected_fingerprint_of_either_text() -> None:
    """A search reads the postings of every k-gram of the text; a stored text selects a k-gram in every
    W consecutive ones: a run of GUARANTEE_WORDS words both share holds a selected k-gram of each."""
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(3000)]
    for trial in range(300):
        shared = [rng.choice(vocabulary) for _ in range(GUARANTEE_WORDS)]
        a = [rng.choice(vocabulary) for _ in range(rng.randrange(0, 60))] + shared
        b = shared + [rng.choice(vocabulary) for _ in range(rng.randrange(0, 60))]
        fa, fb = fingerprints.features(" ".join(a)), fingerprints.features(" ".join(b))
        assert np.isin(fa.grams[fa.selected], fb.grams).any(), trial
        assert np.isin(fb.grams[fb.selected], fa.grams).any(), trial
        gaps = np.diff(np.concatenate([[-1], fa.selected, [len(fa.grams)]]))
        assert gaps.max() <= W, trial


if __name__ == "__main__":
    print(golden_digests())
