"""Which device each installed framework build can use, read from the installed distributions' metadata.

No framework is imported: the parent resolves ``device = "auto"`` per framework from these facts before the first
trial (harness/run/devices.py), and ``batchscope doctor`` names each build. A wheel's version and the CUDA
libraries it depends on say what it was built for; whether the driver then accepts it is the worker's to find
(a trial resolved to the GPU that cannot use it ends in ``error``, never silently on the CPU).
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuBuild:
    """What one installed framework build can run on.

    ``gpu``: True when built for CUDA, False when CPU only, None when the metadata cannot tell.
    ``label``: the build in words, for ``doctor`` and ``run`` ("CPU only (tensorflow-cpu 2.21.0 is installed)").
    """

    gpu: bool | None
    label: str


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _cuda_from_tag(tag: str) -> str:
    """``cu130`` -> ``13.0``, ``cu118`` -> ``11.8``, ``cu12`` -> ``12``."""
    digits = tag.removeprefix("cu")
    return digits if len(digits) <= 2 else f"{digits[:-1]}.{digits[-1]}"


def _nvidia_runtime() -> str | None:
    """The CUDA version of an installed NVIDIA runtime wheel (``nvidia-cuda-runtime-cu12`` 12.8.90 -> 12.8)."""
    for dist in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12",
                 "nvidia-cuda-runtime-cu11"):
        version = _version(dist)
        if version:
            return ".".join(version.split(".")[:2])
    return None


def pytorch_build() -> GpuBuild | None:
    """torch: its version's local part (``+cpu``, ``+cu130``), else the NVIDIA wheels it requires (PyPI's Linux
    wheels are CUDA builds without a local part)."""
    version = _version("torch")
    if version is None:
        return None
    local = version.partition("+")[2]
    if local == "cpu":
        return GpuBuild(False, f"CPU only (torch {version})")
    if local.startswith("cu"):
        return GpuBuild(True, f"CUDA {_cuda_from_tag(local)} (torch {version})")
    if local.startswith("rocm"):
        return GpuBuild(None, f"ROCm (torch {version}): not measured by batchscope's NVML sampler")
    requires = md.requires("torch") or []
    if any(r.startswith("nvidia-") and "extra ==" not in r for r in requires):
        cuda = _nvidia_runtime()
        return GpuBuild(True, f"CUDA {cuda or '(version unknown)'} (torch {version})")
    return GpuBuild(False, f"CPU only (torch {version})")


def jax_build() -> GpuBuild | None:
    """jax: a CUDA plugin (``jax-cuda12-plugin`` / ``jax-cuda13-plugin``) or an old ``jaxlib+cuda`` wheel."""
    version = _version("jax")
    if version is None:
        return None
    for major in ("13", "12"):
        plugin = _version(f"jax-cuda{major}-plugin")
        if plugin:
            return GpuBuild(True, f"CUDA {major} (jax {version}, jax-cuda{major}-plugin {plugin})")
    jaxlib = _version("jaxlib") or ""
    if "+cuda" in jaxlib:
        return GpuBuild(True, f"CUDA (jaxlib {jaxlib})")
    return GpuBuild(False, f"CPU only (jax {version}; no jax-cuda12-plugin or jax-cuda13-plugin is installed)")


def tensorflow_build() -> GpuBuild | None:
    """tensorflow: ``tensorflow-cpu`` is CPU only; Linux ``tensorflow`` is built for CUDA and finds its libraries
    in the ``tensorflow[and-cuda]`` NVIDIA wheels (or a system CUDA, which the metadata cannot see)."""
    cpu = _version("tensorflow-cpu")
    full = _version("tensorflow") or _version("tensorflow-gpu")
    if full is None:
        return GpuBuild(False, f"CPU only (tensorflow-cpu {cpu} is installed)") if cpu else None
    if not sys.platform.startswith("linux"):
        return GpuBuild(False, f"CPU only (tensorflow {full}: TensorFlow's CUDA builds are Linux only)")
    if _version("nvidia-cudnn-cu12") or _version("nvidia-cudnn-cu13"):
        return GpuBuild(True, f"CUDA {_nvidia_runtime() or '12'} (tensorflow {full} with its [and-cuda] libraries)")
    return GpuBuild(None, f"CUDA build (tensorflow {full}) without the [and-cuda] libraries: it uses the GPU only "
                          "where a system CUDA and cuDNN are found (pip install 'tensorflow[and-cuda]')")


def mxnet_build() -> GpuBuild | None:
    """mxnet: ``mxnet-cuNNN`` wheels are CUDA builds; ``mxnet`` and ``mxnet-mkl`` are CPU only."""
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower()
        match = re.fullmatch(r"mxnet-(cu\d+)(mkl)?", name)
        if match:
            return GpuBuild(True, f"CUDA {_cuda_from_tag(match.group(1))} ({name} {dist.version})")
    for cpu_dist in ("mxnet", "mxnet-mkl"):
        version = _version(cpu_dist)
        if version:
            return GpuBuild(False, f"CPU only ({cpu_dist} {version} is installed)")
    return None
