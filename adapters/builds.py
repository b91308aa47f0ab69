"""Which device a framework build can use, read from the installed distributions' metadata: what every framework
shares (each one's reading is ``adapters/<framework>/build.py``, ``gpu_build()``).

No framework is imported: the parent resolves ``device = "auto"`` per framework from these facts before the first
trial (harness/run/devices.py), and ``batchscope doctor`` names each build. A wheel's version and the CUDA
libraries it depends on say what it was built for; whether the driver then accepts it is the worker's to find
(a trial resolved to the GPU that cannot use it ends in ``error``, never silently on the CPU).
"""

from __future__ import annotations

import importlib.metadata as md
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuBuild:
    """What one installed framework build can run on.

    ``gpu``: True when built for CUDA, False when CPU only, None when the metadata cannot tell.
    ``label``: the build in words, for ``doctor`` and ``run`` ("CPU only (tensorflow-cpu 2.21.0 is installed)").
    """

    gpu: bool | None
    label: str


def dist_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def cuda_from_tag(tag: str) -> str:
    """``cu130`` -> ``13.0``, ``cu118`` -> ``11.8``, ``cu12`` -> ``12``."""
    digits = tag.removeprefix("cu")
    return digits if len(digits) <= 2 else f"{digits[:-1]}.{digits[-1]}"


def nvidia_runtime() -> str | None:
    """The CUDA version of an installed NVIDIA runtime wheel (``nvidia-cuda-runtime-cu12`` 12.8.90 -> 12.8)."""
    for dist in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12",
                 "nvidia-cuda-runtime-cu11"):
        version = dist_version(dist)
        if version:
            return ".".join(version.split(".")[:2])
    return None

