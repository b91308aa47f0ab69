"""The gradient-noise prediction judged (issue 33, item 4): B_simple beside the fitted B_crit, their ratio and a
verdict within a factor of 2."""

from __future__ import annotations

import pytest

from harness.cells import Series
from harness.noise import NoiseEstimate
from report.answer.critical import CriticalFit
from report.answer.critical_batch import CriticalStudy, NoiseVerdict, study_lines


@pytest.mark.parametrize(("b_simple", "b_crit", "agrees"), [(18.0, 93.0, False), (50.0, 93.0, True),
                                                            (93.0, 46.0, False), (93.0, 47.0, True)])
def test_the_verdict_is_within_a_factor_of_two(b_simple, b_crit, agrees):
    v = NoiseVerdict(b_simple=b_simple, b_crit=b_crit)
    assert v.agrees is agrees and v.ratio == pytest.approx(b_crit / b_simple)
    assert ("agrees within a factor of 2" in v.text()) is agrees
    assert v.to_dict()["agrees"] is agrees


def _study(noise: NoiseEstimate | None, fit: CriticalFit | None) -> CriticalStudy:
    return CriticalStudy(framework="pytorch", series=Series(framework="pytorch"), target=0.93, sizes=(), fit=fit,
                         fit_why="" if fit else "2 batch size(s) reached the target", noise=noise)


def test_a_study_judges_b_simple_where_both_exist_and_says_why_not_otherwise():
    fit = CriticalFit(s_min=100.0, b_crit=80.0, n=5, r2=0.9, points=())
    noise = NoiseEstimate(b_simple=40.0, g2=1.0, trace=40.0, points_n=6, small_n=24, big_n=6, trials_n=3, step_min=50,
                          step_max=100, samples_min=800, samples_max=1600, b_small=(16,), b_big=(64,), noise_s=1.0)
    judged = _study(noise, fit)
    assert judged.verdict is not None and judged.verdict.agrees
    assert any("prediction: B_simple ≈ 40 vs fitted B_crit ≈ 80" in line for line in study_lines(judged))
    # the trials it rests on, said: the summary's B_simple is over every trial of the series, this one over the sizes
    # chosen here, so the two may differ (pytorch on the batch_ramp study: 172 over 12 trials, 132 over 9)
    assert any("B_simple here over the 3 trial(s) of batch none at their chosen rates, the later half of each: 6 "
               "point(s), 800-1,600 samples seen" in line for line in study_lines(judged))
    assert "perfect scaling up to ~20, diminishing returns to ~320" in judged.regimes_text()
    unjudged = _study(noise, None)
    assert unjudged.verdict is None
    assert any("no fit to judge it against" in line for line in study_lines(unjudged))
