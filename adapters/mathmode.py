"""The GPU math mode of each built-in framework: applied in its adapter's setup() and read back from the framework.

``math_mode = "ieee"`` makes float32 convolutions and matmuls true float32, ``"tf32"`` lets them use TensorFloat-32
tensor cores (Ampere and newer), ``"framework-default"`` changes nothing; in every case the adapter reports what the
framework will do, read from the framework's own switches (never the request echoed back), and the worker fails a
trial whose report is not what was asked (harness.config.precision.check_math_mode).
Each function takes the framework's module, so that no framework is imported here and each can be tested with a
stand-in. See docs/precision.md, "Math mode", for the switches and the frameworks' defaults.
"""

from __future__ import annotations

import os
from typing import Any

from harness.config.precision import TF32_MIN_CAPABILITY, TF32_OVERRIDE_VAR, gpu_math_mode

#: MXNet's own switches (read by its operators when they first run): tensor cores at all, and float32 inputs
#: converted down to use them
MXNET_TENSOR_CORE_VARS = ("MXNET_CUDA_ALLOW_TENSOR_CORE", "MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION")
#: why MXNet runs ``ieee`` only (shown when ``tf32`` is refused for it)
MXNET_NOTE = ("MXNet has no switch that turns TF32 on for its float32 matmuls (cuBLAS runs them in float32) and "
              "cannot report what cuDNN picks; batchscope applies 'ieee' only, by NVIDIA_TF32_OVERRIDE=0 and "
              "MXNET_CUDA_ALLOW_TENSOR_CORE=0")


def _capability(value: Any) -> tuple[int, ...] | None:
    """A compute capability as a tuple, from ``(8, 0)``, ``"8.0"`` or ``"80"``; None where unreadable."""
    try:
        if isinstance(value, (tuple, list)):
            return tuple(int(v) for v in value)
        text = str(value)
        if "." in text:
            return tuple(int(v) for v in text.split("."))
        return (int(text[:-1]), int(text[-1])) if text.isdigit() and len(text) >= 2 else None
    except (TypeError, ValueError):
        return None


def has_tf32(capability: Any) -> bool | None:
    """Whether a GPU of this compute capability has TF32 tensor cores (>= 8.0); None where it is unknown."""
    cap = _capability(capability) if capability is not None else None
    return None if cap is None else cap >= TF32_MIN_CAPABILITY


# ------------------------------------------------------------------------------------------------------ PyTorch
def torch_apply(torch: Any, mode: str) -> None:
    """Apply ``mode`` to cuDNN's convolutions and cuBLAS's matmuls. torch >= 2.9 sets it per backend and operator
    (``fp32_precision``) and refuses reads that mix it with the older ``allow_tf32`` flags, so one API is used."""
    if mode not in ("ieee", "tf32"):
        return
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
        return
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    torch.set_float32_matmul_precision("high" if mode == "tf32" else "highest")


def torch_flags(torch: Any) -> tuple[bool | None, bool | None]:
    """(convolutions, matmuls) allowed to use TF32, as torch reads its switches now (None: cannot tell).

    torch >= 2.9: ``cudnn.conv`` and ``cuda.matmul``'s ``fp32_precision``, where ``none`` defers to the parent
    (``cudnn``, then ``torch.backends``); matmuls deferring all the way are float32, torch's default since 1.12
    (its legacy flag reads False then). Before 2.9: ``cudnn.allow_tf32`` and ``cuda.matmul.allow_tf32``.
    """
    backends = torch.backends
    if not hasattr(backends.cuda.matmul, "fp32_precision"):
        return bool(backends.cudnn.allow_tf32), bool(backends.cuda.matmul.allow_tf32)
    root = str(getattr(backends, "fp32_precision", "none"))
    words = {"tf32": True, "ieee": False}
    conv_chain = (str(backends.cudnn.conv.fp32_precision), str(getattr(backends.cudnn, "fp32_precision", "none")), root)
    conv = words.get(next((v for v in conv_chain if v != "none"), "none"))
    matmul_value = next((v for v in (str(backends.cuda.matmul.fp32_precision), root) if v != "none"), "ieee")
    return conv, words.get(matmul_value)


