"""PyTorch's GPU math mode: applied in its adapter's setup() and read back from PyTorch (:mod:`adapters.mathmode`
says how math modes are checked; docs/precision.md, "Math mode", lists the switches). Each function takes the
framework's module, so that importing this imports no framework and a test can pass a stand-in."""

from __future__ import annotations

import os
from typing import Any

from adapters.mathmode import has_tf32
from harness.config.precision import gpu_math_mode


def apply(torch: Any, mode: str) -> None:
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


def flags(torch: Any) -> tuple[bool | None, bool | None]:
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


def read(torch: Any, cuda: bool) -> str:
    """What torch computes float32 convolutions and matmuls in on its first CUDA device; ``n/a`` off the GPU."""
    if not cuda:
        return "n/a"
    conv, matmul = flags(torch)
    return gpu_math_mode(conv, matmul, has_tf32(torch.cuda.get_device_capability(0)), os.environ)
