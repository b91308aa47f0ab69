"""Fake adapters whose installed build claims a device (issue 29): one resolves to the GPU, one is CPU only.

Both run on the CPU like :class:`tests.fakes.adapter.FakeAdapter`; only what the parent reads of their build
(``gpu_build``) differs, which is all the device resolution looks at.
"""

from __future__ import annotations

from adapters.builds import GpuBuild
from tests.fakes.adapter import FakeAdapter


class FakeGpuBuildAdapter(FakeAdapter):
    """A framework whose installed build is a CUDA build."""

    name = "fakegpu"

    @classmethod
    def gpu_build(cls) -> GpuBuild | None:
        return GpuBuild(True, "CUDA 13.0 (fakegpu 1.0+cu130)")


class FakeCpuBuildAdapter(FakeAdapter):
    """A framework whose installed build is CPU only (like tensorflow-cpu)."""

    name = "fakecpu"

    @classmethod
    def gpu_build(cls) -> GpuBuild | None:
        return GpuBuild(False, "CPU only (fakecpu-cpu 1.0 is installed)")
