"""train_step hands the work to another thread and returns at once, like an asynchronous device with no sync."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from adapters.pytorch import PyTorchAdapter


class LazyStep(PyTorchAdapter):
    def __init__(self) -> None:
        super().__init__()
        self._device_queue = ThreadPoolExecutor(max_workers=1)  # the "device": runs steps in order
        self._pending: Future[None] | None = None

    def _sync(self) -> None:
        if self._pending is not None:
            self._pending.result()

    def train_step(self, batch: Any) -> None:
        self._pending = self._device_queue.submit(super().train_step, batch)  # defect: no wait

    def get_weights(self) -> list[np.ndarray]:
        self._sync()  # reading results waits for the device, as a real framework's copy to host does
        return super().get_weights()

    def predict(self, batch: Any) -> np.ndarray:
        self._sync()
        return super().predict(batch)

    def batchnorm_state(self) -> list[tuple[np.ndarray, np.ndarray]]:
        self._sync()
        return super().batchnorm_state()
