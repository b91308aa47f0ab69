"""JAX's GPU math mode: applied in its adapter's setup() and read back from JAX (:mod:`adapters.mathmode`
says how math modes are checked; docs/precision.md, "Math mode", lists the switches). Each function takes the
framework's module, so that importing this imports no framework and a test can pass a stand-in."""

from __future__ import annotations

import os
from typing import Any

from adapters.mathmode import has_tf32
from harness.config.precision import gpu_math_mode

#: jax_default_matmul_precision values (for 32-bit inputs, matmuls and convolutions) by what they compute on a GPU
PRECISIONS = {"float32": "ieee", "highest": "ieee", "F32_F32_F32": "ieee",
                  "tensorfloat32": "tf32", "TF32_TF32_F32": "tf32"}


def apply(jax: Any, mode: str) -> None:
    """``jax_default_matmul_precision``: XLA's precision for 32-bit matmuls and convolutions, before any is traced."""
    if mode in ("ieee", "tf32"):
        jax.config.update("jax_default_matmul_precision", "float32" if mode == "ieee" else "tensorfloat32")


def read(jax: Any, device: Any) -> str:
    """What JAX computes float32 matmuls and convolutions in on ``device`` (None: the CPU). Unset, XLA's default on
    a CUDA GPU is TF32 where the card has it; a setting not in :data:`PRECISIONS` reads ``unknown``. XLA emits
    its own kernels too, so NVIDIA_TF32_OVERRIDE=0 alone is not counted as turning TF32 off."""
    if device is None:
        return "n/a"
    value = jax.config.jax_default_matmul_precision
    tf32 = has_tf32(getattr(device, "compute_capability", None))
    if value is None or str(value).lower() == "default":
        return gpu_math_mode(True, True, tf32, os.environ, override_covers=False)
    word = PRECISIONS.get(str(value))
    if word is None:
        return "unknown"
    return gpu_math_mode(word == "tf32", word == "tf32", tf32, os.environ, override_covers=False)
