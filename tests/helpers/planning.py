"""A sweep planned without data on disk or a worker: the prepared-data record the planner reads, made up."""

from __future__ import annotations

from harness.data import PreparedData


def prepared(n_train: int = 2048, shape: tuple[int, int, int] = (3, 32, 32), classes: int = 10) -> PreparedData:
    """What :func:`harness.run.planner.plan` reads of a prepared data set (nothing is loaded from its directory)."""
    return PreparedData(directory="/nonexistent/batchscope-test-data", name="synthetic", input_shape=shape,
                        classes=classes, n_train=n_train, n_test=256, key="made-up", accuracy_meaningful=False)
