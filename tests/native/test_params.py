"""Choosing (bands, rows) from the S-curve P(s) = 1 - (1 - s^r)^b."""

from __future__ import annotations

import numpy as np
import pytest

from neardup import sketch


def test_collision_probability_is_the_s_curve() -> None:
    s = np.array([0.0, 0.5, 0.8, 1.0])
    assert np.allclose(sketch.collision_probability(s, 16, 8), 1 - (1 - s**8) ** 16)
    assert sketch.collision_probability(1.0, 4, 4) == 1.0


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9])
@pytest.mark.parametrize("num_perm", [64, 128, 256])
def test_optimal_bands_fit_and_put_the_curve_near_the_threshold(threshold: float, num_perm: int) -> None:
    b, r = sketch.optimal_bands(threshold, num_perm)
    assert b * r <= num_perm
    # The steepest part of the S-curve, (1/b)^(1/r), lies close to the threshold.
    assert abs((1 / b) ** (1 / r) - threshold) < 0.1


def test_optimal_bands_minimize_the_weighted_error_probabilities() -> None:
    t, k = 0.8, 128
    best = sketch.optimal_bands(t, k)
    fp, fn = sketch.error_probabilities(t, *best)
    for b, r in [(16, 8), (8, 16), (20, 6), (32, 4), (9, 13)]:
        ofp, ofn = sketch.error_probabilities(t, b, r)
        assert 0.5 * fp + 0.5 * fn <= 0.5 * ofp + 0.5 * ofn + 1e-12


def test_weights_move_the_trade_off() -> None:
    few_fn = sketch.optimal_bands(0.8, 128, fp_weight=0.1, fn_weight=0.9)
    few_fp = sketch.optimal_bands(0.8, 128, fp_weight=0.9, fn_weight=0.1)
    assert sketch.error_probabilities(0.8, *few_fn)[1] < sketch.error_probabilities(0.8, *few_fp)[1]
    assert sketch.error_probabilities(0.8, *few_fp)[0] < sketch.error_probabilities(0.8, *few_fn)[0]


@pytest.mark.parametrize(
    "call",
    [
        lambda: sketch.optimal_bands(0.0, 128),
        lambda: sketch.optimal_bands(1.0, 128),
        lambda: sketch.optimal_bands(0.8, 100),
        lambda: sketch.optimal_bands(0.8, 128, fp_weight=0, fn_weight=0),
    ],
)
def test_bad_parameters_are_value_errors(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]
