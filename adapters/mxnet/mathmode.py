"""MXNet's GPU math mode: applied in its adapter's setup() and read back from MXNet (:mod:`adapters.mathmode`
says how math modes are checked; docs/precision.md, "Math mode", lists the switches). Each function takes the
framework's module, so that importing this imports no framework and a test can pass a stand-in."""

from __future__ import annotations

import os

from harness.config.precision import TF32_OVERRIDE_VAR

#: MXNet's own switches (read by its operators when they first run): tensor cores at all, and float32 inputs
#: converted down to use them
TENSOR_CORE_VARS = ("MXNET_CUDA_ALLOW_TENSOR_CORE", "MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION")
#: why MXNet runs ``ieee`` only (shown when ``tf32`` is refused for it)
NOTE = ("MXNet has no switch that turns TF32 on for its float32 matmuls (cuBLAS runs them in float32) and "
              "cannot report what cuDNN picks; batchscope applies 'ieee' only, by NVIDIA_TF32_OVERRIDE=0 and "
              "MXNET_CUDA_ALLOW_TENSOR_CORE=0")


def apply(mode: str) -> None:
    """``ieee``: tensor cores off in MXNet's operators and in cuBLAS/cuDNN (before the first operator runs)."""
    if mode == "ieee":
        for var in TENSOR_CORE_VARS:
            os.environ[var] = "0"
        os.environ[TF32_OVERRIDE_VAR] = "0"


def read(gpu: bool) -> str:
    """``ieee`` where both backstops are set, ``unknown`` otherwise (MXNet cannot say what cuDNN picks); ``n/a`` on
    the CPU."""
    if not gpu:
        return "n/a"
    off = os.environ.get(TF32_OVERRIDE_VAR) == "0" and os.environ.get(TENSOR_CORE_VARS[0]) == "0"
    return "ieee" if off else "unknown"
