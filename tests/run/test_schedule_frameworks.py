"""A one-stretch batch-size schedule, ``batch_schedule = [[0, B]]``, is the training of ``batch_sizes = [B]``, in every
framework (issue 52; real frameworks). The fakes and the step arithmetic (tests/run/test_batch_schedule.py,
tests/config/test_batch_schedule.py) show the worker cuts the same batches; this shows a real trial through the
schedule's path (its step sizes, its evaluation points by samples, its figures per stretch, prefetch and augmentation
on) computes what the constant size's path computes, bit for bit: the same steps, the same learning curve, the same
final loss and accuracy. Batch 10 over 96 samples leaves each epoch's last batch short (6), cut the same way by both.
The curve's points fall by one rule for both (harness.config.schedule.eval_steps: the first step at which the samples
seen reach each point's count): 2 points over 192 samples, at 64 and 128, after steps 7 and 14. Before that rule a
constant size spread its points over its 20 steps, after steps 7 and 13, and this comparison failed there. The trials
are the framework's shared sweep (tests/run/conftest.py: ``batch10``, ``schedule10``).
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.records import TrialOutcome

pytestmark = pytest.mark.slow  # every test here starts a framework


def _training(outcome: TrialOutcome) -> dict[str, Any]:
    """What the trial's training computed, and how many steps it took: no clock readings."""
    metrics = outcome.metrics
    assert metrics is not None, outcome.reason
    return {
        "steps": len(outcome.step_times_ms),
        "phase_steps": outcome.phase_steps,
        "measured_steps": metrics.measured_steps_n,
        "final": (metrics.accuracy, metrics.eval_loss),
        "curve": [(p.point, p.step, p.samples_seen, p.epoch, p.accuracy, p.eval_loss, p.eval_samples)
                  for p in outcome.curve],
    }


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet", "jax"])
def test_a_one_stretch_schedule_trains_exactly_as_its_constant_size(framework: str, framework_sweep) -> None:
    trials = framework_sweep(framework)
    constant, scheduled = trials["batch10"].outcome, trials["schedule10"].outcome
    for outcome in (constant, scheduled):
        assert outcome.status == "ok", outcome.reason
    assert scheduled.trial.batch_schedule and not constant.trial.batch_schedule
    assert scheduled.trial.batch_size == constant.trial.batch_size == 10
    assert scheduled.metrics is not None
    (stretch,) = scheduled.metrics.schedule  # one stretch, the whole training
    assert (stretch.batch, stretch.first_step, stretch.first_sample, stretch.steps) == (10, 0, 0, 20)
    want = _training(constant)
    assert want["steps"] == 20  # 2 epochs of 10 steps (9 of 10 samples, 1 of 6)
    # 2 points and the end: 70 samples (the first step past 64), 136 (the first past 128: step 13 had 126), all 192
    assert [(p[1], p[2]) for p in want["curve"]] == [(7, 70), (14, 136), (20, 192)]
    assert _training(scheduled) == want  # bit for bit: the same batches through the same steps
