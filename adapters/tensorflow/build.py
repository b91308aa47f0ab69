"""Which device the installed TensorFlow build can use, from its distributions' metadata; no framework is imported
(:mod:`adapters.builds` says how the parent uses it)."""

from __future__ import annotations

import sys

from adapters.builds import GpuBuild, dist_version, nvidia_runtime


def gpu_build() -> GpuBuild | None:
    """tensorflow: ``tensorflow-cpu`` is CPU only; Linux ``tensorflow`` is built for CUDA and finds its libraries
    in the ``tensorflow[and-cuda]`` NVIDIA wheels (or a system CUDA, which the metadata cannot see)."""
    cpu = dist_version("tensorflow-cpu")
    full = dist_version("tensorflow") or dist_version("tensorflow-gpu")
    if full is None:
        return GpuBuild(False, f"CPU only (tensorflow-cpu {cpu} is installed)") if cpu else None
    if not sys.platform.startswith("linux"):
        return GpuBuild(False, f"CPU only (tensorflow {full}: TensorFlow's CUDA builds are Linux only)")
    if dist_version("nvidia-cudnn-cu12") or dist_version("nvidia-cudnn-cu13"):
        return GpuBuild(True, f"CUDA {nvidia_runtime() or '12'} (tensorflow {full} with its [and-cuda] libraries)")
    return GpuBuild(None, f"CUDA build (tensorflow {full}) without the [and-cuda] libraries: it uses the GPU only "
                          "where a system CUDA and cuDNN are found (pip install 'tensorflow[and-cuda]')")
