"""The worker's StepRunner prepares every batch shape before the training clock (harness/run/worker/steps.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from harness.config.trial import OptimizerSpec, TrialSpec
from harness.run.worker import StepRunner


class ShapeRecorder:
    """Records what the runner asks of an adapter; a real one compiles per shape in prepare_batch (JAX)."""

    def __init__(self) -> None:
        self.prepared: list[int] = []
        self.steps = 0

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        self.prepared.append(len(x))
        return x, y

    def train_step(self, batch: Any) -> None:
        self.steps += 1


def _runner(n_train: int, batch: int, epochs: int, accumulate: int = 1) -> tuple[StepRunner, ShapeRecorder]:
    trial = TrialSpec(experiment="t", framework="fake", model="tiny_cnn", dataset="synthetic", batch_size=batch,
                      repeat=0, seed=0, epochs=epochs, warmup_steps=1, timed_steps=2, optimizer=OptimizerSpec(lr=0.1),
                      device="cpu", threads=1, timeout_s=60.0, accumulate_steps=accumulate)
    adapter = ShapeRecorder()
    x = np.zeros((n_train, 1, 4, 4), np.float32)
    return StepRunner(adapter, trial, x, np.zeros(n_train, np.int64), n_train), adapter  # type: ignore[arg-type]


@pytest.mark.parametrize(("n_train", "batch", "epochs", "accumulate", "shapes"), [
    (10, 4, 2, 1, [2]),  # 4, 4, then a short batch of 2 every epoch
    (12, 4, 2, 1, []),  # the epoch divides evenly
    (10, 4, 0, 1, []),  # epochs = 0: full batches cycling through the data
    (10, 2, 2, 3, []),  # updates of 3 x 2; the last update's 4 samples are two full micro-batches
    (11, 2, 2, 3, [1]),  # ... its 5 samples are 2, 2 and a micro-batch of 1
])
def test_the_short_last_batch_is_prepared_before_training_and_nothing_is_trained(n_train, batch, epochs, accumulate,
                                                                                 shapes):
    runner, adapter = _runner(n_train, batch, epochs, accumulate)
    assert runner.other_shapes() == shapes
    runner.warm_shapes()
    assert adapter.prepared == shapes and adapter.steps == 0 and runner.micro_batches_n == 0
