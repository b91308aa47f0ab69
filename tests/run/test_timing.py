"""Throughput over the whole training and drift, from made-up step times (harness/run/timing.py)."""

from __future__ import annotations

import pytest

from harness.run.timing import DRIFT_FLOOR_PCT, drift, step_figures


def test_step_figure_is_the_median_of_every_post_warmup_step_and_e2e_counts_the_wall_time():
    # 600 fast steps then 1400 slow ones, as MXNet did with denormals: a first-20-step median would say 4 ms
    steps = [4.0] * 600 + [38.0] * 1400
    fig = step_figures(steps, batch_size=4, samples_n=8000, wall_s=60.0)
    assert fig.steps_n == 2000
    assert fig.step_time_ms_median == 38.0
    assert fig.step_samples_per_s == pytest.approx(4 / 0.038)
    assert fig.e2e_samples_per_s == pytest.approx(8000 / 60.0)
    assert fig.step_time_ms_iqr == pytest.approx(34.0)


def test_e2e_is_none_without_a_wall_time_and_no_steps_is_an_error():
    assert step_figures([1.0, 1.0], 2, 4, 0.0).e2e_samples_per_s is None
    with pytest.raises(ValueError, match="no post-warm-up steps"):
        step_figures([], 2, 0, 1.0)


def test_a_step_that_slows_down_is_flagged_with_the_size_of_the_change():
    d = drift([4.0] * 600 + [38.0] * 1400)
    assert d is not None and d.flagged
    assert d.change_pct == pytest.approx(850.0)
    assert d.window_steps_n == 200 and d.early_ms == 4.0 and d.late_ms == 38.0


def test_flat_steps_and_changes_within_the_noise_are_not_flagged():
    flat = drift([5.0, 5.2, 4.9, 5.1] * 50)
    assert flat is not None and not flat.flagged and flat.threshold_pct == DRIFT_FLOOR_PCT
    # 20% slower late, but single steps already spread over 3..9 ms: within the noise
    noisy = drift([3.0, 6.0, 9.0, 6.0] * 25 + [3.6, 7.2, 10.8, 7.2] * 25)
    assert noisy is not None and noisy.change_pct == pytest.approx(20.0)
    assert noisy.threshold_pct > 20.0 and not noisy.flagged
    # the same 20% on quiet steps is drift
    quiet = drift([6.0] * 100 + [7.2] * 100)
    assert quiet is not None and quiet.flagged and quiet.change_pct == pytest.approx(20.0)


def test_speeding_up_is_drift_too_and_too_few_steps_say_nothing():
    faster = drift([10.0] * 50 + [5.0] * 50)
    assert faster is not None and faster.flagged and faster.change_pct == pytest.approx(-50.0)
    assert drift([1.0] * 5) is None  # fewer than two windows of 3 steps
    assert drift([1.0, 1.0, 1.0, 9.0, 9.0, 9.0]) is not None
