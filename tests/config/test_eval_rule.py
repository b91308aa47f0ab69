"""One rule for where evaluation points fall, in samples, for constant sizes and schedules alike
(harness.config.schedule.eval_steps): ``[[0, B]]`` evaluates after the same steps as ``batch_size = B``, with
``eval_points`` and to the target. Before, a constant size spread its points over its steps (20 samples at batch 4,
one point: after step 2, the schedule after step 3) and evaluated every ``round(target_eval_samples / B)`` steps to the
target (at B = 16, every 496 samples: 310 steps by the 10th point, the schedule's 313). Pure arithmetic: the steps
each path of the worker asks for (harness.run.worker.trial.trial_eval_steps), against a step-by-step walk."""

from __future__ import annotations

import dataclasses

import pytest

from harness.config.experiment import parse_experiment
from harness.config.schedule import constant_updates, eval_steps, schedule_updates, step_sizes
from harness.config.trial import TrialSpec, evaluated_by_steps
from harness.run.planner import plan, planned_steps
from harness.run.worker.trial import trial_eval_steps
from tests.conftest import make_trial

SIZES = (1, 3, 4, 7, 10, 16, 32, 100)
SAMPLES = (5, 20, 64, 96, 101, 500, 1000)
EPOCHS = (1, 2, 3)
POINTS = (1, 2, 3, 4, 8)


def _walk(sizes: list[int], counts: list[int]) -> list[int]:
    """The rule written as a walk over the steps: after each step, the counts its samples reached and no step before
    did are one point there (none at the end: that is the final evaluation)."""
    out, seen, k = [], 0, 0
    for step, size in enumerate(sizes, 1):
        seen += size
        reached = False
        while k < len(counts) and counts[k] <= seen:
            k, reached = k + 1, True
        if reached and step < len(sizes):
            out.append(step)
    return out


def _constant(batch: int, epochs: int, **kw: object) -> TrialSpec:
    return make_trial(batch_size=batch, epochs=epochs, **kw)


def _schedule(batch: int, epochs: int, **kw: object) -> TrialSpec:
    return make_trial(batch_size=batch, epochs=epochs, batch_schedule=((0.0, batch, 0.01),), **kw)


def _steps(trial: TrialSpec, n_train: int) -> list[int]:
    return trial_eval_steps(trial, n_train, planned_steps(trial, n_train))


@pytest.mark.parametrize("batch", SIZES)
def test_a_one_stretch_schedule_evaluates_after_the_constant_sizes_steps(batch: int) -> None:
    compared = 0
    for n_train in SAMPLES:
        for epochs in EPOCHS:
            if batch > n_train:
                continue
            total = epochs * n_train
            sizes = [s for s, _ in step_sizes(((0.0, batch),), n_train, epochs)]
            for points in POINTS:
                points = min(points, len(sizes) - 1)  # the planner's cap (harness.run.planner.cap_to_the_run)
                want = _walk(sizes, [round(i * total / (points + 1)) for i in range(1, points + 1)])
                constant = _steps(_constant(batch, epochs, eval_points=points), n_train)
                scheduled = _steps(_schedule(batch, epochs, eval_points=points), n_train)
                assert constant == scheduled == want, (batch, n_train, epochs, points)
                compared += 1
    assert compared


def test_the_example_that_differed_twenty_samples_at_batch_4_one_point() -> None:
    # half the samples (10) is reached after step 3 (12 samples); spread over the 5 steps it fell after step 2
    constant = _steps(_constant(4, 1, eval_points=1), 20)
    assert constant == _steps(_schedule(4, 1, eval_points=1), 20) == [3]


@pytest.mark.parametrize("batch", SIZES)
def test_to_the_target_a_constant_size_and_its_schedule_evaluate_at_the_same_sample_counts(batch: int) -> None:
    for n_train, epochs, every in ((1000, 6, 500), (96, 3, 20), (101, 4, 7), (64, 2, 64)):
        if batch > n_train:
            continue
        sizes = [s for s, _ in step_sizes(((0.0, batch),), n_train, epochs)]
        want = _walk(sizes, list(range(every, epochs * n_train, every)))
        constant = _steps(_constant(batch, epochs, eval_every_samples=every, stop_at_accuracy=90.0), n_train)
        scheduled = _steps(_schedule(batch, epochs, eval_every_samples=every, stop_at_accuracy=90.0),
                           n_train)
        assert constant == scheduled == want, (batch, n_train, epochs, every)


