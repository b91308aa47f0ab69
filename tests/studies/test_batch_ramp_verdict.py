"""The batch_ramp study's verdict (issue 52) from hand-made trials and learning curves: holds, does not hold,
cannot be judged, each with samples, steps and seconds to the target."""

from __future__ import annotations

import json

from report.answer.studies import study_findings

SPEC = {"study": "batch_ramp", "target_accuracy": 90.0}
SCHEDULE = [[0.0, 16, 0.001], [0.3, 64, 0.001]]


def _trial(h: str, variant: str, batch: int, repeat: int) -> dict:
    spec = {"batch_schedule": SCHEDULE} if variant == "ramp" else {}
    return {"trial_hash": h, "framework": "pytorch", "variant": variant, "batch_size": batch, "repeat": repeat,
            "status": "ok", "epochs": 4, "accuracy": 0.91, "spec_json": json.dumps(spec)}


def _curve(seconds: float, steps: int, samples: int) -> list[dict]:
    """Reaches 90 % exactly at the second point (80 % then 100 %: halfway between the evaluations)."""
    return [{"point": 0, "step": 0, "samples_seen": 0, "train_s": 0.0, "accuracy": 0.8, "epoch": 0.0},
            {"point": 1, "step": 2 * steps, "samples_seen": 2 * samples, "train_s": 2 * seconds, "accuracy": 1.0,
             "epoch": 1.0}]


def _store(ramp_s: list[float], best_s: list[float]) -> tuple[list[dict], dict]:
    trials, curves = [], {}
    for r, s in enumerate(best_s):
        trials.append(_trial(f"c64{r}", "", 64, r))
        curves[f"c64{r}"] = _curve(s, 100, 6400)
        trials.append(_trial(f"c16{r}", "", 16, r))
        curves[f"c16{r}"] = _curve(s * 2, 400, 6400)
    for r, s in enumerate(ramp_s):
        trials.append(_trial(f"r{r}", "ramp", 16, r))
        curves[f"r{r}"] = _curve(s, 200, 5000)
    return trials, curves


def test_a_ramp_sooner_by_more_than_the_noise_holds_with_its_numbers():
    (f,) = study_findings(SPEC, *_store(ramp_s=[2.0, 2.1, 1.9], best_s=[4.0, 4.2, 3.8]))
    assert f.holds is True and f.verdict == "holds"
    assert "2.00 s sooner than batch 64" in f.evidence
    assert "ramp 16 → 64 at 30 %: 5,000 ± 0 samples, 200 ± 0 steps, 2.00 ± 0.10 s" in f.evidence
    assert "best constant batch 64: 6,400 ± 0 samples, 100 ± 0 steps, 4.00 ± 0.20 s" in f.evidence


def test_a_ramp_within_the_noise_or_slower_does_not_hold():
    (f,) = study_findings(SPEC, *_store(ramp_s=[3.9, 4.3, 3.7], best_s=[4.0, 4.2, 3.8]))
    assert f.holds is False and "noise" in f.evidence
    (f,) = study_findings(SPEC, *_store(ramp_s=[6.0, 6.2, 5.8], best_s=[4.0, 4.2, 3.8]))
    assert f.holds is False and "later than batch 64" in f.evidence


def test_one_repeat_or_no_ramp_cannot_be_judged():
    (f,) = study_findings(SPEC, *_store(ramp_s=[2.0], best_s=[4.0]))
    assert f.holds is None and "one repeat" in f.evidence
    (f,) = study_findings(SPEC, *_store(ramp_s=[], best_s=[4.0, 4.1]))
    assert f.holds is None and "no ramp was trained" in f.evidence


def test_a_ramp_that_missed_the_target_does_not_hold():
    trials, curves = _store(ramp_s=[2.0, 2.1], best_s=[4.0, 4.2])
    curves["r1"] = [{**p, "accuracy": 0.5} for p in curves["r1"]]
    (f,) = study_findings(SPEC, trials, curves)
    assert f.holds is False and "did not reach the target in every repeat" in f.evidence
