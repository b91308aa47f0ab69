"""Per-phase aggregation on replayed sample streams: time weighting, gaps, energy counter wrap and reset."""

from __future__ import annotations

import math

import pytest

from harness.monitor.probes import synthetic_gpu_stream
from harness.monitor.windows import Aggregator, trial_aggregates, weighted_p95

NAN = math.nan


def feed(values: list[dict], interval_s: float = 0.1, t0: float = 100.0) -> Aggregator:
    agg = Aggregator(interval_s)
    agg.extend((t0 + i * interval_s, v) for i, v in enumerate(values))
    return agg


def test_time_weighted_mean_weighs_each_value_by_the_interval_it_stands_for():
    agg = Aggregator(1.0)
    # readings at t=1 (covers 0..1), t=2 (1..2), t=5 (2..5: a late sample covers the long interval)
    agg.extend([(1.0, {"gpu_util_pct": 10.0}), (2.0, {"gpu_util_pct": 20.0}), (5.0, {"gpu_util_pct": 50.0})])
    w = agg.window("x", 0.0, 5.0)
    s = w.series["gpu_util_pct"]
    assert s.mean == pytest.approx((10 * 1 + 20 * 1 + 50 * 3) / 5)  # 36, where a plain mean says 26.7
    assert (s.min, s.max, s.p95, s.covered_s) == (10.0, 50.0, 50.0, 5.0)
    assert w.samples_n == 2  # windows are [start, end): the sample at 5.0 is tagged with what follows
    assert agg.window("x", 0.0, 5.0, include_end=True).samples_n == 3


def test_a_phase_shorter_than_the_interval_gets_the_value_that_spans_it():
    agg = Aggregator(0.1)
    agg.extend([(0.1, {"cpu_util_pct": 30.0}), (0.2, {"cpu_util_pct": 90.0}), (0.3, {"cpu_util_pct": 40.0})])
    w = agg.window("timed", 0.12, 0.15)  # no sample inside; the one at 0.2 stands for 0.1..0.2
    assert w.samples_n == 0
    assert w.series["cpu_util_pct"].mean == 90.0
    assert w.series["cpu_util_pct"].covered_s == pytest.approx(0.03)


def test_gaps_weigh_nothing_and_coverage_says_so():
    stream = [{"gpu_util_pct": 80.0}, {"gpu_util_pct": NAN}, {"gpu_util_pct": NAN}, {"gpu_util_pct": 60.0}]
    w = feed(stream, interval_s=1.0, t0=1.0).window("w", 0.0, 4.0)
    s = w.series["gpu_util_pct"]
    assert s.mean == 70.0 and s.covered_s == 2.0  # the two gaps are not filled in with a guess
    assert "power_w" not in w.series  # a series never read has no statistics at all


def test_weighted_p95():
    assert weighted_p95([(1.0, 94.0), (100.0, 6.0)]) == 100.0
    assert weighted_p95([(1.0, 96.0), (100.0, 4.0)]) == 1.0
    assert weighted_p95([(5.0, 1.0)]) == 5.0


def test_energy_from_the_counter_interpolated_at_phase_edges():
    rows = synthetic_gpu_stream(50, interval_s=0.1, busy_from=0.5, idle_w=50.0, busy_w=200.0)
    agg = feed(rows, interval_s=0.1, t0=0.0)  # samples at 0.0 .. 4.9 s; busy from 2.5 s
    w = agg.window("timed", 3.0, 4.0)
    assert w.energy_method == "counter"
    assert w.energy_j == pytest.approx(200.0 * 1.0)
    assert agg.window("half", 3.05, 3.10).energy_j == pytest.approx(200.0 * 0.05)  # inside one interval
    assert w.series["power_w"].mean == pytest.approx(200.0)


def test_energy_counter_wrap_is_unwrapped():
    top = 2**64
    counter = [top - 3000, top - 1000, 1000, 3000]  # 2 J per 0.1 s = 20 W, wrapping past 2**64 mJ
    agg = feed([{"energy_mj": c, "power_w": 20.0} for c in counter], interval_s=0.1, t0=0.0)
    w = agg.window("w", 0.0, 0.3)
    assert w.energy_method == "counter"
    assert w.energy_j == pytest.approx(6.0)


def test_counter_reset_falls_back_to_power_integration_and_says_so():
    # the driver reloaded between the 2nd and 3rd sample: the counter restarts near 0
    counter = [5_000_000, 5_002_000, 10, 2_010]
    power = [20.0, 20.0, 30.0, 20.0]
    rows = [{"energy_mj": c, "power_w": p} for c, p in zip(counter, power, strict=True)]
    agg = feed(rows, interval_s=0.1, t0=0.0)
    w = agg.window("w", 0.0, 0.3)
    assert w.energy_j == pytest.approx(2.0 + 30.0 * 0.1 + 2.0)
    assert w.energy_method.startswith("counter (0.2 s) + power integration (0.1 s)")


def test_no_counter_at_all_is_power_integration():
    agg = feed([{"energy_mj": NAN, "power_w": 100.0}] * 11, interval_s=0.1, t0=0.0)
    w = agg.window("w", 0.0, 1.0)
    assert w.energy_method == "power integration"
    assert w.energy_j == pytest.approx(100.0)


