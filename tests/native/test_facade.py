"""Argument checks of neardup.sketch: wrong types, dtypes and shapes are ValueErrors saying what to pass."""

from __future__ import annotations

import numpy as np
import pytest

from neardup import sketch


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sketch.signatures("one string"), "sequence of str"),
        (lambda: sketch.signatures([b"bytes"]), "expected str"),  # type: ignore[list-item]
        (lambda: sketch.signatures(["x"], num_perm=8), "multiple of 8"),
        (lambda: sketch.signatures(["x"], num_perm=130), "multiple of 8"),
        (lambda: sketch.signatures(["x"], num_perm=2048), "multiple of 8"),
        (lambda: sketch.signatures(["x"], shingle="line"), "'word' or 'char'"),  # type: ignore[arg-type]
        (lambda: sketch.signatures(["x"], size=0), "size"),
        (lambda: sketch.signatures(["x"], seed=-1), "seed"),
        (lambda: sketch.signatures(["x"], threads=0), "threads"),
        (lambda: sketch.signatures(["x"], isa="neon"), "not available"),  # type: ignore[arg-type]
        (lambda: sketch.similarity(np.zeros(8, np.int64), np.zeros((2, 8), np.uint32)), "uint32"),
        (lambda: sketch.similarity(np.zeros(8, np.uint32), np.zeros((2, 8), np.float32)), "dtype uint32"),
        (lambda: sketch.similarity(np.zeros(8, np.uint32), np.zeros((2, 16), np.uint32)), "same num_perm"),
        (lambda: sketch.similarity(np.zeros(8, np.uint32), np.zeros((2, 8), np.uint32), [5]), "indices"),
        (lambda: sketch.similarity(np.zeros(8, np.uint32), [[1, 2]]), "numpy uint32 array"),  # type: ignore[arg-type]
        (lambda: sketch.band_keys(np.zeros((2, 16), np.uint32), 4, 5), "exceeds"),
        (lambda: sketch.band_keys(np.zeros((2, 16), np.uint32), 0, 5), "positive"),
        (lambda: sketch.band_keys(np.zeros((2, 2, 16), np.uint32), 4, 4), "2-D"),
    ],
)
def test_bad_arguments_raise_value_error_with_advice(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_non_contiguous_inputs_are_accepted() -> None:
    sigs = sketch.signatures([f"text number {i} with words" for i in range(10)], num_perm=32)
    wide = np.zeros((10, 64), np.uint32)
    wide[:, ::2] = sigs
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    assert np.array_equal(sketch.similarity(sigs[0], strided), sketch.similarity(sigs[0], sigs))
    assert np.array_equal(sketch.band_keys(strided, 4, 8), sketch.band_keys(sigs, 4, 8))


def test_shapes_and_dtypes_of_results() -> None:
    sigs = sketch.signatures(["a b c", "d e f", ""], num_perm=64)
    assert sigs.dtype == np.uint32 and sigs.shape == (3, 64)
    assert sketch.signatures([], num_perm=64).shape == (0, 64)
    keys = sketch.band_keys(sigs, 8, 8)
    assert keys.dtype == np.uint64 and keys.shape == (3, 8)
