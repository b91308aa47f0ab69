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
    assert list(windows) == ["spawn", "setup", "warmup", "timed", "eval", "training_before_eval", "trial"]
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
    # the last sample taken before the evaluation began (13.5 s): the one at 13.6 s read memory during it
    assert agg_row["rss_peak_mib"] == pytest.approx(100.0 + 35)
    assert agg_row["gpu_mem_eval_peak_mib"] == 9000.0  # the evaluation's own peak, kept apart
    assert agg_row["readings_note"] is None and agg_row["power_method"] == "energy counter / time"
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
    assert list(windows) == ["setup", "warmup", "timed", "eval", "train", "training_before_eval", "trial"]
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
    assert sum(w.samples_n for name, w in windows.items() if name not in ("trial", "training_before_eval")) == 60


def test_a_window_too_short_for_nvml_publishes_no_utilisation_power_or_energy_and_says_why():
    """The issue's case: JAX at batch 64 stepped for ~48 ms on an H100, sampled every 100 ms."""
    rows = [r | {"cpu_util_pct": 100.0} for r in synthetic_gpu_stream(30, interval_s=0.1, busy_from=0.0)]
    agg = feed(rows, interval_s=0.1, t0=0.0)
    windows = agg.summarise([("setup", 0.0), ("warmup", 1.0), ("timed", 1.23), ("train", 1.278)])
    timed = windows["timed"]
    assert timed.series["gpu_util_pct"].mean > 0 and timed.energy_j is not None  # measured, but not readable
    assert timed.readings_note is not None and "48 ms with 0 sample(s)" in timed.readings_note
    row = trial_aggregates(windows)
    assert row["gpu_util_pct"] is None and row["gpu_mem_util_pct"] is None
    assert row["power_w"] is None and row["energy_j"] is None and row["power_method"] is None
    assert row["readings_note"].startswith("timed phase: 48 ms with 0 sample(s) at 100 ms")
    assert row["gpu_mem_used_peak_mib"] == 4000.0  # memory is a reading of a moment: kept
    assert row["cpu_util_pct"] is not None  # the host's figures are not NVML's averages


@pytest.mark.parametrize(("duration_s", "samples_n", "interval_s", "readable"), [
    (1.0, 3, 0.1, True), (0.99, 10, 0.1, False), (2.0, 2, 0.1, False),
    (2.4, 12, 0.5, False), (2.5, 5, 0.5, True),  # 5 intervals of 0.5 s: 2.5 s, above the 1 s floor
])
def test_the_window_rule(duration_s, samples_n, interval_s, readable):
    from harness.monitor.windows import readings_note

    assert (readings_note(duration_s, samples_n, interval_s) is None) is readable


def test_mean_power_prefers_the_counter_over_nvmls_lagging_power_reading():
    """Ampere+ power readings are 1 s trailing means: after a busy second the reading still says busy while the
    counter (the true integral) says idle; the window's power is the counter's energy over its time."""
    rows = []
    energy = 0
    for i in range(40):
        power = 300.0 if i < 10 else 100.0  # truly drew 300 W, then 100 W from 1.0 s on
        energy += round(power * 0.1 * 1000) if i else 0
        lagging = 300.0 if i < 20 else 100.0  # the reading keeps the busy second's mean for a second more
        rows.append({"power_w": lagging, "energy_mj": energy})
    windows = feed(rows, interval_s=0.1, t0=0.0).summarise([("timed", 1.0), ("train", 3.0)])
    row = trial_aggregates(windows)
    assert row["energy_j"] == pytest.approx(100.0 * 2.0)
    assert row["power_w"] == pytest.approx(100.0) and row["power_method"] == "energy counter / time"
    assert windows["timed"].series["power_w"].mean == pytest.approx(190.0)  # what power x time would have said


def test_without_the_counter_mean_power_is_the_readings_mean():
    rows = [{"power_w": 80.0 + i} for i in range(30)]
    row = trial_aggregates(feed(rows, t0=0.0).summarise([("timed", 0.0), ("train", 2.0)]))
    assert row["power_method"] == "mean of NVML power readings" and 80.0 < row["power_w"] < 110.0


def test_training_peak_comes_before_the_first_evaluation_and_the_steady_phase_is_its_own_window():
    """An evaluation at batch 500 grows the pool: the memory read after it is not the training's."""
    rows = [{"gpu_mem_used_mib": 2000.0, "gpu_util_pct": 50.0, "power_w": 150.0} for _ in range(80)]
    for i in range(20, 80):
        rows[i] = {"gpu_mem_used_mib": 7000.0, "gpu_util_pct": 95.0, "power_w": 300.0}  # after the eval: pooled
    edges = [("warmup", 0.0), ("timed", 0.5), ("eval", 1.95), ("timed", 2.5), ("eval", 5.0), ("steady", 5.5)]
    windows = feed(rows, t0=0.0).summarise(edges)
    row = trial_aggregates(windows)
    assert row["gpu_mem_used_peak_mib"] == 2000.0 and row["gpu_mem_eval_peak_mib"] == 7000.0
    assert windows["training_before_eval"].end_s == pytest.approx(1.95)
    assert row["steady_gpu_util_pct"] == pytest.approx(95.0) and row["steady_power_w"] == pytest.approx(300.0)
    assert row["steady_window_s"] == pytest.approx(7.9 - 5.5)
    short = trial_aggregates(feed(rows, t0=0.0).summarise([*edges[:-1], ("steady", 7.5)]))
    assert short["steady_gpu_util_pct"] is None and "steady phase: 400 ms" in short["readings_note"]
