"""The real budget a max-batch search runs under (:class:`Budget`), resolved from the request and the machine
(:func:`resolve_budget`). Budgets are real, never numbers compared in the parent:

* ``gpu-card``: the card's own memory (the framework fails when it is full);
* ``gpu-emulated``: a smaller card, enforced by the framework (PyTorch: per-process memory fraction,
  TensorFlow: a logical device with a memory limit; MXNet cannot, and says so);
* ``cpu-rlimit-data``: on CPU, ``RLIMIT_DATA`` on the worker (:mod:`harness.run.worker`): the kernel
  refuses allocations past the limit, and the framework's allocation fails inside the probe.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.envs.runtime import FrameworkRuntime, unchecked_runtime
from harness.errors import BatchscopeWarning, ConfigError
from harness.run.devices import resolve

if TYPE_CHECKING:
    from harness.maxbatch.request import MaxBatchRequest

BUDGET_KINDS = ("gpu-card", "gpu-emulated", "cpu-rlimit-data")


#: frameworks that cannot emulate a smaller GPU, and why (shown to the user as is)
NO_GPU_EMULATION = {
    "mxnet": "MXNet 1.9 has no per-process GPU memory cap (its pooled allocator takes what the card has); "
             "run mxnet without --memory-limit-mib, on the card you want to measure",
}


@dataclass(frozen=True)
class Budget:
    """The memory budget and how it is enforced."""

    mib: float
    kind: str  # one of BUDGET_KINDS
    device: str  # what the worker is told: "cpu" or "gpu"
    os_limit_mib: float | None  # RLIMIT_DATA on the worker (CPU)
    trial_limit_mib: float  # RuntimeConfig.memory_limit_mib (GPU emulation), 0: none


def _meminfo_mib(key: str) -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name == key:
                    return int(value.split()[0]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def _check_machine_memory(limit_mib: float) -> None:
    """A CPU budget is an OS limit on each probe, not memory set aside: one above what the machine has is refused
    (not capped: a capped search would answer another question than the one asked, under the budget stored with it),
    since the probes would grow until the kernel's OOM killer stops one, which may not be a probe. One above the
    memory available now is let through with a note: what is available moves, and the search may still end below it."""
    total, available = _meminfo_mib("MemTotal"), _meminfo_mib("MemAvailable")
    asked = f"{limit_mib:.0f}" if limit_mib == int(limit_mib) else f"{limit_mib}"  # as typed, not 1e+08
    if total is not None and limit_mib > total:
        raise ConfigError(f"--memory-limit-mib {asked} (memory_limit_mib in an experiment) is more than this "
                          f"machine has: {total:.0f} MiB of memory, {available or 0:.0f} MiB available now. On CPU the "
                          "budget is an OS limit on each probe, so a search under it would end in the kernel's OOM "
                          f"killer, not in a probe's failed allocation; give at most {total:.0f}")
    if available is not None and limit_mib > available:
        warnings.warn(f"--memory-limit-mib {asked} is more than the {available:.0f} MiB available now (of "
                      f"{total or 0:.0f}); a probe near the budget may be stopped by the kernel's OOM killer (a "
                      "crashed probe) before it fails an allocation", BatchscopeWarning, stacklevel=3)


def resolve_budget(req: MaxBatchRequest, gpus: list[dict[str, Any]], runtime: FrameworkRuntime | None = None
                   ) -> Budget:
    """Where the search runs and how its budget is enforced. Refuses what cannot be enforced. ``runtime``: the
    framework as the command resolved it (the build a device is resolved from is the one its probes run in);
    without one, a test's: this interpreter's."""
    # device = "auto" resolved per framework, as the sweep does (issue 29): a CPU-only build beside a GPU searches
    # on the CPU, under the budget the CPU needs, never told "gpu"
    def auto_device() -> str:
        if runtime is not None and runtime.device is not None:  # the sweep resolved it already
            return runtime.device
        return resolve(runtime or unchecked_runtime(req.framework, req.python), "auto", True).device

    on_gpu = req.device == "gpu" or (req.device == "auto" and bool(gpus) and auto_device() == "gpu")
    if req.device == "gpu" and not gpus:
        raise ConfigError("--device gpu was asked for, but NVML sees no GPU here; use --device cpu with "
                          "--memory-limit-mib N (a budget the OS enforces on each probe)")
    if not on_gpu:
        if not req.memory_limit_mib:
            raise ConfigError("on CPU give --memory-limit-mib N (memory_limit_mib in an experiment): the "
                              "budget each probe's worker gets from the OS (RLIMIT_DATA); without one the "
                              "search would only stop when the machine does")
        _check_machine_memory(req.memory_limit_mib)
        return Budget(req.memory_limit_mib, "cpu-rlimit-data", "cpu", req.memory_limit_mib, 0.0)
    card_mib = float(gpus[0]["memory_total_mib"])
    if not req.memory_limit_mib:
        return Budget(card_mib, "gpu-card", "gpu", None, 0.0)
    if req.framework in NO_GPU_EMULATION:
        raise ConfigError(f"--memory-limit-mib on a GPU: {NO_GPU_EMULATION[req.framework]}")
    if req.memory_limit_mib > card_mib:
        raise ConfigError(f"--memory-limit-mib {req.memory_limit_mib:g} is more than the card has "
                          f"({card_mib:.0f} MiB); give at most that, or leave it out to use the whole card")
    return Budget(req.memory_limit_mib, "gpu-emulated", "gpu", None, req.memory_limit_mib)
