"""Time to target on one curve (report/target.py) and the critical batch size fit (report/critical.py)."""

from __future__ import annotations

import pytest

from harness.cells import Stat
from report.answer.critical import fit, fit_sizes, fit_text
from report.answer.target import SizeTarget, first_reach


def _pts(*rows: tuple[float, int, float | None]) -> list[dict[str, object]]:
    return [{"point": i, "train_s": t, "step": s, "samples_seen": s * 32, "accuracy": a}
            for i, (t, s, a) in enumerate(rows)]


def test_the_crossing_is_interpolated_between_the_two_points_around_it() -> None:
    reach = first_reach(_pts((1.0, 10, 0.5), (3.0, 30, 0.7), (5.0, 50, 0.9)), 0.8)
    assert reach is not None and reach.interpolated
    assert (reach.train_s, reach.steps, reach.samples) == pytest.approx((4.0, 40.0, 1280.0))


def test_a_target_met_at_the_first_point_takes_that_point_and_one_never_met_is_none() -> None:
    reach = first_reach(_pts((1.0, 10, 0.85), (3.0, 30, 0.9)), 0.8)
    assert reach is not None and not reach.interpolated and reach.train_s == 1.0
    assert first_reach(_pts((1.0, 10, 0.5), (3.0, 30, 0.7)), 0.8) is None
    # a point with no accuracy (e.g. a failed evaluation) is skipped, not read as a crossing
    reach = first_reach(_pts((1.0, 10, 0.5), (2.0, 20, None), (3.0, 30, 0.9)), 0.7)
    assert reach is not None and reach.train_s == pytest.approx(2.0)


def test_the_fit_recovers_s_min_and_b_crit_from_steps_on_the_model() -> None:
    s_min, b_crit = 120.0, 96.0
    points = [(b, s_min * (1 + b_crit / b)) for b in (8, 32, 128, 512)]
    got, why = fit(points)
    assert got is not None and why == ""
    assert (got.s_min, got.b_crit) == pytest.approx((s_min, b_crit))
    assert got.regime(8) == "perfect scaling" and got.regime(96) == "diminishing returns"
    assert got.regime(512) == "no further gain"


def test_no_fit_is_said_with_why() -> None:
    assert fit([(8, 100.0), (32, 30.0)])[1].startswith("2 batch size(s)")
    # steps falling faster than 1/B: the intercept is not positive, B_crit is beyond the sizes measured
    got, why = fit([(8, 1000.0), (32, 200.0), (128, 20.0)])
    assert got is None and "perfect scaling throughout" in why
    got, why = fit([(8, 100.0), (32, 120.0), (128, 150.0)])
    assert got is None and "do not fall" in why


def _size(batch: int, trials: int, reached: int, steps: list[float], diverged: int = 0,
          final: float = 0.95) -> SizeTarget:
    return SizeTarget(batch_size=batch, trials_n=trials, reached_n=reached, diverged_n=diverged, no_curve_n=0,
                      train_s=Stat.of([s / 10 for s in steps]), steps=Stat.of(steps), samples=None, epochs=2.0,
                      final_mean=final, target=0.9)


def test_the_fit_counts_a_size_when_every_repeat_measured_its_steps_and_names_the_others() -> None:
    sizes = [_size(8, 3, 3, [170.0, 168.0, 172.0]), _size(32, 3, 3, [57.0, 58.0, 57.5]),
             _size(128, 3, 3, [30.0, 29.0, 29.5], final=0.88),  # fell back by the end: not eligible, still measured
             _size(512, 3, 1, [21.0]),  # one repeat of three: its mean would be the lucky repeat's
             _size(1024, 3, 2, [20.0, 20.5], diverged=1)]
    assert [s.steps_measured for s in sizes] == [True, True, True, False, False]
    assert not sizes[2].eligible
    got, why = fit_sizes(sizes)
    assert got is not None and why == ""
    assert [b for b, _ in got.points] == [8, 32, 128] and got.n == 3
    assert got.left_out == ((512, "1 of 3 repeats reached"), (1024, "diverged in 1 of 3 repeats"))
    assert "over 3 sizes, every repeat of each reached the target" in fit_text(got, why)
    assert "left out: batch 512 (1 of 3 repeats reached), batch 1024 (diverged in 1 of 3 repeats)" in fit_text(got, why)
    none, why = fit_sizes(sizes[:1] + sizes[3:])
    assert none is None and why.startswith("1 batch size(s) reached the target in every repeat")
    assert fit_text(none, why) == f"no fit: {why}" and "batch 512 (1 of 3 repeats reached)" in why
