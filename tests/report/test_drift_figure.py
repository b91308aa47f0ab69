"""The step-time-over-training figure (report/drift.py): drawn from the stored steps, names what drifted."""

from __future__ import annotations

import matplotlib.pyplot as plt

from harness.cells import cells
from report.document.drift import drift_figure, rolling_median
from report.load import StoredExperiment


def _trial(fw: str, bs: int, h: str, drifted: bool) -> dict:
    return {"trial_hash": h, "framework": fw, "batch_size": bs, "repeat": 0, "status": "ok", "purpose": "sweep",
            "step_samples_per_s": 100.0, "drift_change_pct": 850.0 if drifted else 1.0,
            "drift_flagged": 1 if drifted else 0, "cpu_denormals": "keep"}


def test_the_figure_draws_one_line_per_framework_and_its_caption_names_the_drift():
    trials = (_trial("mxnet", 4, "a", True), _trial("pytorch", 4, "b", False), _trial("pytorch", 64, "c", False))
    exp = StoredExperiment(name="t", runs=({"spec_json": '{"frameworks": ["pytorch", "mxnet"]}'},), trials=trials,
                     step_times={"a": (4.0,) * 60 + (38.0,) * 140, "b": (5.0,) * 200, "c": (9.0,) * 30})
    result = drift_figure(exp, cells(trials, exp.frameworks))
    assert result.figure is not None and result.absent_reason is None
    assert "Drift flagged: mxnet at batch 4 (+850%, 1 of 1 trials: single)" in result.caption
    axes = result.figure.axes
    assert [ax.get_title() for ax in axes] == ["batch 4", "batch 64"]
    assert sorted(line.get_label() for line in axes[0].get_lines()) == ["mxnet", "pytorch"]
    mx_line = next(line for line in axes[0].get_lines() if line.get_label() == "mxnet")
    assert mx_line.get_ydata()[0] == 4.0 and mx_line.get_ydata()[-1] == 38.0
    plt.close(result.figure)


def test_too_few_steps_give_a_reason_instead_of_an_empty_axis():
    trials = (_trial("pytorch", 4, "b", False),)
    exp = StoredExperiment(name="t", runs=(), trials=trials, step_times={"b": (5.0,) * 3})
    result = drift_figure(exp, cells(trials))
    assert result.figure is None and "20 or more" in (result.absent_reason or "")


def test_rolling_median_ignores_a_single_slow_step():
    ys = rolling_median([5.0] * 50 + [500.0] + [5.0] * 49)
    assert max(ys) == 5.0
