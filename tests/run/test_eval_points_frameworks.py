"""Evaluating in the middle of the training leaves the training as it was, in every framework (real frameworks).

An evaluation point runs ``predict`` (inference mode), ``get_weights`` and the memory statistics between two
training steps. If any of them touched the training (BatchNorm's running statistics, a model left in eval mode,
the optimizer state), the final evaluation of the same seed would differ with and without the points.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.experiment import parse_experiment
from harness.run.sweep import SweepOptions, run_sweep

pytestmark = pytest.mark.slow  # every test here starts a real framework


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet", "jax"])
def test_evaluation_points_do_not_change_what_the_training_computes(framework: str, tmp_path: Path,
                                                                     cache_dir: Path) -> None:
    finals = {}
    for points in (0, 3):
        exp = parse_experiment({
            "name": f"points{points}", "frameworks": [framework], "model": "deep_cnn", "dataset": "synthetic",
            "synthetic_shape": [3, 8, 8], "synthetic_samples": 96, "batch_sizes": [8], "epochs": 2,
            "warmup_steps": 2, "timed_steps": 3, "threads": 1, "device": "cpu", "eval_points": points,
            "eval_batch_size": 16,
        }, source="inline")
        (outcome,) = run_sweep(exp, tmp_path / str(points), SweepOptions(cache_dir=cache_dir)).outcomes
        assert outcome.status == "ok", outcome.reason
        assert len(outcome.curve) == points + 1
        finals[points] = (outcome.metrics.accuracy, outcome.metrics.eval_loss)
    assert finals[3] == finals[0]  # bit for bit: deep_cnn has BatchNorm, so a touched running statistic shows
