"""Every instruction-set path against the serial one, bit for bit; similarity semantics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from neardup import sketch
from tests import reference as ref

ISAS = sketch.available_isas()


def test_serial_is_always_available_and_active_is_one_of_them() -> None:
    assert ISAS[0] == "serial"
    assert sketch.active_isa() in ISAS


@pytest.mark.parametrize("isa", ISAS[1:] or ["serial"])
@pytest.mark.parametrize("num_perm", [16, 24, 128, 136, 1024])
def test_signatures_identical_to_serial(isa: str, num_perm: int) -> None:
    rng = np.random.default_rng(num_perm)
    vocab = [f"w{i}" for i in range(500)] + ["Ünï", "ΣΑΣ", "漢字", "x\u0301"]
    texts = [" ".join(rng.choice(vocab, size=int(rng.integers(0, 400)))) for _ in range(40)]
    texts += ["", "one", "a b c d e f"]
    serial = sketch.signatures(texts, num_perm=num_perm, isa="serial")
    other = sketch.signatures(texts, num_perm=num_perm, isa=isa)  # type: ignore[arg-type]
    assert np.array_equal(serial, other)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("num_perm", [16, 24, 64, 128, 136, 256])
def test_similarity_identical_to_serial_and_to_numpy(isa: str, num_perm: int) -> None:
    rng = np.random.default_rng(7)
    cands = rng.integers(0, 4, size=(300, num_perm), dtype=np.uint32)
    query = rng.integers(0, 4, size=num_perm, dtype=np.uint32)
    expected = ((cands == query).sum(axis=1) / num_perm).astype(np.float32)
    got = sketch.similarity(query, cands, isa=isa)  # type: ignore[arg-type]
    assert got.dtype == np.float32 and got.shape == (300,)
    assert np.array_equal(got, expected)
    rows = rng.integers(0, 300, size=50)
    assert np.array_equal(sketch.similarity(query, cands, rows, isa=isa), expected[rows])  # type: ignore[arg-type]


def test_similarity_of_real_signatures() -> None:
    base = " ".join(f"word{i}" for i in range(400))
    edited = base.replace("word200", "changed")
    other = " ".join(f"other{i}" for i in range(400))
    sigs = sketch.signatures([base, edited, other, ""])
    sims = sketch.similarity(sigs[0], sigs)
    assert sims[0] == 1.0
    assert 0.9 < sims[1] < 1.0  # 5 of ~396 shingles differ: J ~ 0.975
    assert sims[2] < 0.1
    assert sims[3] == 0.0  # the empty signature matches nothing


def test_empty_signature_matches_nothing_not_even_itself() -> None:
    sigs = sketch.signatures(["", "   ", "!!!", "real words here"])
    assert sketch.is_empty(sigs).tolist() == [True, True, True, False]
    assert sketch.similarity(sigs[0], sigs).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert (sketch.band_keys(sigs, 4, 8)[:3] == 0).all()
    assert (sketch.band_keys(sigs, 4, 8)[3] != 0).all()


def test_real_signatures_never_hold_the_empty_slot_value() -> None:
    sigs = sketch.signatures([f"doc {i}" for i in range(2000)], num_perm=16)
    assert not (sigs == sketch.EMPTY_SLOT).any()


def test_band_keys_depend_on_the_salt() -> None:
    sig = sketch.signatures(["one two three four five six seven eight"])
    plain = sketch.band_keys(sig, 16, 8)
    assert np.array_equal(plain, sketch.band_keys(sig, 16, 8, salt=0))
    salted = sketch.band_keys(sig, 16, 8, salt=0x6E6431642D763300)
    assert not np.intersect1d(plain, salted).size
    for bad in (-1, 2**64, 1.5, True):
        with pytest.raises(ValueError, match="salt"):
            sketch.band_keys(sig, 16, 8, salt=bad)  # type: ignore[arg-type]


def test_band_keys_depend_on_band_and_rows() -> None:
    sig = np.tile(np.arange(4, dtype=np.uint32), 8).reshape(1, 32)  # every band holds the same rows
    keys = sketch.band_keys(sig, 8, 4)[0]
    assert len(set(keys.tolist())) == 8  # the band index is part of the key
    a, b = sketch.signatures(["same text here for both", "same text here for both"])
    assert np.array_equal(sketch.band_keys(a, 16, 8), sketch.band_keys(b, 16, 8))


@pytest.mark.parametrize("isa", ISAS)
def test_force_isa_environment_variable_picks_the_path(isa: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    code = "from neardup import sketch; print(sketch.active_isa())"
    env = {**os.environ, "NEARDUP_FORCE_ISA": isa}
    # cwd outside the source tree: `python -c` would otherwise import ./app, which has no compiled module
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == isa


def test_forcing_an_unknown_isa_fails_the_import_with_advice(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "NEARDUP_FORCE_ISA": "neon9000"}
    out = subprocess.run(
        [sys.executable, "-c", "import neardup.sketch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode != 0
    assert "NEARDUP_FORCE_ISA=neon9000 is not available" in out.stderr
    assert "serial" in out.stderr


@pytest.mark.parametrize("isa", sketch.available_isas())
def test_exact_merge_gives_the_same_answer_on_every_isa(isa: str) -> None:
    # Sets of every size around the 8- and 16-wide blocks, overlapping a lot, a little or not at all;
    # with a floor, every path gives the exact Jaccard at or above it and 0.0 below it.
    rng = np.random.default_rng(99)
    sets = []
    for size in [0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 257, 1000]:
        universe = rng.choice(2**32 - 1, size=3 * size + 2, replace=False).astype(np.uint32)
        sets.append(np.sort(universe[:size]))
        sets.append(
            np.sort(np.concatenate([universe[: size * 9 // 10], universe[2 * size : 2 * size + size // 10]]))
        )
        sets.append(np.sort(universe[size : 2 * size]))
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])]).astype(np.int64)
    flat = np.concatenate(sets).astype(np.uint32)
    for q in range(len(sets)):
        for floor in (0.0, 0.5, 0.85):
            got = sketch.exact_similarity(sets[q], flat, offsets, floor=floor, isa=isa)
            want = sketch.exact_similarity(sets[q], flat, offsets, floor=floor, isa="serial")
            assert got.tolist() == want.tolist()
            for c, value in enumerate(want.tolist()):
                inter = len(np.intersect1d(sets[q], sets[c]))
                union = len(sets[q]) + len(sets[c]) - inter
                exact = inter / union if union and len(sets[q]) and len(sets[c]) else 0.0
                assert value == pytest.approx(exact if exact >= floor - 1e-9 else 0.0, abs=1e-6)


@pytest.mark.parametrize("isa", ISAS[1:] or ["serial"])
@pytest.mark.parametrize(
    ("shingle", "size"), [("word", 1), ("word", 5), ("word", 16), ("word", 17), ("char", 9)]
)
def test_estimate_and_exact_sketches_identical_to_serial(isa: str, shingle: str, size: int) -> None:
    # Texts around the shingle step's 256-token blocks and the 8-wide SIMD steps, shorter than a shingle,
    # at bins of whole and partial vectors: each path must give the serial path's bytes.
    rng = np.random.default_rng(size)
    # words of 8, 9, 16, 17 and 40 bytes (the SIMD word hash takes up to 16), upper case too
    long_words = [
        "ABCDEFGH",
        "abcdefghI",
        "ABCDEFGHijklmnop",
        "abcdefghijklmnopQ",
        "Wörterbücher" * 3 + "X" * 4,
    ]
    vocab = [f"w{i}" for i in range(300)] + ["Ünï", "ΣΑΣ", "漢字", "x\u0301"] + long_words * 20
    lengths = [0, 1, 3, 4, 5, 7, 8, 9, 255, 256, 257, 260, 511, 513, 2000]
    texts = [" ".join(rng.choice(vocab, size=n)) for n in lengths]
    ascii_vocab = [w for w in vocab if w.isascii()]  # pure ASCII texts take the ASCII path
    texts += [" ".join(rng.choice(ascii_vocab, size=n)) for n in lengths]
    for bins in (64, 1408, 960, 1024, 512, 4096):
        opts = {"num_perm": 96, "shingle": shingle, "size": size, "bins": bins}
        serial = sketch.adaptive_sketches(texts, isa="serial", **opts)  # type: ignore[arg-type]
        other = sketch.adaptive_sketches(texts, isa=isa, **opts)  # type: ignore[arg-type]
        assert np.array_equal(serial[0], other[0]) and np.array_equal(serial[1], other[1]), bins
    exact_serial = sketch.exact_sketches(texts, shingle=shingle, size=size, isa="serial")  # type: ignore[arg-type]
    exact_other = sketch.exact_sketches(texts, shingle=shingle, size=size, isa=isa)  # type: ignore[arg-type]
    assert all(np.array_equal(a, b) for a, b in zip(exact_serial, exact_other, strict=True))


@pytest.mark.parametrize("isa", ISAS[1:] or ["serial"])
@pytest.mark.parametrize(("shingle", "size"), [("word", 1), ("word", 5), ("char", 9)])
def test_estimate_sketch_modes_identical_to_serial(isa: str, shingle: str, size: int) -> None:
    # Sparse and dense documents, and lengths around the switch from one to the other (a third of the
    # bins filled): every path must give the serial path's bytes.
    rng = np.random.default_rng(size + 3)
    vocab = [f"w{i}" for i in range(5000)] + ["Ünï", "ΣΑΣ", "漢字", "x\u0301", "abcdefghijklmnopQ"]
    lengths = [0, 1, 4, 5, 9, 40, 300, 430, 470, 480, 500, 520, 560, 600, 700, 2000, 6000]
    texts = [" ".join(rng.choice(vocab, size=n)) for n in lengths]
    # few distinct shingles repeated many times: sparse, though more shingles than the kernel hands back
    texts += [" ".join(["alpha beta gamma delta epsilon zeta"] * 400), " ".join(vocab[:60] * 50)]
    modes = set()
    for bins in (64, 128, 1408, 4096):
        opts = {"num_perm": 96, "shingle": shingle, "size": size, "bins": bins}
        serial = sketch.adaptive_sketches(texts, isa="serial", **opts)  # type: ignore[arg-type]
        other = sketch.adaptive_sketches(texts, isa=isa, **opts)  # type: ignore[arg-type]
        assert np.array_equal(serial[0], other[0]) and np.array_equal(serial[1], other[1]), bins
        modes.update(serial[1][:, 0].tolist())
        if bins == 1408:
            assert all(row[0] >= 3 for row in serial[1][-2:])  # the repeated ones are sparse
            assert [row.tobytes() for row in serial[1][-2:]] == [
                ref.estimate_sketch(t, bins=bins, shingle=shingle, size=size) for t in texts[-2:]
            ]
    assert 0 in modes and 3 in modes and 16 in modes, modes


M64 = 2**64 - 1


def _unxorshift(x: int, shift: int) -> int:
    y = x
    for _ in range(64 // shift + 1):
        y = x ^ (y >> shift)
    return y & M64


def _unfmix64(h: int) -> int:
    h = _unxorshift(h, 33)
    h = (h * pow(0xC4CEB9FE1A85EC53, -1, 2**64)) & M64
    h = _unxorshift(h, 33)
    h = (h * pow(0xFF51AFD7ED558CCD, -1, 2**64)) & M64
    return _unxorshift(h, 33)


def _seed_for_oph_salt(salt: int) -> int:
    # one_permutation.cpp: salt = splitmix64's first output for seed ^ "oph-v2-1"; run it backwards
    z = _unxorshift(salt, 31)
    z = (z * pow(0x94D049BB133111EB, -1, 2**64)) & M64
    z = _unxorshift(z, 27)
    z = (z * pow(0xBF58476D1CE4E5B9, -1, 2**64)) & M64
    z = _unxorshift(z, 30)
    return ((z - 0x9E3779B97F4A7C15) & M64) ^ 0x6F70682D76322D31


def _oph_bin(x: int, salt: int, bins: int) -> tuple[int, int]:
    v = ref.fmix64(x ^ salt)
    return ((v >> 32) * bins) >> 32, v & 0xFFFFFFFF


@pytest.mark.parametrize("isa", ISAS)
def test_a_bin_whose_minimum_is_all_ones_is_filled(isa: str) -> None:
    # A shingle whose bin value is 0xFFFFFFFF (1 in 2^32 of them) fills its bin with code 1 + 0xFFFFFFFF % 3:
    # the AVX-512DQ path, which tells filled bins by their value, marks these apart. The seed is chosen
    # (by inverting the hashes) so that the word 1-shingle "hello" has that value, in a dense document
    # whose other words all fall in other bins.
    (_, flat, _) = sketch.exact_sketches(["hello"], size=1)
    (x,) = flat.tolist()
    bins = 64
    v = (0x12345678 << 32) | 0xFFFFFFFF  # its bin: the high half scaled to 64 bins
    salt = _unfmix64(v) ^ x
    seed = _seed_for_oph_salt(salt)
    b = ((v >> 32) * bins) >> 32
    assert _oph_bin(x, salt, bins) == (b, 0xFFFFFFFF)
    words = [f"w{i}" for i in range(200)]
    (_, hashes, _) = sketch.exact_sketches(words, size=1)  # one shingle each
    others = [w for w, h in zip(words, hashes.tolist(), strict=True) if _oph_bin(h, salt, bins)[0] != b]
    text = " ".join(["hello", *others])
    _, packed = sketch.adaptive_sketches([text], seed=seed, size=1, bins=bins, isa=isa)  # type: ignore[arg-type]
    assert packed[0, 0] == 0  # dense
    planes = np.frombuffer(packed[0, 1:].tobytes(), dtype="<u8")
    assert (planes[0] >> b) & 1 == 1 and (planes[1] >> b) & 1 == 0  # code 1: plane 0 only


def test_exact_similarity_refuses_offsets_out_of_order_for_the_rows_it_reads() -> None:
    flat = np.arange(10, dtype=np.uint32)
    query = np.arange(3, dtype=np.uint32)
    good = np.array([0, 3, 6, 10], dtype=np.int64)
    assert sketch.exact_similarity(query, flat, good, [0]).tolist() == [1.0]
    bad = np.array([0, 7, 6, 10], dtype=np.int64)  # set 1 would run backwards
    with pytest.raises(ValueError, match="offsets must not decrease"):
        sketch.exact_similarity(query, flat, bad, [1])
    with pytest.raises(ValueError, match="offsets must not decrease"):
        sketch.exact_similarity(query, flat, bad)  # every set is read
    with pytest.raises(ValueError, match="offsets must run from 0"):
        sketch.exact_similarity(query, flat, np.array([0, 3, 6, 11], dtype=np.int64))