def test_the_planner_gives_a_constant_size_the_cadence_in_samples_a_schedule_gets() -> None:
    base = {"name": "t", "frameworks": ["pytorch"], "epochs": 6, "train_to_target": True, "target_accuracy": 90,
            "dataset": "synthetic", "synthetic_samples": 1600}

    @dataclasses.dataclass
    class _Data:
        n_train: int = 1600
        key: str = "k"
        input_shape: tuple[int, ...] = (3, 32, 32)

    (constant,) = plan(parse_experiment({**base, "batch_sizes": [16]}), _Data())  # type: ignore[arg-type]
    (scheduled,) = plan(parse_experiment({**base, "batch_schedule": [[0, 16]]}), _Data())  # type: ignore[arg-type]
    assert constant.eval_every_samples == scheduled.eval_every_samples == 500
    assert constant.eval_every_steps == 0 and constant.eval_by == "samples"
    steps = _steps(constant, 1600)  # 100 steps of 16 an epoch
    assert steps == _steps(scheduled, 1600)
    # every 500 samples: the 10th point after step 313 (5,000 samples: 312.5 steps of 16), not 10 x round(500/16) = 310
    assert steps[9] == 313 and steps[:3] == [32, 63, 94]


def test_a_training_of_a_billion_steps_is_not_walked_step_by_step() -> None:
    # epochs = 0 (warm-up and timed steps only) allows 10^9 steps: the rule works on runs of equal updates
    assert eval_steps(constant_updates(4, 10, 0, 10**9), points_n=3) == [250_000_000, 500_000_000, 750_000_000]
    assert eval_steps(((4, 10**9),), every_samples=10**9)[:2] == [250_000_000, 500_000_000]


def test_runs_of_updates_are_the_steps_the_worker_cuts() -> None:
    for batch, n_train, epochs in ((4, 10, 2), (10, 96, 2), (7, 7, 3), (100, 64, 2), (3, 64, 1)):
        updates = constant_updates(batch, n_train, epochs, 0)
        flat = [size for size, count in updates for _ in range(count)]
        assert flat == [s for s, _ in step_sizes(((0.0, batch),), n_train, epochs)]
        assert updates == schedule_updates(((0.0, batch),), n_train, epochs)
    assert constant_updates(4, 10, 0, 5) == ((4, 5),)


def test_a_trial_stored_under_the_old_rule_keeps_its_hash_and_is_told_apart() -> None:
    # a constant size with points inside its training is a new trial (its points moved); its old spec reads back as
    # what it ran (eval_by "steps") with the hash it was stored under, which --resume finds and runs again
    new = make_trial(eval_points=8)
    old = new.to_dict()
    del old["eval_by"]  # a spec stored before the field
    before = TrialSpec.from_dict(old)
    assert before.eval_by == "steps" and before.trial_hash != new.trial_hash
    moved = evaluated_by_steps(new)
    assert moved is not None and moved.trial_hash == before.trial_hash
    # train to the target: stored with eval_every_steps = round(500 / 16) = 31
    t2t = make_trial(batch_size=16, eval_every_samples=500, stop_at_accuracy=90.0)
    old_t2t = {**t2t.to_dict(), "eval_every_steps": 31, "eval_every_samples": 0}
    del old_t2t["eval_by"]
    assert evaluated_by_steps(t2t).trial_hash == TrialSpec.from_dict(old_t2t).trial_hash  # type: ignore[union-attr]
    # nothing moved, nothing new: no points inside the training, or a schedule (by samples already)
    for same in (make_trial(), make_trial(eval=False), make_trial(batch_schedule=((0.0, 4, 0.01),), eval_points=8)):
        assert evaluated_by_steps(same) is None
        stored = same.to_dict()
        del stored["eval_by"]
        assert TrialSpec.from_dict(stored).trial_hash == same.trial_hash


def test_a_worker_refuses_a_trial_placed_by_steps() -> None:
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="by samples only"):
        trial_eval_steps(make_trial(eval_by="steps", eval_points=2, epochs=1), 64, 16)
    with pytest.raises(ConfigError, match="by samples only"):
        trial_eval_steps(make_trial(eval_every_steps=3, epochs=1), 64, 16)