def torch_read(torch: Any, cuda: bool) -> str:
    """What torch computes float32 convolutions and matmuls in on its first CUDA device; ``n/a`` off the GPU."""
    if not cuda:
        return "n/a"
    conv, matmul = torch_flags(torch)
    return gpu_math_mode(conv, matmul, has_tf32(torch.cuda.get_device_capability(0)), os.environ)


# --------------------------------------------------------------------------------------------------- TensorFlow
def tf_apply(tf: Any, mode: str) -> None:
    """TensorFlow's one switch, for its convolutions and matmuls (XLA's included), before the first op runs."""
    if mode in ("ieee", "tf32"):
        tf.config.experimental.enable_tensor_float_32_execution(mode == "tf32")


def tf_read(tf: Any, gpu: Any) -> str:
    """What TensorFlow computes float32 convolutions and matmuls in on ``gpu`` (its physical device; None: the CPU).
    NVIDIA_TF32_OVERRIDE=0 is not counted as turning TF32 off: XLA (Keras' jit_compile) may emit its own kernels."""
    if gpu is None:
        return "n/a"
    on = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    details = tf.config.experimental.get_device_details(gpu) or {}
    return gpu_math_mode(on, on, has_tf32(details.get("compute_capability")), os.environ, override_covers=False)


# ---------------------------------------------------------------------------------------------------------- JAX
#: jax_default_matmul_precision values (for 32-bit inputs, matmuls and convolutions) by what they compute on a GPU
JAX_PRECISIONS = {"float32": "ieee", "highest": "ieee", "F32_F32_F32": "ieee",
                  "tensorfloat32": "tf32", "TF32_TF32_F32": "tf32"}


def jax_apply(jax: Any, mode: str) -> None:
    """``jax_default_matmul_precision``: XLA's precision for 32-bit matmuls and convolutions, before any is traced."""
    if mode in ("ieee", "tf32"):
        jax.config.update("jax_default_matmul_precision", "float32" if mode == "ieee" else "tensorfloat32")


def jax_read(jax: Any, device: Any) -> str:
    """What JAX computes float32 matmuls and convolutions in on ``device`` (None: the CPU). Unset, XLA's default on
    a CUDA GPU is TF32 where the card has it; a setting not in :data:`JAX_PRECISIONS` reads ``unknown``. XLA emits
    its own kernels too, so NVIDIA_TF32_OVERRIDE=0 alone is not counted as turning TF32 off."""
    if device is None:
        return "n/a"
    value = jax.config.jax_default_matmul_precision
    tf32 = has_tf32(getattr(device, "compute_capability", None))
    if value is None or str(value).lower() == "default":
        return gpu_math_mode(True, True, tf32, os.environ, override_covers=False)
    word = JAX_PRECISIONS.get(str(value))
    if word is None:
        return "unknown"
    return gpu_math_mode(word == "tf32", word == "tf32", tf32, os.environ, override_covers=False)


# -------------------------------------------------------------------------------------------------------- MXNet
def mxnet_apply(mode: str) -> None:
    """``ieee``: tensor cores off in MXNet's operators and in cuBLAS/cuDNN (before the first operator runs)."""
    if mode == "ieee":
        for var in MXNET_TENSOR_CORE_VARS:
            os.environ[var] = "0"
        os.environ[TF32_OVERRIDE_VAR] = "0"


def mxnet_read(gpu: bool) -> str:
    """``ieee`` where both backstops are set, ``unknown`` otherwise (MXNet cannot say what cuDNN picks); ``n/a`` on
    the CPU."""
    if not gpu:
        return "n/a"
    off = os.environ.get(TF32_OVERRIDE_VAR) == "0" and os.environ.get(MXNET_TENSOR_CORE_VARS[0]) == "0"
    return "ieee" if off else "unknown"
