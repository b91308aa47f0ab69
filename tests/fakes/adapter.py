"""A framework-free adapter whose behaviour a test chooses: runs fine, hangs, dies, raises.

Used to test the worker protocol and the parent's outcome classification without any framework.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from adapters.base import (
    Adapter,
    MemoryStats,
    OptimizerSpec,
    PrecisionSeen,
    RuntimeConfig,
    SetupFacts,
    is_generic_oom,
)
from harness.config.precision import COMPUTE_DTYPES
from harness.models import ModelDescription

#: what each GPU fault behaviour raises at the second step, worded as PyTorch, cuDNN and XLA word them (issue 32)
GPU_FAULT_ERRORS = {
    "cublas_alloc": "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "cudnn_alloc": "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "xla_exhausted": "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2147483648 bytes.",
    "illegal_address": "CUDA error: an illegal memory access was encountered",
    "launch_failure": "CUDA error: unspecified launch failure",
}
BEHAVIOURS = ("ok", "hang", "sigkill", "oom", "error", "segfault", "exit0", "noisy", "oom_stderr",
              "hang_setup", "oom_large", "hang_large", "keeps_denormals", "ignores_precision",
              "diverges", "nan_weights", "flood", "flood_then_error", "hang_eval_large", "slow_steps",
              "gpu_stats", "learns", "estimate_raises", "slow_close", *GPU_FAULT_ERRORS)
#: with behaviour "learns", the held-out accuracy after s training steps is min(1, s x LEARNS_PER_STEP) (to the
#: nearest sample of each evaluation batch): a known learning curve, for train-to-target tests (issue 33)
LEARNS_PER_STEP = 1 / 16
#: with behaviour "diverges" (NaN logits and weights) or "nan_weights" (NaN weights, finite logits), the training
#: goes bad from this step on
DIVERGES_AT_STEP = 3
#: with behaviour "flood_then_error", what the first step prints before it raises (bytes)
FLOOD_BYTES = 64 * 2**20
#: the behaviour when the experiment sets none: lets a test steer workers that a CLI command starts
BEHAVIOUR_ENV = "BATCHSCOPE_FAKE_BEHAVIOUR"
#: with behaviour "oom_large", batches of at least this many samples "run out of memory" (doomed sizes)
OOM_LARGE_BATCH = 64
#: a GPU name: the fake "runs" on that GPU (its setup reports it, and a math mode other than n/a)
FAKE_GPU_ENV = "BATCHSCOPE_FAKE_GPU"
#: the math mode the fake framework reads back whatever was asked (a framework that ignores the switch); unset: on
#: its fake GPU the mode asked (framework-default: tf32, as TensorFlow and JAX do), n/a on the CPU
FAKE_MATH_ENV = "BATCHSCOPE_FAKE_MATH"


TRANSIENT_MIB = 64
#: "ARM:FILLER:BATCH[:PRINT_BYTES]": the first step of a batch of at least BATCH samples, while the file ARM exists,
#: removes ARM and fills the disk that holds FILLER (a file written until the disk is full), then prints PRINT_BYTES
#: (a worker's log to write): a full disk at a chosen moment of a sweep (tests/faults/test_disk_full.py)
FILL_DISK_ENV = "BATCHSCOPE_FAKE_FILL_DISK"


def fill_disk(filler: str) -> int:
    """Write ``filler`` until its disk is full; the bytes written."""
    n, block = 0, b"\0" * 4096
    with open(filler, "ab", buffering=0) as f:
        while True:
            try:
                n += f.write(block)
            except OSError:  # ENOSPC: the disk is full (a tmpfs has no reserve)
                return n


def _maybe_fill_disk(batch: int) -> None:
    arm, filler, at, *rest = (os.environ.get(FILL_DISK_ENV) or "::0").split(":")
    if not arm or batch < int(at) or not os.path.exists(arm):
        return
    os.unlink(arm)
    fill_disk(filler)
    if rest:
        sys.stdout.write("chatter after the disk filled " * (int(rest[0]) // 30 + 1) + "\n")
        sys.stdout.flush()


class FakeAdapter(Adapter):
    """Does nothing much, or misbehaves on purpose in train_step (``behaviour`` option)."""

    name = "fake"
    distributions = ("numpy",)
    import_name = "numpy"
    options = {"behaviour": BEHAVIOURS}
    oom_stderr_patterns = ("FAKE ALLOCATOR ABORT",)
    precisions = ("fp32", "bf16")  # "computed" in the dtype asked for; behaviour "ignores_precision": float32 always
    math_modes = ("ieee", "tf32")  # applied to its fake GPU (FAKE_GPU_ENV), read back as FAKE_MATH_ENV says

    def __init__(self) -> None:
        self.behaviour = "ok"
        self.classes = 2
        self.steps = 0
        self.last_batch = 0
        self.precision = "fp32"

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}

    def setup(self, runtime: RuntimeConfig) -> SetupFacts:
        self.behaviour = runtime.options.get("behaviour", "ok")
        if self.behaviour == "ok":  # the default: a test may steer it from the environment
            self.behaviour = os.environ.get(BEHAVIOUR_ENV, "ok")
        self.validate_precision(runtime.precision, runtime.device)
        self.precision = runtime.precision
        if self.behaviour == "hang_setup":
            time.sleep(3600)
        gpu = os.environ.get(FAKE_GPU_ENV)
        asked = "tf32" if runtime.math_mode == "framework-default" else runtime.math_mode
        info: dict[str, Any] = {"device": "cuda:0", "gpu_name": gpu} if gpu else {"device": "cpu"}
        info["math_mode_seen"] = os.environ.get(FAKE_MATH_ENV) or (asked if gpu else "n/a")
        info["tf32_override"] = os.environ.get("NVIDIA_TF32_OVERRIDE")  # what the worker left for cuBLAS/cuDNN
        if self.behaviour == "keeps_denormals":  # an adapter that undoes the worker's FTZ/DAZ, as some might
            info["cpu_denormals"] = "keep"
        return SetupFacts.from_dict(info)

    def build(self, model: ModelDescription, weights: Sequence[np.ndarray], optimizer: OptimizerSpec) -> None:
        self.classes = model.classes
        self.n_params = model.param_count()

    def param_count(self) -> int:
        return self.n_params

    def _gone_bad(self) -> bool:
        return self.behaviour in ("diverges", "nan_weights") and self.steps >= DIVERGES_AT_STEP

    def get_weights(self) -> list[np.ndarray]:
        w = np.zeros(3, dtype=np.float32)
        if self._gone_bad():
            w[1] = np.nan
        return [np.ones((2, 2), dtype=np.float32), w]

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        return x, y

    def flat_gradient(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """A "gradient" whose noise is known: each example's is its input, so the batch's is their mean (G is
        the data's mean input, Σ the inputs' covariance). NaN once the training has gone bad."""
        g = np.asarray(x, dtype=np.float64).reshape(len(x), -1).mean(axis=0)
        return g * np.nan if self._gone_bad() else g

    def train_step(self, batch: Any) -> None:
        self.steps += 1
        if self.steps == 1:
            _maybe_fill_disk(len(batch[0]))
        b = self.behaviour
        if b == "oom_large" and len(batch[0]) >= OOM_LARGE_BATCH:
            raise MemoryError(f"fake: batch {len(batch[0])} does not fit")
        if b == "hang_large" and len(batch[0]) >= OOM_LARGE_BATCH:  # small sizes finish, a large one hangs
            time.sleep(3600)
        if b == "noisy":
            print("framework chatter on stdout {not json}", flush=True)
        if b == "flood":  # a framework gone mad: prints without end (bounded only by the trial's timeout)
            line = "flood " * 170 + "\n"
            while True:
                sys.stdout.write(line)
        if b == "flood_then_error":  # prints FLOOD_BYTES, then fails with a traceback at the end of its output
            line = "chatter " * 127 + "\n"  # 1 KiB
            for _ in range(FLOOD_BYTES // len(line)):
                sys.stdout.write(line)
            sys.stdout.flush()
            sys.stderr.write("fake: the flood ends here\n")
            raise ValueError("fake: failed after a flood of output")
        if b == "slow_steps":  # each step takes 0.2 s: a trial of a few seconds that needs no one to watch it
            time.sleep(0.2)
        self.last_batch = len(batch[0])
        if b == "transient":  # a 64 MiB scratch buffer mapped and unmapped within the step
            scratch = np.ones(TRANSIENT_MIB * 2**20, dtype=np.uint8)
            time.sleep(0.03)
            del scratch
        if self.steps < 2:
            time.sleep(0.001)
            return
        if b == "hang":
            time.sleep(3600)
        elif b == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif b == "oom":
            raise MemoryError("fake: cannot allocate 1 TiB")
        elif b == "error":
            raise ValueError("fake: a bug in the model")
        elif b in GPU_FAULT_ERRORS and self.last_batch >= OOM_LARGE_BATCH:  # small sizes run, as on a real card
            raise RuntimeError(GPU_FAULT_ERRORS[b])
        elif b == "segfault":
            ctypes.string_at(0)
        elif b == "exit0":
            os._exit(0)
        elif b == "oom_stderr":
            sys.stderr.write("FAKE ALLOCATOR ABORT: out of device memory\n")
            sys.stderr.flush()
            os.abort()
        time.sleep(0.001)

    def close(self) -> None:
        if self.behaviour == "slow_close":  # a teardown after the result that takes longer than the trial's limit
            time.sleep(3600)

    def predict(self, batch: Any) -> np.ndarray:
        x, _ = batch
        if self.behaviour == "hang_eval_large" and self.last_batch >= OOM_LARGE_BATCH:  # trains, then hangs in eval
            time.sleep(3600)
        fill = np.nan if self.behaviour == "diverges" and self._gone_bad() else 0.0
        if self.behaviour == "learns":  # the first min(1, steps x LEARNS_PER_STEP) of the batch right, the rest wrong
            y = np.asarray(batch[1]).astype(np.int64)
            right = round(min(1.0, self.steps * LEARNS_PER_STEP) * len(x))
            guess = np.where(np.arange(len(x)) < right, y, (y + 1) % self.classes)
            return np.eye(self.classes, dtype=np.float32)[guess] * 10.0
        return np.full((len(x), self.classes), fill, dtype=np.float32)

    def precision_seen(self) -> PrecisionSeen | None:
        if self.steps == 0:
            return None
        return PrecisionSeen("float32" if self.behaviour == "ignores_precision" else COMPUTE_DTYPES[self.precision])

    def reset_memory_stats(self) -> None:
        pass

    def memory_stats(self) -> MemoryStats:
        if self.behaviour == "gpu_stats":  # what a GPU adapter reports: allocated, reserved, outside the allocator
            return MemoryStats(peak_mib=100.0, source="fake", reserved_mib=150.0, context_mib=512.0)
        return MemoryStats(peak_mib=None, source="none: fake")

    def is_oom(self, exc: BaseException) -> bool:
        return is_generic_oom(exc)  # the fallback every real adapter ends with


class EstimatingFakeAdapter(FakeAdapter):
    """The fake adapter with a step-memory estimate (issue 41): 1 MiB + 0.25 MiB per sample, or (``behaviour``
    ``estimate_raises``) an estimate that raises, as a framework's tracer might on a model it cannot trace."""

    def estimate_step_memory(self, batch: int) -> int | None:
        if self.behaviour == "estimate_raises":
            raise RuntimeError("the fake tracer cannot trace this model")
        return int((1.0 + 0.25 * batch) * 1024 * 1024)
