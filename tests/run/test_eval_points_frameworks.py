"""Evaluating in the middle of the training leaves the training as it was, in every framework (real frameworks).

An evaluation point runs ``predict`` (inference mode), ``get_weights`` and the memory statistics between two
training steps. If any of them touched the training (BatchNorm's running statistics, a model left in eval mode,
the optimizer state), the final evaluation of the same seed would differ with and without the points. The trials
are the framework's shared sweep (tests/run/conftest.py), which test_prefetch_frameworks.py reads too.
"""

from __future__ import annotations

import pytest

from tests.helpers.shared import RUNS
from tests.run.conftest import TRIALS

pytestmark = pytest.mark.slow  # every test here starts a framework

FRAMEWORKS = ["pytorch", "tensorflow", "mxnet", "jax"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_evaluation_points_do_not_change_what_the_training_computes(framework: str, framework_sweep) -> None:
    trials = framework_sweep(framework)
    finals = {}
    for name in ("plain", "points"):
        outcome, points = trials[name].outcome, TRIALS[name]["eval_points"]
        assert outcome.status == "ok", outcome.reason
        assert len(outcome.curve) == points + 1
        finals[points] = (outcome.metrics.accuracy, outcome.metrics.eval_loss)
    assert sorted(finals) == [0, 3]
    assert finals[3] == finals[0]  # bit for bit: deep_cnn has BatchNorm, so a touched running statistic shows


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_shared_sweep_ran_once_in_this_worker(framework: str, framework_sweep) -> None:
    """Read by the tests above and by test_prefetch_frameworks.py: one run of its trials per worker, however many
    tests read it (tests/helpers/shared.py)."""
    framework_sweep(framework)
    assert RUNS[f"framework_sweep[{framework}]"] == 1, dict(RUNS)
