"""The planner's step counts, which the sweep's progress and ETAs are read from."""

from __future__ import annotations

import pytest

from harness.run.planner import plan_steps, planned_steps
from tests.conftest import make_trial


@pytest.mark.parametrize(("batch", "accumulate", "expected"), [
    (10, 1, 2 * 10),   # 100 samples, 10 per update: 10 updates an epoch
    (10, 4, 2 * 3),    # 40 samples per update: 3 updates an epoch (the last one short)
    (25, 2, 2 * 2),
])
def test_planned_steps_count_optimizer_updates_of_the_effective_batch(batch: int, accumulate: int,
                                                                      expected: int) -> None:
    trial = make_trial(batch_size=batch, accumulate_steps=accumulate, epochs=2, warmup_steps=1, timed_steps=3)
    assert planned_steps(trial, 100) == expected
    # the same count the worker plans with (harness/run/worker/trial.py)
    assert planned_steps(trial, 100) == sum(plan_steps(100, trial.effective_batch_size, 2, 1, 3))
