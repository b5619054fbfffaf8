"""Golden vectors of sketch format 2 (tests/native/golden_v2.json, from the pure-Python reference):
band keys, b-bit one-permutation bins and exact shingle sets must never change, on any ISA path.
Format 1's vectors (golden.json) stay as they were: collections created before keep their bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neardup import sketch

GOLDEN: list[dict[str, Any]] = json.loads((Path(__file__).parent / "golden_v2.json").read_text())


def test_golden_file_covers_every_case() -> None:
    assert len(GOLDEN) >= 40
    assert {entry["shingle"] for entry in GOLDEN} == {"word", "char"}
    assert {entry["bits"] for entry in GOLDEN} == {2, 3}
    assert any(set(bytes.fromhex(e["bins_hex"])) == {0} for e in GOLDEN)  # featureless texts: all empty
    assert all(any(bytes.fromhex(e["bins_hex"])) for e in GOLDEN if e["exact"])


@pytest.mark.parametrize("isa", sketch.available_isas())
def test_estimate_sketches_match_golden_vectors(isa: str) -> None:
    for entry in GOLDEN:
        opts = {
            "num_perm": entry["num_perm"],
            "seed": entry["seed"],
            "shingle": entry["shingle"],
            "size": entry["size"],
        }
        sigs, bins = sketch.estimate_sketches(
            [entry["text"]], bins=entry["bins"], bits=entry["bits"], isa=isa, **opts
        )
        assert bins[0].tobytes().hex() == entry["bins_hex"], (isa, entry["text"], entry["bins"])
        keys = sketch.band_keys(sigs, entry["bands"], entry["rows"], sketch_format=2)[0]
        assert [str(k) for k in keys.tolist()] == entry["band_keys"], (isa, entry["text"])


@pytest.mark.parametrize("isa", sketch.available_isas())
def test_exact_sets_match_golden_vectors(isa: str) -> None:
    for entry in GOLDEN:
        opts = {
            "num_perm": entry["num_perm"],
            "seed": entry["seed"],
            "shingle": entry["shingle"],
            "size": entry["size"],
        }
        sigs, flat, offsets = sketch.exact_sketches([entry["text"]], isa=isa, **opts)
        assert offsets.tolist() == [0, len(entry["exact"])]
        assert flat.tolist() == entry["exact"], (isa, entry["text"])
        keys = sketch.band_keys(sigs, entry["bands"], entry["rows"], sketch_format=2)[0]
        assert [str(k) for k in keys.tolist()] == entry["band_keys"]


def test_format_2_band_keys_differ_from_format_1() -> None:
    sig = sketch.signatures(["one two three four five six seven eight"])
    one = sketch.band_keys(sig, 16, 8)
    two = sketch.band_keys(sig, 16, 8, sketch_format=2)
    assert not np.intersect1d(one, two).size
    with pytest.raises(ValueError, match="sketch_format"):
        sketch.band_keys(sig, 16, 8, sketch_format=4)


def test_batches_and_threads_give_the_same_bytes() -> None:
    texts = [entry["text"] for entry in GOLDEN if entry["num_perm"] == 128]
    one = [sketch.estimate_sketches([t])[1][0] for t in texts]
    _, many = sketch.estimate_sketches(texts * 4, threads=3)
    assert np.array_equal(many, np.concatenate([np.stack(one)] * 4))
    _, flat, offsets = sketch.exact_sketches(texts * 3, threads=2)
    _, flat1, offsets1 = sketch.exact_sketches(texts)
    assert np.array_equal(flat, np.concatenate([flat1] * 3))
    assert offsets[-1] == 3 * offsets1[-1]


def test_estimate_matches_the_reference_estimator() -> None:
    from tests import reference as ref

    entries = [e for e in GOLDEN if e["num_perm"] == 128 and e["exact"]]
    for a in entries:
        for b in entries:
            qa, qb = bytes.fromhex(a["bins_hex"]), bytes.fromhex(b["bins_hex"])
            got = sketch.bbit_similarity(
                np.frombuffer(qa, np.uint8), np.frombuffer(qb, np.uint8).reshape(1, -1), bins=1024, bits=2
            )[0]
            assert float(got) == pytest.approx(ref.oph_similarity(qa, qb, 1024, 2), abs=1e-6)
