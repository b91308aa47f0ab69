"""The gradient-noise estimator recovers a noise scale known in closed form, and reads stored rows.

Linear regression with Gaussian features: x ~ N(0, A), y = x·w* + ε with ε ~ N(0, σ²), loss ½(x·w − y)². At
weights w (δ = w − w*) the per-example gradient is g = x(x·δ − ε), whose mean and covariance follow from
Isserlis' theorem: G = Aδ and Σ = (δᵀAδ + σ²)A + AδδᵀA, so tr(Σ) = (δᵀAδ + σ²)·tr(A) + |Aδ|². Minibatch
gradients are sampled in NumPy exactly as the worker measures them (a big batch = BIG_FACTOR small ones).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.noise import BIG_FACTOR, estimate_from_rows, estimates_by_group, format_estimate, noise_scale, terms


def _problem(d: int = 20, sigma: float = 1.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray, float, float]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=d)  # the features' (diagonal) covariance
    delta = rng.normal(size=d) / math.sqrt(d)
    g = a * delta
    trace = (float(delta @ (a * delta)) + sigma**2) * float(a.sum()) + float(g @ g)
    return a, delta, trace, float(g @ g)


def _minibatch_gradients(a: np.ndarray, delta: np.ndarray, sigma: float, b: int, n: int,
                         rng: np.random.Generator) -> np.ndarray:
    """``n`` mean gradients of batches of ``b`` fresh examples, shape (n, d)."""
    x = rng.normal(size=(n, b, len(a))) * np.sqrt(a)
    residual = x @ delta - sigma * rng.normal(size=(n, b))
    return np.einsum("nbd,nb->nd", x, residual) / b


def _measure(b_small: int, groups: int, seed: int) -> dict[str, float]:
    """One stored row's numbers: X means from ``groups`` big batches of BIG_FACTOR small ones each."""
    a, delta, _, _ = _problem()
    rng = np.random.default_rng(seed)
    small = _minibatch_gradients(a, delta, 1.0, b_small, groups * BIG_FACTOR, rng).reshape(groups, BIG_FACTOR, -1)
    big = small.mean(axis=1)
    return {"b_small": b_small, "b_big": b_small * BIG_FACTOR, "x_small_mean": float((small**2).sum(-1).mean()),
            "x_big_mean": float((big**2).sum(-1).mean()), "small_n": groups * BIG_FACTOR, "big_n": groups}


def test_the_closed_form_noise_scale_is_recovered_within_10_percent():
    _, _, trace, g2 = _problem()
    want = trace / g2
    assert 20 < want < 200  # between the small and the big batch's sizes, where the estimate is informative
    row = _measure(b_small=8, groups=4000, seed=1)
    got = noise_scale(row["b_small"], row["x_small_mean"], row["b_big"], row["x_big_mean"])
    assert got.b_simple is not None
    assert abs(got.b_simple - want) / want < 0.10, (got, want)
    assert abs(got.g2 - g2) / g2 < 0.10 and abs(got.trace - trace) / trace < 0.05, (got, g2, trace)


def test_rows_at_different_batch_sizes_are_averaged_before_the_ratio():
    _, _, trace, g2 = _problem()
    rows = [{**_measure(b, groups=1500, seed=10 + i), "trial_hash": f"t{b}", "step": 100 * i, "noise_s": 0.5,
             "samples_seen": 1000 * i} for i, b in enumerate((4, 8, 16))]
    est = estimate_from_rows(rows)
    assert est is not None and est.b_simple is not None
    assert abs(est.b_simple - trace / g2) / (trace / g2) < 0.10, (est, trace / g2)
    assert (est.points_n, est.trials_n, est.step_min, est.step_max) == (3, 3, 0, 200)
    assert est.b_small == (4, 8, 16) and est.b_big == (16, 32, 64) and est.big_n == 4500
    assert est.noise_s == pytest.approx(1.5)
    assert "B_simple ≈" in format_estimate(est) and "3 trial(s)" in format_estimate(est)
    later = estimate_from_rows(rows, min_samples_seen=1000)  # a window of the training: the points after it
    assert later is not None and (later.points_n, later.samples_min, later.samples_max) == (2, 1000, 2000)
    assert estimate_from_rows(rows, min_samples_seen=5000) is None


def test_the_estimator_is_the_papers_formula():
    # |G|² = 1, tr(Σ) = 50: X_B = 1 + 50/B exactly
    g2, trace = terms(10, 1 + 50 / 10, 40, 1 + 50 / 40)
    assert g2 == pytest.approx(1.0) and trace == pytest.approx(50.0)
    assert noise_scale(10, 6.0, 40, 2.25).b_simple == pytest.approx(50.0)
    with pytest.raises(ValueError, match="b_small < b_big"):
        terms(40, 1.0, 10, 1.0)


def test_no_usable_rows_give_none_and_a_negative_mean_gradient_gives_no_ratio():
    assert estimate_from_rows([]) is None
    assert estimate_from_rows([{"b_small": 8, "b_big": 32, "x_small_mean": None, "x_big_mean": 1.0}]) is None
    assert "not measured" in format_estimate(None)
    # X_big * B_big < X_small * B_small: |G|² estimated negative (pure noise): no B_simple, and the line says so
    est = estimate_from_rows([{"trial_hash": "a", "step": 5, "b_small": 8, "b_big": 32, "x_small_mean": 10.0,
                               "x_big_mean": 2.0, "small_n": 8, "big_n": 2}])
    assert est is not None and est.b_simple is None and est.g2 < 0
    assert "not estimable" in format_estimate(est)


def test_estimates_by_group_gives_one_per_series_and_leaves_out_what_it_is_told_to():
    rows = [{**_measure(8, groups=200, seed=s), "trial_hash": h, "step": 1, "samples_seen": 10}
            for s, h in enumerate(("a1", "a2", "b1", "x"))]
    series = {"a1": "pytorch", "a2": "pytorch", "b1": "jax"}
    got = estimates_by_group(rows, series.get)
    assert set(got) == {"pytorch", "jax"} and got["pytorch"].trials_n == 2 and got["jax"].trials_n == 1
    assert estimates_by_group(rows, series.get, min_samples_seen=11) == {}
