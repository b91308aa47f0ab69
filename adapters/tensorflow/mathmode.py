"""TensorFlow's GPU math mode: applied in its adapter's setup() and read back from TensorFlow (:mod:`adapters.mathmode`
says how math modes are checked; docs/precision.md, "Math mode", lists the switches). Each function takes the
framework's module, so that importing this imports no framework and a test can pass a stand-in."""

from __future__ import annotations

import os
from typing import Any

from adapters.mathmode import has_tf32
from harness.config.precision import gpu_math_mode


def apply(tf: Any, mode: str) -> None:
    """TensorFlow's one switch, for its convolutions and matmuls (XLA's included), before the first op runs."""
    if mode in ("ieee", "tf32"):
        tf.config.experimental.enable_tensor_float_32_execution(mode == "tf32")


def read(tf: Any, gpu: Any) -> str:
    """What TensorFlow computes float32 convolutions and matmuls in on ``gpu`` (its physical device; None: the CPU).
    NVIDIA_TF32_OVERRIDE=0 is not counted as turning TF32 off: XLA (Keras' jit_compile) may emit its own kernels."""
    if gpu is None:
        return "n/a"
    on = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    details = tf.config.experimental.get_device_details(gpu) or {}
    return gpu_math_mode(on, on, has_tf32(details.get("compute_capability")), os.environ, override_covers=False)
