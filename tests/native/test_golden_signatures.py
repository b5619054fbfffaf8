"""Golden vectors of the library face: MinHash signatures and band keys must never change (stored
indexes and library users' signatures depend on them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neardup import sketch

GOLDEN: list[dict[str, Any]] = json.loads((Path(__file__).parent / "golden_signatures.json").read_text())


def test_golden_file_covers_every_case() -> None:
    assert len(GOLDEN) >= 40
    assert {entry["shingle"] for entry in GOLDEN} == {"word", "char"}


@pytest.mark.parametrize("isa", sketch.available_isas())
def test_signatures_match_golden_vectors(isa: str) -> None:
    for entry in GOLDEN:
        got = sketch.signature(
            entry["text"],
            num_perm=entry["num_perm"],
            seed=entry["seed"],
            shingle=entry["shingle"],
            size=entry["size"],
            isa=isa,
        )
        assert got.tolist() == entry["signature"], (isa, entry["text"], entry["num_perm"])


def test_band_keys_match_golden_vectors() -> None:
    for entry in GOLDEN:
        sig = np.array(entry["signature"], dtype=np.uint32)
        keys = sketch.band_keys(sig.reshape(1, -1), 4, 4)[0]
        assert [str(k) for k in keys.tolist()] == entry["band_keys_4x4"], entry["text"]


def test_batch_and_threads_give_the_same_signatures() -> None:
    texts = [entry["text"] for entry in GOLDEN if entry["num_perm"] == 128]
    one_by_one = np.stack([sketch.signature(t) for t in texts])
    assert np.array_equal(sketch.signatures(texts), one_by_one)
    assert np.array_equal(sketch.signatures(texts * 5, threads=3), np.concatenate([one_by_one] * 5))