def test_no_gpu_means_no_energy_rather_than_zero():
    w = feed([{"cpu_util_pct": 50.0}] * 5).window("w", 0.0, 1000.0)
    assert w.energy_j is None and w.energy_method is None and w.energy_covered_s == 0.0


def test_samples_out_of_order_are_refused():
    agg = Aggregator(0.1)
    agg.add(1.0, {})
    with pytest.raises(ValueError, match="time order"):
        agg.add(0.5, {})


def test_summarise_splits_phases_and_trial_aggregates_pick_timed_means_and_training_peaks():
    rows = synthetic_gpu_stream(40, interval_s=0.1, busy_from=0.25)
    for i, r in enumerate(rows):
        r["rss_mib"] = 100.0 + i  # grows through the trial
        r["cpu_util_pct"] = 100.0
    rows[-1]["gpu_mem_used_mib"] = 9000.0  # eval at a big eval batch: must not be the training peak
    agg = feed(rows, interval_s=0.1, t0=10.0)  # samples at 10.0 .. 13.9
    phases = [("setup", 10.05), ("warmup", 11.0), ("timed", 12.0), ("eval", 13.55)]
    windows = agg.summarise(phases)
    assert list(windows) == ["spawn", "setup", "warmup", "timed", "eval", "trial"]
    assert windows["spawn"].samples_n == 1
    assert sum(windows[p].samples_n for p in ("spawn", "setup", "warmup", "timed", "eval")) == 40
    assert windows["timed"].duration_s == pytest.approx(1.55)
    assert windows["trial"].samples_n == 40
    agg_row = trial_aggregates(windows)
    assert agg_row["gpu_util_pct"] == pytest.approx(windows["timed"].series["gpu_util_pct"].mean)
    assert 90.0 <= agg_row["gpu_util_pct"] <= 94.0
    assert agg_row["power_w"] == pytest.approx(250.0)
    assert agg_row["energy_j"] == pytest.approx(250.0 * 1.55)
    assert agg_row["gpu_mem_used_peak_mib"] == 4000.0  # training peak, not eval's 9000
    assert agg_row["rss_peak_mib"] == pytest.approx(100.0 + 36)  # last sample whose interval overlaps timed
    assert agg_row["timed_samples_n"] == windows["timed"].samples_n == 16


def test_a_trial_that_died_in_setup_reports_peaks_over_what_it_did():
    agg = feed([{"rss_mib": 50.0}, {"rss_mib": 700.0}, {"rss_mib": NAN}], t0=0.0)
    row = trial_aggregates(agg.summarise([("setup", 0.0)]))
    assert row["rss_peak_mib"] == 700.0
    assert row["cpu_util_pct"] is None and row["energy_j"] is None and row["timed_samples_n"] is None


def test_a_phase_entered_again_after_an_evaluation_point_is_one_window_without_the_evaluation():
    """Training pauses for evaluation points (timed, eval, timed, train, eval, train, eval): the timed window's
    means and energy cover the timed steps only, and the training peak the training spans only."""
    rows = [{"gpu_util_pct": 90.0, "power_w": 200.0, "gpu_mem_used_mib": 3000.0} for _ in range(60)]
    for i in list(range(15, 20)) + list(range(35, 40)) + list(range(55, 60)):  # the evaluations' samples
        rows[i] = {"gpu_util_pct": 10.0, "power_w": 50.0, "gpu_mem_used_mib": 9000.0}
    dt = 0.125  # exact in binary: the phase edges below fall exactly on sample times
    agg = feed(rows, interval_s=dt, t0=0.0)  # sample i at i * dt stands for ((i - 1) * dt, i * dt]
    edges = [("setup", 0), ("warmup", 1), ("timed", 4), ("eval", 14), ("timed", 19), ("train", 24), ("eval", 34),
             ("train", 39), ("eval", 54)]
    windows = agg.summarise([(name, i * dt) for name, i in edges])
    assert list(windows) == ["setup", "warmup", "timed", "eval", "train", "trial"]
    timed, evaluation = windows["timed"], windows["eval"]
    assert timed.spans_n == 2 and timed.duration_s == pytest.approx((10 + 5) * dt)
    assert (timed.start_s, timed.end_s) == (4 * dt, 24 * dt)
    assert timed.series["gpu_util_pct"].mean == pytest.approx(90.0)  # none of the evaluations' 10 %
    assert evaluation.spans_n == 3 and evaluation.series["gpu_util_pct"].max == pytest.approx(10.0)
    assert windows["train"].duration_s == pytest.approx((10 + 15) * dt)
    row = trial_aggregates(windows)
    assert row["gpu_util_pct"] == pytest.approx(90.0)
    assert row["energy_j"] == pytest.approx(timed.energy_j)
    assert row["power_w"] == pytest.approx(200.0)
    assert row["gpu_mem_used_peak_mib"] == 3000.0  # the evaluations' 9000 is not the training peak
    assert sum(w.samples_n for name, w in windows.items() if name != "trial") == 60
