"""The C++ tokenizer, shingler and hashing against the pure-Python reference (tests/reference.py)."""

from __future__ import annotations

import sys
import sysconfig
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neardup import sketch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import reference as ref

# Characters chosen to exercise every rule: ASCII, compatibility forms, combining marks (composing and
# not), final sigma and its case-ignorable context, dotted capital I, space-less scripts, Hangul jamo,
# emoji with modifiers and joiners, lone surrogates, unusual white space and digits.
TRICKY = list(
    "aZ09 _-'.:,\t\n\x0b\x1c\u00a0\u2003\u3000"
    "éßª²½µ\u00ad"
    "\u0301\u0308\u0327\u0345\u20dd\u0342"
    "ΣσςΑΐΟΔ"
    "İIı"  # noqa: RUF001 - dotless i on purpose
    "Дж"
    "كَّ٣"
    "हि्"
    "กั"
    "漢字かカｶーﾞ"
    "한\u1100\u1161\u11a8\uac00"
    "ﬁﬃ㎏①ⅫＡＢℌǄǅ"
    "🙂👍🏽\u200d\ufe0f"
    "\ud800\udfff"
)
tricky_text = st.text(alphabet=st.sampled_from(TRICKY), max_size=40)
# Arbitrary text only where this Python's Unicode data is the one compiled into the core.
SAME_UNICODE = unicodedata.unidata_version == sketch.UNICODE_VERSION
any_text = st.text(max_size=40) if SAME_UNICODE else tricky_text


@settings(max_examples=400, deadline=None)
@given(text=tricky_text | any_text)
def test_words_match_reference(text: str) -> None:
    assert sketch.tokens(text) == ref.words(text)


@settings(max_examples=300, deadline=None)
@given(text=tricky_text | any_text, collapse=st.booleans())
def test_char_tokens_match_reference(text: str, collapse: bool) -> None:
    assert sketch.tokens(text, shingle="char", collapse_whitespace=collapse) == ref.char_tokens(
        text, collapse=collapse
    )


@settings(max_examples=200, deadline=None)
@given(
    text=tricky_text | any_text,
    normalize=st.booleans(),
    lowercase=st.booleans(),
)
def test_words_match_reference_with_steps_turned_off(text: str, normalize: bool, lowercase: bool) -> None:
    got = sketch.tokens(text, normalize=normalize, lowercase=lowercase)
    assert got == ref.words(text, normalize=normalize, lowercase=lowercase)


@settings(max_examples=200, deadline=None)
@given(
    text=tricky_text | any_text,
    size=st.integers(1, 6),
    shingle=st.sampled_from(["word", "char"]),
    seed=st.integers(0, 2**64 - 1),
)
def test_signature_matches_reference(text: str, size: int, shingle: str, seed: int) -> None:
    got = sketch.signature(text, num_perm=16, size=size, shingle=shingle, seed=seed)
    want = ref.signature(text, num_perm=16, size=size, shingle=shingle, seed=seed)
    assert np.array_equal(got, want)


# Runs of ASCII longer than 8 code units among other characters: the non-ASCII paths copy ASCII runs
# 8 code units at a time (texts stored by Python with 1, 2 or 4 bytes per code unit).
ascii_runs = st.text(alphabet="aZ09 .Q-xyzW\n", min_size=0, max_size=30)
mixed_text = st.lists(ascii_runs | tricky_text, min_size=1, max_size=8).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=mixed_text, size=st.integers(1, 6), lowercase=st.booleans())
def test_mixed_texts_with_ascii_runs_match_reference(text: str, size: int, lowercase: bool) -> None:
    got = sketch.signature(text, num_perm=16, size=size)
    assert np.array_equal(got, ref.signature(text, num_perm=16, size=size))
    assert sketch.tokens(text, lowercase=lowercase) == ref.words(text, lowercase=lowercase)


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.text(alphabet="abcxyzABC019éΣ", min_size=1, max_size=12), max_size=30))
def test_plain_text_follows_the_one_line_definition(words: list[str]) -> None:
    # Without marks or space-less scripts, the words are re.findall(r"[^\W_]+", NFKC(t).lower()).
    text = " ,".join(words)
    assert sketch.tokens(text) == ref.plain_words(text)


def real_texts() -> list[str]:
    # Real text shipped with Python: sources and docstrings of the standard library.
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))[:60]
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


def test_real_texts_match_reference() -> None:
    texts = real_texts()
    assert len(texts) >= 20
    for text in texts:
        assert sketch.tokens(text) == ref.words(text)
    sigs = sketch.signatures(texts, num_perm=32)
    for text, sig in zip(texts[:10], sigs[:10], strict=True):
        assert np.array_equal(sig, ref.signature(text, num_perm=32))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Ünïcödé Straße", ["ünïcödé", "straße"]),
        ("ΟΔΟΣ ΣΑΣ", ["οδος", "σας"]),  # final sigma at word ends
        ("ﬁle ½", ["file", "1", "2"]),  # compatibility forms: NFKC
        ("e\u0301te\u0301", ["été"]),  # combining accents compose
        ("كَتَبَ", ["كَتَبَ"]),  # Arabic vowel marks stay in the word
        ("漢字かな", ["漢", "字", "か", "な"]),  # no spaces: one character per word
        ("abc漢def", ["abc", "漢", "def"]),
        ("snake_case x-y", ["snake", "case", "x", "y"]),
        ("", []),
        ("  \n\t ", []),
        ("!!! ??? ...", []),
    ],
)
def test_examples(text: str, words: list[str]) -> None:
    assert sketch.tokens(text) == words
