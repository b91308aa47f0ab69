"""Train to the target (issue 33): a trial stops at the first evaluation at or above the target, or at its budget,
and says which; the mode's keys are refused where they would not apply."""

from __future__ import annotations

import pytest

from harness.config.experiment import parse_experiment
from harness.errors import ConfigError
from tests.fakes.adapter import LEARNS_PER_STEP
from tests.helpers.fake_trial import run_fake


@pytest.mark.process
def test_a_trial_stops_at_the_first_evaluation_at_or_above_the_target(tiny_data, tmp_path):
    # accuracy after s steps is s/16 (behaviour "learns"); evaluations every 12 samples, 3 steps of 4: 3/16, 6/16,
    # 9/16 >= 50 %
    outcome, _ = run_fake(tiny_data, tmp_path, "learns", epochs=50, batch_size=4, stop_at_accuracy=50.0,
                          eval_every_samples=12)
    assert outcome.status == "ok", outcome.reason
    assert [p.step for p in outcome.curve] == [3, 6, 9]
    assert outcome.curve[-1].accuracy >= 0.5 and 9 * LEARNS_PER_STEP >= 0.5
    assert outcome.curve[-2].accuracy < 0.5  # the one before was below: this is the first at the target
    assert len(outcome.step_times_ms) == 9  # no step trained after it
    assert outcome.metrics.target_outcome == "reached"
    assert outcome.metrics.accuracy == outcome.curve[-1].accuracy


@pytest.mark.process
def test_a_trial_that_never_reaches_it_stops_at_its_budget_and_says_so(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, tmp_path, "ok", epochs=2, batch_size=8, stop_at_accuracy=99.0,
                          eval_every_samples=16)
    assert outcome.status == "ok", outcome.reason
    total = len(outcome.step_times_ms)
    assert outcome.curve[-1].step == total and outcome.curve[-1].epoch == 2.0  # the whole budget, then the end
    assert [p.step for p in outcome.curve[:-1]] == list(range(2, total, 2))  # 16 samples: 2 steps of 8
    assert outcome.metrics.target_outcome == "not reached within 2 epochs"


@pytest.mark.process
def test_a_trial_not_in_the_mode_records_no_outcome_and_trains_its_epochs(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, tmp_path, "learns", epochs=2, batch_size=8, eval_points=2)
    assert outcome.metrics.target_outcome is None and outcome.curve[-1].epoch == 2.0


@pytest.mark.process
def test_a_constant_size_evaluates_at_each_multiple_of_its_samples_to_the_target(tiny_data, tmp_path):
    # batch 10 over 64 samples (6 steps of 10, 1 of 4 an epoch), every 30 samples: the first step reaching 30, 60, 90
    # and 120 samples (after steps 3, 6, 10 and 13); every round(30 / 10) = 3 steps it evaluated after 3, 6, 9 and 12
    outcome, _ = run_fake(tiny_data, tmp_path, "ok", epochs=2, batch_size=10, stop_at_accuracy=99.0,
                          eval_every_samples=30)
    assert outcome.status == "ok", outcome.reason
    assert [(p.step, p.samples_seen) for p in outcome.curve] == [(3, 30), (6, 60), (10, 94), (13, 124), (14, 128)]


def test_evaluations_fall_every_fixed_number_of_samples():
    from harness.config.schedule import constant_updates, eval_steps

    assert eval_steps(constant_updates(8, 4096, 1, 0), every_samples=512)[:2] == [64, 128]
    assert eval_steps(constant_updates(128, 4096, 1, 0), every_samples=512)[:2] == [4, 8]
    assert eval_steps(constant_updates(1024, 4096, 1, 0), every_samples=512) == [1, 2, 3]  # at least every update


BASE = {"name": "t", "frameworks": ["pytorch"], "batch_sizes": [8], "epochs": 2}


@pytest.mark.parametrize(("extra", "words"), [
    ({"train_to_target": True}, "needs an absolute target_accuracy"),
    ({"train_to_target": True, "target_accuracy": 90, "epochs": 0}, "needs a budget"),
    ({"train_to_target": True, "target_accuracy": 90, "eval": False}, "needs eval = true"),
    ({"learning_rates": [0.1, 0.1]}, "names a value twice"),
    ({"lr_factors": [0.5, 0.5]}, "names a value twice"),
    ({"lr_factors": [0.5, 0.0]}, "finite number > 0"),
    ({"lr_factors": [0.5, 2.0], "learning_rates": [0.1]}, "cannot be combined with learning_rates"),
    ({"lr_factors": [2.0], "variants": {"a": {"optimizer": "adam"}}}, "cannot be combined"),
    ({"learning_rates": [0.1, -1.0]}, "finite number > 0"),
    ({"learning_rates": [0.1], "variants": {"a": {"optimizer": "adam"}}}, "cannot be combined"),
    ({"learning_rates": [0.1], "learning_rate": 0.5}, "is not used when learning_rates gives a grid"),
])
def test_the_mode_and_the_grid_refuse_what_would_not_apply(extra, words):
    with pytest.raises(ConfigError, match=words):
        parse_experiment({**BASE, **extra})


def test_a_grid_runs_every_rate_as_a_variant_and_the_planned_trials_carry_the_mode():
    exp = parse_experiment({**BASE, "learning_rates": [0.01, 0.1], "train_to_target": True, "target_accuracy": 90,
                            "target_eval_samples": 64, "batch_sizes": [8, 32]})
    resolved = exp.resolved_variants()
    assert [(n, v.learning_rate) for n, v in resolved] == [("lr_0.01", 0.01), ("lr_0.1", 0.1)]


def test_a_factor_grid_scales_what_the_policy_gives_each_size(tiny_data, monkeypatch):
    from tests.fakes.registry import register_fake

    register_fake(monkeypatch)
    from harness.run.planner import plan

    exp = parse_experiment({**BASE, "lr_factors": [0.5, 2.0], "learning_rate": 0.01, "lr_policy": "linear",
                            "lr_base_batch": 8, "batch_sizes": [8, 32], "frameworks": ["fake"],
                            "train_to_target": True, "target_accuracy": 90})
    assert [(n, v.learning_rate) for n, v in exp.resolved_variants()] == [("lr_x0.5", 0.005), ("lr_x2.0", 0.02)]
    rates = {(t.variant, t.batch_size): t.optimizer.lr for t in plan(exp, tiny_data)}
    # factor x (0.01 x batch / 8): each size's rate is the policy's prediction for it, times the factor
    assert rates == pytest.approx({("lr_x0.5", 8): 0.005, ("lr_x0.5", 32): 0.02,
                                   ("lr_x2.0", 8): 0.02, ("lr_x2.0", 32): 0.08})
    assert len({t.trial_hash for t in plan(exp, tiny_data)}) == 4  # every (factor, size) is a trial of its own


def test_run_refuses_the_mode_without_a_target_with_exit_2_and_writes_nothing(tmp_path, capsys):
    from harness.cli import main

    path = tmp_path / "e.toml"
    path.write_text('name = "t"\nframeworks = ["pytorch"]\nbatch_sizes = [8]\nepochs = 1\ntrain_to_target = true\n')
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "needs an absolute target_accuracy" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
