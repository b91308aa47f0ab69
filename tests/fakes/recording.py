"""The real adapters, recording a digest of every batch they are handed (tests only).

The worker augments in NumPy before ``prepare_batch``; recording there shows what each framework was
given to train on. The digest file is named by ``BATCHSCOPE_RECORD`` in the worker's environment.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

import numpy as np

from adapters.base import Adapter
from adapters.mxnet import MXNetAdapter
from adapters.pytorch import PyTorchAdapter
from adapters.tensorflow import TensorFlowAdapter


def _recording(cls: type[Adapter]) -> type[Adapter]:
    class Recording(cls):  # type: ignore[valid-type, misc]
        _ahead = threading.local()  # inside prepare_batch_ahead: its own call of prepare_batch is not a second batch

        @staticmethod
        def _record(x: np.ndarray) -> None:
            digest = hashlib.sha256(np.ascontiguousarray(x, dtype=np.float32).tobytes()).hexdigest()
            with open(os.environ["BATCHSCOPE_RECORD"], "a", encoding="ascii") as f:
                f.write(f"{len(x)} {digest}\n")

        def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
            if not getattr(self._ahead, "on", False):
                self._record(x)
            return super().prepare_batch(x, y)

        def prepare_batch_ahead(self, x: np.ndarray, y: np.ndarray) -> Any:  # the batch handed over ahead of its step
            self._record(x)
            self._ahead.on = True
            try:
                return super().prepare_batch_ahead(x, y)
            finally:
                self._ahead.on = False

    Recording.__name__ = f"Recording{cls.__name__}"
    return Recording


RecordingPyTorch = _recording(PyTorchAdapter)
RecordingTensorFlow = _recording(TensorFlowAdapter)
RecordingMXNet = _recording(MXNetAdapter)
TARGETS = {"pytorch": "tests.fakes.recording:RecordingPyTorch",
           "tensorflow": "tests.fakes.recording:RecordingTensorFlow",
           "mxnet": "tests.fakes.recording:RecordingMXNet"}
