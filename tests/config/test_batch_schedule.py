"""The ``batch_schedule`` key (issue 52): what it plans, and every bad schedule refused naming the key, nothing run."""

from __future__ import annotations

import pytest

from harness.config.experiment import parse_experiment
from harness.config.schedule import eval_steps, schedule_updates, segments, step_sizes
from harness.errors import ConfigError
from harness.run.planner import plan, planned_steps
from tests.helpers.cli import cli, write

BASE = {"name": "s", "frameworks": ["pytorch"], "model": "tiny_cnn", "dataset": "synthetic", "epochs": 2,
        "synthetic_shape": [1, 8, 8], "synthetic_samples": 64, "synthetic_classes": 3}


def _exp(**keys):
    return parse_experiment({**BASE, **keys})


def test_one_entry_trains_exactly_the_constant_sizes_steps():
    assert step_sizes(((0.0, 4),), 10, 2) == [(4, 0), (4, 0), (2, 0), (4, 1), (4, 1), (2, 1)]


def test_a_change_continues_the_sample_stream_and_keeps_the_epochs_short_last_batch():
    # 20 samples over 2 epochs of 10; from sample 10 (half) the size is 4: epoch 0 at 2, epoch 1 at 4, 4, 2
    assert step_sizes(((0.0, 2), (0.5, 4)), 10, 2) == [(2, 0)] * 5 + [(4, 1), (4, 1), (2, 1)]
    # a change falls at the first update that starts at or after its sample count: 0.3 x 20 = 6 -> after 2+2+2
    sizes = step_sizes(((0.0, 2), (0.3, 3)), 10, 2)
    assert [s for s, _ in sizes][:5] == [2, 2, 2, 3, 1] and sum(s for s, _ in sizes) == 20
    segs = segments(((0.0, 2), (0.3, 3)), 10, 2)
    assert [(g.batch, g.first_step, g.first_sample) for g in segs] == [(2, 0, 0), (3, 3, 6)]
    assert sum(g.samples for g in segs) == 20 and sum(g.steps for g in segs) == len(sizes)


def test_evaluations_fall_at_samples_not_steps():
    updates = ((2, 5), (8, 5))  # 10 + 40 samples
    assert eval_steps(updates, every_samples=10) == [5, 7, 8, 9]  # 10, 20, 30, 40 samples reached
    assert eval_steps(updates, points_n=1) == [7]  # half the samples (25) is reached after step 7
    assert schedule_updates(((0.0, 2), (0.2, 8)), 50, 1) == updates


def test_the_plan_gives_each_size_its_lr_policy_rate_and_the_schedules_steps(tiny_data):
    exp = _exp(batch_schedule=[[0, 4], [0.5, 16]], learning_rate=0.1, lr_policy="linear", lr_base_batch=4)
    assert exp.batch_sizes == (4,)
    (trial,) = plan(exp, tiny_data)
    assert trial.batch_size == 4 and trial.batch_schedule == ((0.0, 4, 0.1), (0.5, 16, 0.4))
    assert trial.optimizer.lr == pytest.approx(0.1)
    assert planned_steps(trial, 64) == len(step_sizes(trial.schedule, 64, 2)) == 16 + 4  # epoch 0 at 4, epoch 1 at 16
    constant = plan(_exp(batch_sizes=[4], learning_rate=0.1, lr_policy="linear", lr_base_batch=4), tiny_data)[0]
    assert constant.trial_hash != trial.trial_hash and "batch_schedule" not in constant.to_dict() or \
        constant.batch_schedule == ()


def test_a_variant_schedule_runs_beside_constant_sizes(tiny_data):
    exp = _exp(batch_sizes=[4, 16], variants={"constant": {"optimizer": "adam"},
                                              "ramp": {"optimizer": "adam", "batch_schedule": [[0, 4], [0.5, 16]]}})
    trials = plan(exp, tiny_data)
    assert [(t.variant, t.batch_size, bool(t.batch_schedule)) for t in trials] == [
        ("constant", 4, False), ("constant", 16, False), ("ramp", 4, True)]


