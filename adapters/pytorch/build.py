"""Which device the installed PyTorch build can use, from its distributions' metadata; no framework is imported
(:mod:`adapters.builds` says how the parent uses it)."""

from __future__ import annotations

import importlib.metadata as md

from adapters.builds import GpuBuild, cuda_from_tag, dist_version, nvidia_runtime


def gpu_build() -> GpuBuild | None:
    """torch: its version's local part (``+cpu``, ``+cu130``), else the NVIDIA wheels it requires (PyPI's Linux
    wheels are CUDA builds without a local part)."""
    version = dist_version("torch")
    if version is None:
        return None
    local = version.partition("+")[2]
    if local == "cpu":
        return GpuBuild(False, f"CPU only (torch {version})")
    if local.startswith("cu"):
        return GpuBuild(True, f"CUDA {cuda_from_tag(local)} (torch {version})")
    if local.startswith("rocm"):
        return GpuBuild(None, f"ROCm (torch {version}): not measured by batchscope's NVML sampler")
    requires = md.requires("torch") or []
    if any(r.startswith("nvidia-") and "extra ==" not in r for r in requires):
        cuda = nvidia_runtime()
        return GpuBuild(True, f"CUDA {cuda or '(version unknown)'} (torch {version})")
    return GpuBuild(False, f"CPU only (torch {version})")
