"""What the JAX adapter settles about the GPU before JAX starts, without importing JAX (XLA reads its memory
settings once, when its GPU backend starts): which memory-fraction variable the installed jaxlib reads, what
fraction gives the trial its budget on the GPU the worker sees, and which ``jax[cuda..]`` extra fits this machine.

Everything here reads package metadata, the environment and NVML (``pynvml``, where the worker's interpreter has
it: :func:`adapters.gpumem.nvml_module`), and takes them as arguments where a test must stand in for them.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

from adapters import gpumem

MIB = 1024.0 * 1024.0
NEW_FRACTION_VAR = "XLA_CLIENT_MEM_FRACTION"
OLD_FRACTION_VAR = "XLA_PYTHON_CLIENT_MEM_FRACTION"
#: The first jaxlib that reads XLA_CLIENT_MEM_FRACTION and raises ("... is specified together with
#: XLA_PYTHON_CLIENT_MEM_FRACTION. Remove the latter one") when both are set: jaxlib/xla_client.py from jax 0.6.0,
#: when xla_client moved from XLA into the JAX repository (JAX's docs: the old name "is deprecated in favor of
#: XLA_CLIENT_MEM_FRACTION"). Every jaxlib, before and since, reads the old name when it is set alone, so an older
#: or unreadable version gets the old name.
NEW_FRACTION_SINCE = (0, 6, 0)
#: The CUDA plugins JAX's extras install (``jax[cuda12]``, ``jax[cuda13]``), newest first.
CUDA_PLUGINS = ("jax-cuda13-plugin", "jax-cuda12-plugin")
#: What a whole-card budget leaves out of a preallocated pool, besides the memory already in use when the worker
#: starts: the CUDA context and cuBLAS/cuDNN workspaces, which XLA allocates outside its pool after it preallocates.
PREALLOCATE_HEADROOM_MIB = 1024.0


def _version_tuple(version: str) -> tuple[int, ...]:
    """The leading numbers of ``version`` ("0.7.1" -> (0, 7, 1); "0.6.0.dev20250301" -> (0, 6, 0))."""
    out = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        out.append(int(digits.group()))
    return tuple(out)


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (metadata only), None when it is not installed."""
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def fraction_variable(jaxlib_version: str | None) -> str:
    """The one memory-fraction variable ``jaxlib_version`` reads (None: jaxlib's version is unknown)."""
    if jaxlib_version and _version_tuple(jaxlib_version) >= NEW_FRACTION_SINCE:
        return NEW_FRACTION_VAR
    return OLD_FRACTION_VAR


def settle_fraction_variables(jaxlib_version: str | None, environ: MutableMapping[str, str],
                              fraction: float | None = None) -> dict[str, Any]:
    """Leave exactly one memory-fraction variable in ``environ``, the one the installed jaxlib reads.

    ``fraction``: the trial's own, which replaces whatever the user set. None: the user's own value (from the
    variable this jaxlib reads where both are set) is kept, under that name. Returns what was done, for the
    trial's device facts (the user's values that were dropped or replaced are named, never silently lost).
    """
    name = fraction_variable(jaxlib_version)
    users = {k: environ.pop(k) for k in (NEW_FRACTION_VAR, OLD_FRACTION_VAR) if k in environ}
    info: dict[str, Any] = {}
    value = f"{fraction:.4f}" if fraction is not None else users.get(name, next(iter(users.values()), None))
    if value is not None:
        environ[name] = value
        info["memory_fraction_env"] = f"{name}={value}"
    dropped = {k: v for k, v in users.items() if not (k == name and v == value)}
    if dropped:
        info["memory_fraction_env_dropped"] = ", ".join(f"{k}={v}" for k, v in sorted(dropped.items()))
    return info


@dataclass(frozen=True)
class VisibleGPU:
    """The GPU a worker uses as its first CUDA device, as NVML sees it."""

    label: str
    total_mib: float
    free_mib: float


