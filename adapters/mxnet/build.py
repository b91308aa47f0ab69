"""Which device the installed MXNet build can use, from its distributions' metadata; no framework is imported
(:mod:`adapters.builds` says how the parent uses it)."""

from __future__ import annotations

import importlib.metadata as md
import re

from adapters.builds import GpuBuild, cuda_from_tag, dist_version


def gpu_build() -> GpuBuild | None:
    """mxnet: ``mxnet-cuNNN`` wheels are CUDA builds; ``mxnet`` and ``mxnet-mkl`` are CPU only."""
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower()
        match = re.fullmatch(r"mxnet-(cu\d+)(mkl)?", name)
        if match:
            return GpuBuild(True, f"CUDA {cuda_from_tag(match.group(1))} ({name} {dist.version})")
    for cpu_dist in ("mxnet", "mxnet-mkl"):
        version = dist_version(cpu_dist)
        if version:
            return GpuBuild(False, f"CPU only ({cpu_dist} {version} is installed)")
    return None
