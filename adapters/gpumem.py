"""What a worker's process holds on the GPU outside its framework's allocator: the CUDA context (issue 31, item 5).

An emulated card (``RuntimeConfig.memory_limit_mib``) caps the framework's allocator, but a real card of that size
also holds the process's CUDA context (the driver's state, the kernels loaded, cuBLAS/cuDNN handles): ~300-600 MiB
on current cards, outside any allocator. An adapter measures it here, in its worker, once the context exists, and
takes it off the cap, so the emulated card holds what a real one would; it reports the figure at the end of
training too (``MemoryStats.context_mib``: lazily loaded kernels and library handles add to it during the first
steps), which the max-batch search adds to the allocator's peak.

NVML is read directly (``pynvml``, from nvidia-ml-py: a driver binding, not a framework): this process's used
memory, on every device NVML lists it on, minus what the framework's allocator holds. Where NVML does not list the
process (a container with its own PID namespace), the devices' used memory now minus before the context was created
(:func:`devices_used_mib`, taken first) stands in: it also counts any other process that allocated meanwhile,
which the source says.

``pynvml`` is imported here on first use, only where a GPU's memory is read: a worker's interpreter needs nothing
but its framework and numpy (docs/environments.md), so a user's own environment without nvidia-ml-py runs every CPU
trial, and on a GPU the reading is unknown with a source that names what is missing. Tests patch
``adapters.gpumem.pynvml`` (the module-level name, made on first use).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

MIB = 1024.0 * 1024.0


def nvml_module() -> Any | None:
    """The ``pynvml`` module, imported on first use and kept as this module's ``pynvml``; None where it is not
    installed (a worker's own environment need not have it: :func:`pynvml_missing` says so)."""
    cached = globals().get("pynvml")
    if cached is not None:
        return cached
    try:
        import pynvml as lib  # from nvidia-ml-py: a driver binding, not a framework
    except ImportError:
        return None
    globals()["pynvml"] = lib
    return lib


def pynvml_missing(what: str) -> str | None:
    """Why ``what`` cannot be read through NVML in this worker (``pynvml`` is not installed in its interpreter),
    or None where it can be tried."""
    if nvml_module() is not None:
        return None
    return f"none: pynvml is not installed in this worker's interpreter ({sys.executable}); install nvidia-ml-py " \
           f"there to read {what}"


def __getattr__(name: str) -> Any:
    """``adapters.gpumem.pynvml`` before its first use (a test patches it): imported then."""
    if name == "pynvml":
        lib = nvml_module()
        if lib is not None:
            return lib
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ContextReading:
    """The memory the process holds on the GPU outside its allocator, and how it was found (None: unknown)."""

    mib: float | None
    source: str


def _devices(pynvml: Any) -> list[object]:
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def devices_used_mib() -> float | None:
    """The used memory of every GPU NVML lists, summed; None without NVML (or without ``pynvml``)."""
    pynvml = nvml_module()
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return sum(float(pynvml.nvmlDeviceGetMemoryInfo(h).used) for h in _devices(pynvml)) / MIB
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def process_used_mib(pid: int | None = None) -> float | None:
    """What process ``pid`` (this one by default) uses on the GPUs NVML lists, summed; None when NVML is missing or
    does not list the process on any device."""
    pid = os.getpid() if pid is None else pid
    pynvml = nvml_module()
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        used = [p.usedGpuMemory for h in _devices(pynvml) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                if p.pid == pid and p.usedGpuMemory is not None]
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()
    return sum(float(u) for u in used) / MIB if used else None


def context_mib(allocator_mib: float, before_mib: float | None = None) -> ContextReading:
    """What this process holds on the GPU beyond ``allocator_mib`` (what its framework's allocator holds now).

    ``before_mib``: :func:`devices_used_mib` taken before the context was created, for the fallback where NVML does
    not list this process.
    """
    missing = pynvml_missing("the CUDA context's memory")
    if missing:
        return ContextReading(None, missing)
    own = process_used_mib()
    if own is not None:
        return ContextReading(max(0.0, own - allocator_mib), "NVML: this process's used memory - the allocator's")
    now = devices_used_mib() if before_mib is not None else None
    if now is not None and before_mib is not None:
        return ContextReading(max(0.0, now - before_mib - allocator_mib),
                              "NVML: the devices' used memory since before the context - the allocator's (this "
                              "process is not listed: another PID namespace; other processes' changes count too)")
    return ContextReading(None, "none: NVML does not tell")


def hinted_context(hint_mib: float | None) -> ContextReading:
    """The context to take off an emulated card where the framework's cap must be set before its context exists
    (TensorFlow's logical device, XLA's memory fraction): what an earlier probe of the same search measured in its
    worker (``RuntimeConfig.context_hint_mib``); unknown for the search's first probe, whose cap is then the whole
    budget (a probe at a small batch: what it measures is the context, not the boundary)."""
    if hint_mib is not None and hint_mib > 0:
        return ContextReading(float(hint_mib), "an earlier probe of this search (NVML, in its worker)")
    return ContextReading(None, "none yet: the search's first probe (the cap is the whole budget)")


def emulated_cap_mib(limit_mib: float, context: ContextReading) -> float:
    """What the framework's allocator may hold on an emulated card of ``limit_mib``: the card less the context
    (0 when the context alone fills it, so the first allocation fails as on such a card)."""
    return max(0.0, limit_mib - (context.mib or 0.0))
