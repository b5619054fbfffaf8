"""Spans that rest on one shared k-gram (neardup.domain.alignment.SINGLE_HIT_DIFFERING): a listing both
texts follow (a man page's index: each entry a name and the same four words) shares one k-gram by
chance and agrees word by word through the repeated words; it is not a copied passage. A short
verbatim copy, which also rests on one k-gram, is still reported."""

from __future__ import annotations

import random

import numpy as np
import pytest

from neardup.domain import alignment, fingerprints


def listing(names: list[str]) -> str:
    return "\n".join(f"       {n}\n           org.freedesktop.systemd1(5)" for n in names)


def names(seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice("abcdefghijklmnop") for _ in range(8)) for _ in range(400)]


def spans(text: str, source: str) -> list[alignment.Aligned]:
    query = alignment.QueryIndex(fingerprints.features(text))
    return alignment.align(query, fingerprints.unpack(fingerprints.blob(source)), 20)


def shares_a_selected_k_gram(text: str, source: str) -> bool:
    f = fingerprints.features(source)
    return bool(np.isin(f.grams[f.selected], fingerprints.features(text).grams).any())


def test_a_listing_both_texts_follow_is_not_a_passage(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = names(0)
    # Two entries in common, in the middle of otherwise different listings: one shared k-gram, which
    # the source selects (where it does depends on the source's phase: the listing's start is moved
    # until it does).
    for first in range(60, 100):
        source = listing(pool[first:100] + pool[350:352] + pool[100:150])
        text = listing(pool[200:250] + pool[350:352] + pool[250:300])
        if shares_a_selected_k_gram(text, source):
            break
    else:
        pytest.fail("no listing whose shared k-gram the source selects")
    assert spans(text, source) == []
    monkeypatch.setattr(alignment, "SINGLE_HIT_DIFFERING", 10**9)  # without the rule: the whole listing
    (found,) = spans(text, source)
    assert found.hits == 1 and found.differing > 50 and found.last_word - found.first_word > 400


def test_a_short_verbatim_copy_on_one_k_gram_is_still_found() -> None:
    rng = random.Random(3)
    vocabulary = names(1)
    copied = " ".join(rng.choice(vocabulary) for _ in range(fingerprints.GUARANTEE_WORDS))
    source = " ".join(rng.choice(vocabulary) for _ in range(80)) + " " + copied + " " + "x " * 40
    text = "an essay of its own words " * 6 + copied + " and more of its own words " * 6
    (found,) = spans(text, source)
    assert found.differing == 0
    assert text[found.span.start : found.span.end] == copied
