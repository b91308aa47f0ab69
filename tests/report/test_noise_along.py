"""B_simple along the training in the report and ``recommend`` (issue 52): per series from the stored noise rows,
the ramp from it printed as suggested (not measured), the figure with the schedules drawn."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt

from report.answer.along import noise_along
from report.document.along_figure import noise_along_figure
from report.load import StoredExperiment

SPEC = json.dumps({"frameworks": ["pytorch"], "epochs": 1, "data": {"n_train": 1000}})


def _trial(h: str, bs: int, schedule: list | None = None) -> dict:
    spec = {"epochs": 1, **({"batch_schedule": schedule} if schedule else {})}
    return {"trial_hash": h, "framework": "pytorch", "batch_size": bs, "repeat": 0, "status": "ok",
            "purpose": "sweep", "epochs": 1, "variant": "ramp" if schedule else "", "spec_json": json.dumps(spec)}


def _row(h: str, samples: int, b_simple: float) -> dict:
    """A row whose X means give exactly ``b_simple`` (|G|² = 1, tr(Σ) = b_simple) at B_small 8, B_big 32."""
    g2, trace = 1.0, b_simple
    x_small, x_big = g2 + trace / 8, g2 + trace / 32
    groups = [[x_small * (1 + d), x_big * (1 + d)] for d in (-0.01, 0.01)]
    return {"trial_hash": h, "samples_seen": samples, "b_small": 8, "b_big": 32, "x_small_mean": x_small,
            "x_big_mean": x_big, "small_n": 8, "big_n": 2, "groups": groups}


def _exp() -> StoredExperiment:
    rows = {"a": tuple(_row("a", s, b) for s, b in ((100, 20), (300, 40), (500, 80), (700, 150), (1000, 300))),
            "b": tuple(_row("b", s, b) for s, b in ((100, 20), (500, 80)))}
    trials = (_trial("a", 16), _trial("b", 64), _trial("c", 256), _trial("r", 16, [[0, 16, 0.001], [0.3, 64, 0.001]]))
    return StoredExperiment(name="t", runs=({"spec_json": SPEC},), trials=trials, gradient_noise=rows)


def test_the_series_is_read_along_the_training_and_suggests_a_ramp_marked_not_measured():
    (series,) = noise_along(_exp())  # the scheduled trial is no constant size's series
    assert series.sizes == (16, 64, 256) and series.total_samples == 1000
    assert [round(p.b_simple) for p in series.points[:2]] == [20, 27]  # 10 %: a's and b's 20; 20 %: with 40
    assert series.ramp is not None and series.ramp.schedule == ((0.0, 16), (0.3, 64), (0.7, 256))
    lines = series.lines()
    assert lines[0].startswith("B_simple along the training, pytorch") and "10%: 20" in lines[0]
    assert "batch_schedule = [[0, 16], [0.3, 64], [0.7, 256]]" in lines[1] and "not measured here" in lines[2]
    assert "measured (study batch_ramp): [holds] x" in series.lines("[holds] x")[2]
    assert series.to_dict()["ramp"]["factor"] == 2.0


def test_the_figure_draws_b_simple_the_suggested_ramp_and_the_trained_schedule():
    exp = _exp()
    result = noise_along_figure(exp, noise_along(exp))
    assert result.figure is not None
    labels = [t.get_text() for t in result.figure.axes[0].get_legend().get_texts()]
    assert labels == ["pytorch: B_simple ± se", "pytorch: ramp suggested (16 → 64 at 30 % → 256 at 70 %)",
                      "trained: pytorch · ramp"]
    plt.close(result.figure)
    empty = noise_along_figure(exp, [])
    assert empty.figure is None and "gradient_noise" in (empty.absent_reason or "")
