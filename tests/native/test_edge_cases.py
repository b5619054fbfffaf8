"""Texts that break naive tokenizers: empty, huge, one endless word, surrogates, mixed scripts."""

from __future__ import annotations

import numpy as np

from app import sketch


def test_empty_and_wordless_texts_give_the_empty_signature() -> None:
    for text in ["", " ", "\n\t\u3000", "!!! ... ---", "___", "\u0301\u0301"]:
        sig = sketch.signature(text)
        assert (sig == sketch.EMPTY_SLOT).all(), repr(text)


def test_fewer_words_than_the_shingle_size_still_get_a_signature() -> None:
    one, two = sketch.signatures(["word", "two words"])
    assert not sketch.is_empty(one)[0] and not sketch.is_empty(two)[0]
    assert sketch.similarity(one, two.reshape(1, -1))[0] < 0.2
    assert sketch.similarity(one, sketch.signatures(["WORD!"]))[0] == 1.0


def test_repeated_shingles_count_once() -> None:
    a = "alpha beta gamma delta epsilon zeta"
    assert np.array_equal(sketch.signature(a), sketch.signature(" ".join([a] * 50)[: len(a)]))
    twice, thrice = sketch.signature(a + " " + a), sketch.signatures([a + " " + a + " " + a])
    assert sketch.similarity(twice, thrice)[0] == 1.0


def test_very_long_word_and_ten_megabyte_text() -> None:
    long_word = "x" * 1_000_003
    assert not sketch.is_empty(sketch.signature(long_word).reshape(1, -1))[0]
    assert sketch.tokens(long_word + " y") == [long_word, "y"]
    rng = np.random.default_rng(1)
    vocab = np.array([f"w{i}" for i in range(5000)])
    big = " ".join(rng.choice(vocab, size=1_800_000))
    assert len(big) > 10_000_000
    sig_a, sig_b = sketch.signatures([big, big.upper()])
    assert np.array_equal(sig_a, sig_b)


def test_ten_megabytes_of_non_ascii() -> None:
    big = "Ünïcödé ΣΑΣ 漢字 كَتَبَ e\u0301 " * 400_000
    assert len(big.encode()) > 10_000_000
    sig = sketch.signature(big)
    assert not sketch.is_empty(sig.reshape(1, -1))[0]


def test_lone_surrogates_mixed_scripts_emoji_and_marks_do_not_crash() -> None:
    texts = [
        "\ud800",
        "abc\udfffdef",
        "\udbff\udc00 pair written as two lone halves",
        "English Ελληνικά Русский العربية עברית हिन्दी 中文 日本語 한국어",
        "🙂👍🏽👨\u200d👩\u200d👧 emoji with modifiers and joiners",
        "a\u0301\u0302\u0303\u0304\u0305\u0306\u0307" * 100,
        "\u0345" * 50 + "Σ",
    ]
    sigs = sketch.signatures(texts)
    assert sigs.shape == (len(texts), 128)
    assert sketch.tokens("abc\udfffdef") == ["abc", "def"]


def test_case_and_whitespace_noise_do_not_change_word_signatures() -> None:
    text = "The Quick brown fox jumps over the lazy dog near the river bank"
    noisy = "  THE quick\tBrown\n\nfox   jumps over THE lazy dog, near the river-bank!  "
    assert np.array_equal(sketch.signature(text), sketch.signature(noisy))


def test_char_shingles_collapse_whitespace() -> None:
    a = sketch.signature("hello   world\n", shingle="char", size=3)
    b = sketch.signature("hello world", shingle="char", size=3)
    c = sketch.signature("hello   world\n", shingle="char", size=3, collapse_whitespace=False)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
