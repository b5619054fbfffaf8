"""Golden vectors of the estimate sketch (tests/native/golden_estimate_sketch.json, from the pure-Python
reference): band keys and adaptive one-permutation bins must never change, on any ISA path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neardup import sketch
from tests import reference as ref

GOLDEN: list[dict[str, Any]] = json.loads((Path(__file__).parent / "golden_estimate_sketch.json").read_text())
#: The salt of the estimate mode's band keys (the service's, app/domain/banding.py), as stored.
ESTIMATE_SALT = 0x6E6431642D763300


def test_golden_file_covers_every_mode() -> None:
    assert len(GOLDEN) >= 45
    assert {entry["shingle"] for entry in GOLDEN} == {"word", "char"}
    modes = {bytes.fromhex(e["bins_hex"])[0] for e in GOLDEN}
    assert 0 in modes and 3 in modes and 16 in modes and len(modes) >= 6  # dense, narrowest, widest, others
    assert any(set(bytes.fromhex(e["bins_hex"])) == {0} for e in GOLDEN)  # featureless texts: all empty
    dense = [e for e in GOLDEN if bytes.fromhex(e["bins_hex"])[0] == 0 and any(bytes.fromhex(e["bins_hex"]))]
    assert any(e["bins"] == 1408 for e in dense)  # a long text is dense at the default bins


@pytest.mark.parametrize("isa", sketch.available_isas())
def test_estimate_sketches_match_golden_vectors(isa: str) -> None:
    for entry in GOLDEN:
        opts = {
            "num_perm": entry["num_perm"],
            "seed": entry["seed"],
            "shingle": entry["shingle"],
            "size": entry["size"],
        }
        sigs, bins = sketch.adaptive_sketches([entry["text"]], bins=entry["bins"], isa=isa, **opts)  # type: ignore[arg-type]
        assert bins[0].tobytes().hex() == entry["bins_hex"], (isa, entry["text"][:40], entry["bins"])
        keys = sketch.band_keys(sigs, entry["bands"], entry["rows"], salt=ESTIMATE_SALT)[0]
        assert [str(k) for k in keys.tolist()] == entry["band_keys"], (isa, entry["text"][:40])


def test_dense_mode_holds_the_two_bit_planes_of_the_reference() -> None:
    for entry in GOLDEN:
        stored = bytes.fromhex(entry["bins_hex"])
        if stored[0] != 0 or entry["bins"] != 1408:
            continue
        planes = ref.oph_bins(
            entry["text"], bins=1408, bits=2, seed=entry["seed"], size=entry["size"], shingle=entry["shingle"]
        )
        assert stored[1:] == planes


@pytest.mark.parametrize("isa", sketch.available_isas())
def test_estimate_matches_the_reference_estimator(isa: str) -> None:
    entries = [e for e in GOLDEN if e["bins"] == 1408]
    for a in entries:
        qa = bytes.fromhex(a["bins_hex"])
        pool = np.stack([np.frombuffer(bytes.fromhex(b["bins_hex"]), np.uint8) for b in entries])
        got = sketch.adaptive_similarity(np.frombuffer(qa, np.uint8), pool, bins=1408, isa=isa)  # type: ignore[arg-type]
        want = [ref.estimate_similarity(qa, bytes.fromhex(b["bins_hex"]), 1408) for b in entries]
        assert got.tolist() == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("isa", sketch.available_isas())
def test_damaged_sketches_give_an_estimate_and_the_same_one_every_time(isa: str) -> None:
    # A stored sketch is read back from the store: whatever its bytes, the estimate stays in [0, 1],
    # reads nothing outside the sketch, and does not depend on what was compared before.
    rng = np.random.default_rng(3)
    good = np.frombuffer(bytes.fromhex(GOLDEN[13]["bins_hex"]), np.uint8)  # 1,408 bins, a sparse one
    assert good[0] >= 3 and len(good) == 353
    damaged = []
    for mode in (0, 1, 2, 6, 16, 17, 255):
        for fill in (0x00, 0xFF):
            sketch_bytes = np.full(353, fill, np.uint8)
            sketch_bytes[0] = mode
            damaged.append(sketch_bytes)
        noise = rng.integers(0, 256, 353, dtype=np.uint8)
        noise[0] = mode
        damaged.append(noise)
    pool = np.stack([good, *damaged])
    first = sketch.adaptive_similarity(good, pool, bins=1408, isa=isa)  # type: ignore[arg-type]
    for row in damaged:
        sketch.adaptive_similarity(row, pool, bins=1408, isa=isa)  # type: ignore[arg-type]  # each as the query too
    again = sketch.adaptive_similarity(good, pool, bins=1408, isa=isa)  # type: ignore[arg-type]
    assert first.tolist() == again.tolist()
    assert ((first >= 0) & (first <= 1)).all() and first[0] == 1.0
