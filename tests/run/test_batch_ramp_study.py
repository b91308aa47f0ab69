"""The batch_ramp study's run (issue 52): constant sizes first, then the ramp their B_simple recommends, as variant
``ramp``; resuming keeps it; without a ramp the study says why. The fake adapter stands in for a framework."""

from __future__ import annotations

import importlib.metadata as md

import pytest

from harness import registry
from harness.config.experiment import parse_experiment
from harness.noise import Ramp
from harness.run import ramp as ramp_phase
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import Store
from report.answer.studies import study_findings


@pytest.fixture()
def fake_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    eps = dict(registry._entry_points())
    eps["fake"] = md.EntryPoint(name="fake", value="tests.fakes.adapter:FakeAdapter", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: eps)


def _exp(repeats: int = 2):
    return parse_experiment({
        "name": "ramp_fake", "study": "batch_ramp", "frameworks": ["fake"], "model": "tiny_cnn",
        "dataset": "synthetic", "synthetic_shape": [1, 8, 8], "synthetic_samples": 96, "synthetic_classes": 3,
        "batch_sizes": [4, 16], "epochs": 2, "warmup_steps": 1, "timed_steps": 2, "device": "cpu",
        "timeout_s": 60, "train_to_target": True, "target_accuracy": 60.0, "target_eval_samples": 16,
        "gradient_noise": 1, "repeats": repeats, "adapters": {"fake": {"behaviour": "learns"}}}, source="inline")


@pytest.mark.process
def test_the_recommended_ramp_is_trained_after_the_constant_sizes_and_judged(fake_registered, monkeypatch, tmp_path,
                                                                             cache_dir):
    asked: list[tuple[int, ...]] = []

    def fixed_ramp(points, sizes, cap=None):  # the fake's "gradients" are its inputs: give the ramp a test wants
        asked.append(tuple(sizes))
        assert points, "B_simple along the training was read from the stored constant trials"
        return Ramp(schedule=((0.0, 4), (0.25, 16)), reasons=("test",)), ""

    monkeypatch.setattr(ramp_phase, "ramp_from", fixed_ramp)
    out = tmp_path / "out"
    result = run_sweep(_exp(), out, SweepOptions(cache_dir=cache_dir))
    assert asked == [(4, 16)]
    got = [(o.trial.variant, o.trial.batch_size, o.trial.repeat, o.status) for o in result.outcomes]
    assert got[-2:] == [("ramp", 4, 0, "ok"), ("ramp", 4, 1, "ok")] and len(got) == 6 and result.total == 6
    ramp_trial = result.outcomes[-1].trial
    assert ramp_trial.batch_schedule == ((0.0, 4, 0.01), (0.25, 16, 0.01)) and ramp_trial.gradient_noise == 0
    assert ramp_trial.eval_every_samples == 16 and ramp_trial.seed == 1  # the repeat's seed, as its constant trials
    with Store.open(out, create=False) as store:
        trials = store.trials()
        curves: dict[str, list[dict]] = {}
        for row in store.curves():
            curves.setdefault(row["trial_hash"], []).append(row)
        spec = store.runs()[-1].spec
    (finding,) = study_findings(spec, trials, curves)
    assert finding.framework == "fake" and "ramp 4 → 16 at 25 %" in finding.evidence
    assert "samples" in finding.evidence and "steps" in finding.evidence and " s" in finding.evidence
    # resuming recomputes the same ramp from the same rows: nothing runs again
    again = run_sweep(_exp(), out, SweepOptions(cache_dir=cache_dir, resume=True))
    assert again.outcomes == [] and again.already_done == 6


@pytest.mark.process
def test_without_a_ramp_the_study_says_why(fake_registered, monkeypatch, tmp_path, cache_dir):
    monkeypatch.setattr(ramp_phase, "ramp_from", lambda points, sizes, cap=None: (None, "B_simple never passed 2 x"))
    result = run_sweep(_exp(repeats=1), tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    assert [o.trial.variant for o in result.outcomes] == ["", ""]
    with Store.open(tmp_path / "out", create=False) as store:
        (finding,) = study_findings(store.runs()[-1].spec, store.trials(), {})
    assert finding.holds is None and "no ramp was trained" in finding.evidence