@pytest.mark.parametrize(("keys", "words"), [
    ({"batch_schedule": [[0, 0], [0.5, 16]]}, "batch size 0 must be > 0"),
    ({"batch_schedule": [[0, 16], [0.5, -4]]}, "batch size -4 must be > 0"),
    ({"batch_schedule": [[0, 4], [0.6, 8], [0.5, 16]]}, "fraction 0.5 does not increase"),
    ({"batch_schedule": [[0, 4], [0.5, 8], [0.5, 16]]}, "fraction 0.5 does not increase"),
    ({"batch_schedule": [[0, 4], [1.0, 16]]}, "outside [0, 1)"),
    ({"batch_schedule": [[0, 4], [-0.2, 16]]}, "outside [0, 1)"),
    ({"batch_schedule": [[0.1, 4]]}, "must be 0"),
    ({"batch_schedule": []}, "non-empty list"),
    ({"batch_schedule": [[0, 4.5]]}, "not a whole number"),
    ({"batch_schedule": [[0, 4, 1]]}, "[fraction, batch size] pair"),
    ({"batch_schedule": [[0, 4], [0.5, 16]], "batch_sizes": [4, 16]}, "cannot be combined with batch_sizes"),
    ({"batch_schedule": [[0, 4]], "epochs": 0}, "needs epochs > 0"),
    ({"batch_schedule": [[0, 4]], "accumulate_steps": 2}, "accumulate_steps"),
    ({"batch_schedule": [[0, 4]], "max_batch": True}, "max_batch"),
    ({"batch_schedule": [[0, 4], [0.5, 100]], "train_samples": 50}, "more than the 50 training samples"),
    ({"batch_schedule": [[0, 4], [0.5, 10**12]], "learning_rate": 1e300, "lr_policy": "linear", "lr_base_batch": 1},
     "largest usable value"),
    ({"batch_schedule": [[0, 4], [0.5, 8]], "learning_rate": 1e308, "lr_policy": "linear", "lr_base_batch": 4},
     "not a finite number > 0"),
])
def test_a_bad_schedule_is_refused_naming_the_key(keys, words):
    with pytest.raises(ConfigError) as e:
        _exp(**keys)
    assert "batch_schedule" in str(e.value) and words in str(e.value), str(e.value)


def test_a_variant_with_both_a_schedule_and_batch_sizes_is_refused():
    with pytest.raises(ConfigError, match=r"variants\.ramp: batch_schedule: cannot be combined with batch_sizes"):
        _exp(batch_sizes=[4], variants={"ramp": {"batch_schedule": [[0, 4]], "batch_sizes": [8]}})


def test_a_size_above_the_data_set_is_refused_when_the_data_is_known(tiny_data):
    exp = _exp(batch_schedule=[[0, 4], [0.5, 100]])
    with pytest.raises(ConfigError, match="batch_schedule: batch size 100 is more than the data set's 64"):
        plan(exp, tiny_data)


def test_a_rate_that_changes_needs_the_lr_change_capability(monkeypatch):
    from harness.config import experiment

    monkeypatch.setattr(experiment, "has_hook", lambda cls, hook: hook != "set_learning_rate")
    with pytest.raises(ConfigError, match="lr_change"):
        _exp(batch_schedule=[[0, 4], [0.5, 16]], lr_policy="sqrt")
    _exp(batch_schedule=[[0, 4], [0.5, 16]])  # lr_policy = "fixed": one rate, nothing to change


@pytest.mark.parametrize(("schedule", "words"), [
    ("[[0, 8], [0.5, 100000]]", "more than the data set's"),
    ("[[0, 8], [0.2, 0]]", "batch size 0 must be > 0"),
])
def test_the_command_line_exits_2_and_writes_nothing(tmp_path, schedule, words):
    exp = write(tmp_path, 'name = "x"\nframeworks = ["pytorch"]\nmodel = "tiny_cnn"\ndataset = "synthetic"\n'
                          'synthetic_shape = [1, 8, 8]\nsynthetic_samples = 64\nepochs = 1\n'
                          f"batch_schedule = {schedule}\n")
    out = tmp_path / "out"
    r = cli("run", str(exp), "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert "batch_schedule" in r.stderr and words in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()
