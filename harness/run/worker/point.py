"""What a measurement at an evaluation point is given (:class:`PointContext`): shared by the evaluation points
(:mod:`harness.run.worker.evaluation`, which make one at each point) and the measurements taken there
(:mod:`harness.run.worker.noise`), so that neither needs the other to name it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adapters.base import Adapter
from harness.config.trial import TrialSpec


@dataclass(frozen=True)
class PointContext:
    """What a measurement at an evaluation point sees: the trial, the adapter with its weights as trained so far,
    where in the training the point is, and the training data (read-only) with its per-epoch order."""

    point: int  # 0-based, in training order
    step: int  # optimizer updates done
    samples_seen: int
    final: bool  # the evaluation at the end of the training
    trial: TrialSpec
    adapter: Adapter
    x_train: np.ndarray
    y_train: np.ndarray
    order: np.ndarray  # (epochs, n_train) sample indices: each epoch's order (harness.data.PreparedData.write_order)
    #: the batch size the training is at here (a batch-size schedule's; issue 52); 0: the trial's ``batch_size``
    batch_size: int = 0
