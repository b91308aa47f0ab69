"""B_simple along the training (issue 52): the grid, the smoothing window, the jackknife standard error over the
stored groups, and the ramp read from it."""

from __future__ import annotations

import math

import numpy as np

from harness.noise import BIG_FACTOR, AlongPoint, along_training, pooled, ramp_from, terms
from tests.noise.test_estimator import _minibatch_gradients, _problem


def _row(b_small: int, groups: int, seed: int, samples: int, trial: str = "t") -> dict:
    """A stored row as Store.gradient_noise gives it, its groups parsed from their column (``groups``)."""
    a, delta, _, _ = _problem()
    rng = np.random.default_rng(seed)
    small = _minibatch_gradients(a, delta, 1.0, b_small, groups * BIG_FACTOR, rng).reshape(groups, BIG_FACTOR, -1)
    big = small.mean(axis=1)
    per_group = [[float((s**2).sum(-1).mean()), float((g**2).sum())] for s, g in zip(small, big, strict=True)]
    return {"trial_hash": trial, "samples_seen": samples, "b_small": b_small, "b_big": b_small * BIG_FACTOR,
            "x_small_mean": float(np.mean([p[0] for p in per_group])), "x_big_mean": float(np.mean([p[1] for p in
                                                                                                     per_group])),
            "small_n": groups * BIG_FACTOR, "big_n": groups, "groups": per_group}


def test_the_pooled_estimate_is_the_closed_form_and_its_se_covers_the_error():
    _, _, trace, g2 = _problem()
    want = trace / g2
    rows = [_row(8, groups=200, seed=s, samples=1000) for s in range(5)]
    point = along_training(rows, {"t": 10_000})[0]  # at 10 % (and again at 20 %: within the window)
    assert point.fraction == 0.1 and point.points_n == 5 and point.units_n == 1000
    assert point.b_simple is not None and point.se is not None
    assert abs(point.b_simple - want) < 3 * point.se + 0.05 * want, (point, want)
    few = along_training([_row(8, groups=10, seed=1, samples=1000)], {"t": 10_000})[0]
    assert few.se is not None and few.se > point.se  # fewer gradients: a wider spread


def test_points_fall_on_a_grid_and_pool_their_neighbours():
    rows = [_row(8, groups=20, seed=i, samples=s, trial=t) for i, (s, t) in enumerate(
        [(1000, "a"), (1500, "a"), (4000, "a"), (2000, "b")])]  # b trains 20,000 samples: 2000 is its 10 %
    pts = along_training(rows, {"a": 10_000, "b": 20_000})
    assert [p.fraction for p in pts] == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert [p.points_n for p in pts] == [3, 3, 1, 1, 1]  # 10 % and 20 %: 10, 15 and b's 10 %; 30-50 %: 40 %
    assert along_training(rows, {"a": 10_000}) and all(p.points_n <= 3 for p in along_training(rows, {"a": 10_000}))


def test_a_row_without_its_groups_is_one_unit_and_no_se_from_one_unit():
    row = _row(8, groups=4, seed=3, samples=500)
    row.pop("groups")
    point = along_training([row], {"t": 5000})[0]
    want = terms(8, row["x_small_mean"], 32, row["x_big_mean"])
    assert point.units_n == 1 and point.se is None
    assert math.isclose(point.b_simple, want[1] / want[0])
    assert pooled([(1.0, -1.0, 5.0)]) == (None, None)  # |G|² not positive: not estimable


def _pts(*values: float) -> list[AlongPoint]:
    return [AlongPoint(fraction=(i + 1) / 10, samples_seen=0, b_simple=v, se=1.0, points_n=1, units_n=2)
            for i, v in enumerate(values)]


def test_the_ramp_moves_to_the_next_measured_size_where_b_simple_passes_twice_the_size():
    ramp, why = ramp_from(_pts(20, 30, 40, 70, 130, 300), [16, 64, 256])
    assert why == "" and ramp is not None
    assert ramp.schedule == ((0.0, 16), (0.3, 64), (0.5, 256))  # 40 >= 2 x 16 at 30 %; 130 >= 2 x 64 at 50 %
    assert ramp.toml == "batch_schedule = [[0, 16], [0.3, 64], [0.5, 256]]"
    assert ramp.reasons[1] == "64 from 30%: B_simple 40 ± 1 ≥ 2 × 16"


def test_the_ramp_starts_where_b_simple_already_is_and_jumps_several_sizes():
    ramp, _ = ramp_from(_pts(40, 30, 600), [8, 16, 32, 64, 256])
    assert ramp is not None and ramp.schedule == ((0.0, 16), (0.3, 256))  # 2 x 16 <= 40; 600 passes 2 x 16..2 x 64


def test_the_ramp_is_capped_by_the_largest_size_that_fits():
    ramp, _ = ramp_from(_pts(20, 40, 300), [16, 64, 256], cap=100)
    assert ramp is not None and ramp.schedule == ((0.0, 16), (0.2, 64)) and ramp.capped_at == 100
    assert "capped at 100" in ramp.reasons[-1]


def test_no_ramp_where_b_simple_never_passes_or_nothing_to_ramp_between():
    assert ramp_from(_pts(20, 25, 30), [16, 64])[0] is None
    assert "never passed" in ramp_from(_pts(20, 25, 30), [16, 64])[1]
    assert "fewer than two" in ramp_from(_pts(20, 300), [16])[1]
    assert "not estimable" in ramp_from([AlongPoint(0.1, 0, None, None, 1, 1)], [16, 64])[1]
