"""The verification kernels on every instruction set: the estimate sketch's (adaptive_similarity) and
the exact sketch's merge (exact_similarity) give the serial path's float32 results byte for byte, on
real sketches of every mode and on adversarial bytes."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from neardup import sketch
from tests import reference as ref

ISAS = sketch.available_isas()
#: Bins whose plane words (bins / 64) fill no vector, part of one, whole ones and a tail (AVX2 takes 4
#: words a step, AVX-512 8), up to the largest sketch.
BINS = [64, 128, 320, 704, 1024, 1408, 4096]


def _documents(rng: np.random.Generator, bins: int) -> list[str]:
    """Word 1-shingle documents from a few bases with edits (near-duplicates of each other) and of
    every length: empty, sparse at every code width, around the switch to dense, dense."""
    vocab = np.array([f"v{i}" for i in range(20000)])
    sizes = [
        0,
        1,
        2,
        3,
        bins // 64 + 1,
        bins // 16,
        bins // 8,
        bins // 5,
        bins // 4,
        bins // 4 + 1,
        bins // 3,
    ]
    sizes += [bins // 2, bins, 2 * bins, 3 * bins]
    docs: list[str] = []
    for size in sizes:
        base = rng.choice(vocab, size=size, replace=False)
        docs.append(" ".join(base))
        for rate in (0.02, 0.1, 0.3):  # edited copies: similar pairs of the same mode, and across modes
            edited = np.where(rng.random(size) < rate, rng.choice(vocab, size=size), base)
            docs.append(" ".join(edited))
        docs.append(" ".join(base[: max(1, size // 2)]))  # its first half: often the other mode
    return docs


def _adversarial(rng: np.random.Generator, bins: int) -> list[npt.NDArray[np.uint8]]:
    """Bytes no encoder makes but a damaged store could hand back: every mode byte (valid and not)
    over all-zero, all-one and random bodies."""
    stride = 1 + bins // 4
    out = []
    for mode in (0, 1, 2, 3, 6, 16, 17, 255):
        for body in (np.zeros(stride - 1, np.uint8), np.full(stride - 1, 0xFF, np.uint8)):
            out.append(np.concatenate([[np.uint8(mode)], body]))
        for _ in range(3):
            noise = rng.integers(0, 256, stride, dtype=np.uint8)
            noise[0] = mode
            out.append(noise)
    return out


_POOLS: dict[tuple[int, int], tuple[npt.NDArray[np.uint8], int]] = {}


def _pool(bins: int, seed: int = 0) -> npt.NDArray[np.uint8]:
    """Real sketches of _documents, then _adversarial ones."""
    return _pool_and_real(bins, seed)[0]


def _pool_and_real(bins: int, seed: int = 0) -> tuple[npt.NDArray[np.uint8], int]:
    if (bins, seed) not in _POOLS:
        rng = np.random.default_rng(seed + bins)
        _, real = sketch.adaptive_sketches(_documents(rng, bins), size=1, bins=bins)
        _POOLS[bins, seed] = np.concatenate([real, np.stack(_adversarial(rng, bins))]), len(real)
    return _POOLS[bins, seed]


def _same_bytes(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> bool:
    return a.dtype == b.dtype == np.float32 and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("bins", BINS)
def test_pools_hold_every_mode(bins: int) -> None:
    pool = _pool(bins)
    modes = set(pool[:, 0].tolist())
    assert 0 in modes and {1, 2, 17, 255} <= modes  # dense, and damaged mode bytes
    sparse = {m for m in modes if 3 <= m <= 16}
    assert len(sparse) >= (2 if bins == 64 else 3)
    assert (pool[:, 1:] == 0).all(axis=1).any()  # the empty document


@pytest.mark.parametrize("isa", ISAS[1:] or ["serial"])
@pytest.mark.parametrize("bins", BINS)
def test_estimate_identical_to_serial_for_every_query(isa: str, bins: int) -> None:
    pool = _pool(bins)
    for i in range(len(pool)):  # every sketch as the query: dense, sparse, empty, damaged
        want = sketch.adaptive_similarity(pool[i], pool, bins=bins, isa="serial")
        got = sketch.adaptive_similarity(pool[i], pool, bins=bins, isa=isa)  # type: ignore[arg-type]
        assert _same_bytes(got, want), (isa, bins, i, pool[i, 0])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("bins", [64, 1408, 4096])
def test_estimate_over_rows_is_the_estimate_of_those_rows(isa: str, bins: int) -> None:
    pool = _pool(bins, seed=1)
    rng = np.random.default_rng(bins)
    full = {
        i: sketch.adaptive_similarity(pool[i], pool, bins=bins, isa="serial") for i in range(0, len(pool), 7)
    }
    for i, want in full.items():
        for rows in (
            rng.integers(0, len(pool), size=40),  # random, with repeats
            np.arange(len(pool))[::-1],
            np.array([i, i, i]),
            np.empty(0, np.int64),
        ):
            got = sketch.adaptive_similarity(pool[i], pool, rows, bins=bins, isa=isa)  # type: ignore[arg-type]
            assert _same_bytes(got, want[rows]), (isa, bins, i)


@pytest.mark.parametrize("isa", ISAS)
def test_estimate_of_extreme_dense_pairs(isa: str) -> None:
    # Every bin filled on both sides, all equal or all different; one side empty; both empty.
    bins = 4096
    stride = 1 + bins // 4
    words = bins // 64
    full = np.zeros(stride, np.uint8)
    full[1:] = 0xFF  # every bin code 3
    ones = np.zeros(stride, np.uint8)
    ones[1 : 1 + 8 * words] = 0xFF  # every bin code 1
    empty = np.zeros(stride, np.uint8)
    pool = np.stack([full, ones, empty])
    got = sketch.adaptive_similarity(full, pool, bins=bins, isa=isa)  # type: ignore[arg-type]
    # all equal: 1; all different: (0 - 4096 / 3) / ... < 0, clamped to 0; empty side: 0 of 4096
    assert got.tolist() == [1.0, 0.0, 0.0]
    assert sketch.adaptive_similarity(empty, pool, bins=bins, isa=isa).tolist() == [0.0, 0.0, 0.0]  # type: ignore[arg-type]


@pytest.mark.parametrize("bins", [64, 1408])
def test_serial_estimate_is_the_reference_estimator(bins: int) -> None:
    pool, real = _pool_and_real(bins)
    pool = pool[:real]
    for i in range(0, len(pool), 5):
        got = sketch.adaptive_similarity(pool[i], pool, bins=bins, isa="serial")
        want = [ref.estimate_similarity(pool[i].tobytes(), row.tobytes(), bins) for row in pool]
        assert got.tolist() == pytest.approx(want, abs=1e-6)


def test_isa_argument_is_checked() -> None:
    pool = _pool(64)
    with pytest.raises(ValueError, match="isa"):
        sketch.adaptive_similarity(pool[0], pool, bins=64, isa="sse9")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bins"):
        sketch.adaptive_similarity(pool[0], pool, bins=100)


@pytest.mark.parametrize("isa", ISAS[1:] or ["serial"])
def test_exact_merge_identical_to_serial_on_every_shape(isa: str) -> None:
    # Sets shorter than one vector step, of every length around the 8- and 16-wide blocks, empty ones,
    # near-duplicates and disjoint ones, at floors that stop the merge early or never.
    rng = np.random.default_rng(5)
    sets = [np.empty(0, np.uint32)]
    for n in [1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000, 5000]:
        base = np.unique(rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32))
        sets.append(base)
        keep = rng.random(len(base)) > 0.1
        extra = rng.integers(0, 2**32, size=n // 10 + 1, dtype=np.uint64).astype(np.uint32)
        sets.append(np.unique(np.concatenate([base[keep], extra])))
        sets.append(np.unique(base + np.uint32(1)))  # interleaved, almost nothing in common
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])]).astype(np.int64)
    flat = np.concatenate(sets).astype(np.uint32)
    for q in range(len(sets)):
        for floor in (0.0, 0.5, 0.8, 1.0):
            want = sketch.exact_similarity(sets[q], flat, offsets, floor=floor, isa="serial")
            got = sketch.exact_similarity(sets[q], flat, offsets, floor=floor, isa=isa)  # type: ignore[arg-type]
            assert _same_bytes(got, want), (isa, q, floor)