def visible_gpu(environ: MutableMapping[str, str], nvml: Any = None) -> VisibleGPU | None:
    """The first GPU ``CUDA_VISIBLE_DEVICES`` leaves the worker (by CUDA index, in the PCI bus order the worker runs
    under, or by UUID), not NVML's GPU 0. None where NVML has no driver or every GPU is hidden."""
    nvml = nvml if nvml is not None else gpumem.nvml_module()
    if nvml is None:  # pynvml is not installed in this worker's interpreter: the adapter notes it (setup facts)
        return None
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    first = "0" if visible is None else visible.split(",")[0].strip()
    if first in ("", "-1", "none", "NoDevFiles"):
        return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        if first.isdigit():
            count = nvml.nvmlDeviceGetCount()
            if int(first) >= count:
                return None
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            by_bus = sorted(handles, key=lambda h: _text(nvml.nvmlDeviceGetPciInfo(h).busId).upper())
            handle, label = by_bus[int(first)], f"CUDA device {first}"
        else:
            handle, label = nvml.nvmlDeviceGetHandleByUUID(first), first
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        return VisibleGPU(label=f"{label} ({_text(nvml.nvmlDeviceGetName(handle))})", total_mib=mem.total / MIB,
                          free_mib=mem.free / MIB)
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def whole_card_fraction(gpu: VisibleGPU, preallocate: bool) -> tuple[float, str]:
    """(fraction, what it gives) for a trial with the whole card: XLA's default caps its pool at 75 % of the card,
    which would understate JAX's max batch against PyTorch's (whose allocator takes until the card is full).

    Growth: 1.0, a cap at the card's total, so an allocation fails only where the card is full, as PyTorch's does.
    Preallocation: what was free when the worker started less :data:`PREALLOCATE_HEADROOM_MIB` (a pool of the
    card's total cannot be taken once a CUDA context exists), stated as the budget it is."""
    if not preallocate:
        return 1.0, f"the whole card: {gpu.total_mib:.0f} MiB of {gpu.label}, taken as needed"
    budget = max(0.0, gpu.free_mib - PREALLOCATE_HEADROOM_MIB)
    return min(1.0, budget / gpu.total_mib), (
        f"{budget:.0f} MiB preallocated of {gpu.label}'s {gpu.total_mib:.0f} MiB: what was free at start-up "
        f"({gpu.free_mib:.0f} MiB) less {PREALLOCATE_HEADROOM_MIB:.0f} MiB for the CUDA context and workspaces")


def _dist_names() -> Iterable[str]:
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name:
            yield name.lower().replace("_", "-")


def cuda_extra(driver_cuda_version: Callable[[], int | None] | None = None,
               dist_names: Callable[[], Iterable[str]] = _dist_names) -> tuple[str, str]:
    """(the ``jax[cuda..]`` extra for this machine, why): the driver's CUDA version (NVML) where it can be read,
    else the CUDA of the installed NVIDIA wheels (``nvidia-*-cu12``/``-cu13``, e.g. PyTorch's), else cuda12."""
    major = (driver_cuda_version or _driver_cuda_version)()
    if major is not None:
        extra = "jax[cuda13]" if major >= 13 else "jax[cuda12]"
        return extra, f"the driver supports CUDA {major}"
    cudas = {m.group(1) for n in dist_names() if n.startswith("nvidia-") and (m := re.search(r"-cu(\d+)$", n))}
    if cudas:
        newest = max(int(c) for c in cudas)
        return f"jax[cuda{newest}]", f"the installed NVIDIA wheels are CUDA {newest}'s"
    return "jax[cuda12]", "the driver's CUDA version could not be read"


def _driver_cuda_version() -> int | None:
    """The CUDA major version the driver supports (NVML), None without a driver (or without ``pynvml``)."""
    pynvml = gpumem.nvml_module()
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return int(pynvml.nvmlSystemGetCudaDriverVersion()) // 1000
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def no_gpu_remedy(cause: str, plugins: dict[str, str], extra: tuple[str, str]) -> str:
    """What the user reads when ``device = 'gpu'`` and JAX started no CUDA backend: the cause JAX gave (it no
    longer falls back to the CPU silently: ``jax_platforms = 'cuda'``), and the remedy that fits what is installed."""
    if plugins:
        names = ", ".join(f"{k} {v}" for k, v in plugins.items())
        return (f"the CUDA plugin ({names}) is installed but did not start: {cause or 'no reason given'}; "
                f"if its CUDA does not suit the driver, install {extra[0]!r} ({extra[1]})")
    return f"no CUDA plugin is installed ({cause or 'no reason given'}): pip install {extra[0]!r} ({extra[1]})"


def installed_plugins() -> dict[str, str]:
    """The JAX CUDA plugins installed (distribution -> version), from metadata."""
    return {p: v for p in CUDA_PLUGINS if (v := installed_version(p)) is not None}


def worker_environ() -> MutableMapping[str, str]:
    """The process's environment (a seam for tests)."""
    return os.environ
