"""Golden vectors of the exact sketch (tests/native/golden_exact_sketch.json, from the pure-Python
reference): band keys and the sorted shingle hashes must never change, on any ISA path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neardup import sketch

GOLDEN: list[dict[str, Any]] = json.loads((Path(__file__).parent / "golden_exact_sketch.json").read_text())
#: The salt of the exact mode's band keys (the service's, app/domain/banding.py), as stored.
EXACT_SALT = 0x6E6431642D763200


def test_golden_file_covers_every_case() -> None:
    assert len(GOLDEN) >= 40
    assert {entry["shingle"] for entry in GOLDEN} == {"word", "char"}
    assert any(entry["exact"] == [] for entry in GOLDEN)  # featureless texts: no shingle
    assert max(len(entry["exact"]) for entry in GOLDEN) > 16  # longer than one vector step


@pytest.mark.parametrize("isa", sketch.available_isas())
def test_exact_sketches_match_golden_vectors(isa: str) -> None:
    for entry in GOLDEN:
        opts = {
            "num_perm": entry["num_perm"],
            "seed": entry["seed"],
            "shingle": entry["shingle"],
            "size": entry["size"],
        }
        sigs, flat, offsets = sketch.exact_sketches([entry["text"]], isa=isa, **opts)  # type: ignore[arg-type]
        assert offsets.tolist() == [0, len(entry["exact"])]
        assert flat.tolist() == entry["exact"], (isa, entry["text"])
        keys = sketch.band_keys(sigs, entry["bands"], entry["rows"], salt=EXACT_SALT)[0]
        assert [str(k) for k in keys.tolist()] == entry["band_keys"], (isa, entry["text"])


def test_batches_and_threads_give_the_same_sets() -> None:
    texts = [entry["text"] for entry in GOLDEN if entry["num_perm"] == 128]
    _, flat, offsets = sketch.exact_sketches(texts * 3, threads=2)
    _, flat1, offsets1 = sketch.exact_sketches(texts)
    assert np.array_equal(flat, np.concatenate([flat1] * 3))
    assert offsets[-1] == 3 * offsets1[-1]


@pytest.mark.parametrize("isa", sketch.available_isas())
def test_exact_similarity_of_golden_sets_is_their_jaccard(isa: str) -> None:
    entries = [e for e in GOLDEN if e["num_perm"] == 128]
    sets = [np.array(e["exact"], dtype=np.uint32) for e in entries]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])]).astype(np.int64)
    flat = np.concatenate(sets).astype(np.uint32)
    for a in sets:
        got = sketch.exact_similarity(a, flat, offsets, isa=isa)  # type: ignore[arg-type]
        for b, value in zip(sets, got.tolist(), strict=True):
            union = len(set(a.tolist()) | set(b.tolist()))
            want = len(set(a.tolist()) & set(b.tolist())) / union if len(a) and len(b) else 0.0
            assert value == pytest.approx(want, abs=1e-7)
