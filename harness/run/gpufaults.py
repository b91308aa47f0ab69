"""GPU faults a worker's own report cannot tell (issue 32), read from what the sampler saw while it ran.

* **The GPU fell off the bus** (NVML: "GPU is lost", Xid 79) while the worker ran: whatever the worker then
  reports (it may even finish, on a cached context, or die of an unspecified launch failure), the trial is an
  ``error`` with that reason, never an ``ok`` row nor an out-of-memory one.
* **Another process took the GPU's memory**: device memory used by processes outside the worker's tree (NVML's
  device total minus the worker tree's) grew by more than :data:`FOREIGN_GROWTH_MIB` while the trial ran, or
  since an earlier probe of the same search: an out-of-memory failure then is not the model's, so it is an
  ``error`` saying so (a max-batch search must not take it for its boundary, nor retry it as one).

Pure functions of the samples (dicts with the ``samples`` table's columns), tested on their own; the local
executor applies them to every trial, the max-batch prober across its probes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from harness.records import Status

#: what NVML's error says for a GPU that fell off the bus (pynvml.NVMLError_GpuIsLost)
GPU_LOST_TEXT = "GPU is lost"
#: growth of other processes' device memory that is not noise (a context is ~300-500 MiB, allocator pools move by
#: tens of MiB): beyond it an out-of-memory failure is someone else's
FOREIGN_GROWTH_MIB = 256.0


def gpu_lost(samples: Sequence[Mapping[str, Any]]) -> str | None:
    """The first sample's gap reason that says the GPU was lost, or None."""
    for s in samples:
        gap = s.get("gap_reason") or ""
        if GPU_LOST_TEXT.lower() in gap.lower():
            return str(gap)
    return None


def foreign_mib(samples: Sequence[Mapping[str, Any]]) -> list[float]:
    """Device memory held outside the worker's tree at each sample that read both figures (MiB)."""
    out = []
    for s in samples:
        used, own = s.get("gpu_mem_used_mib"), s.get("proc_gpu_mem_mib")
        if isinstance(used, (int, float)) and isinstance(own, (int, float)) and math.isfinite(used) \
                and math.isfinite(own):
            out.append(max(float(used) - float(own), 0.0))
    return out


def judge(status: Status, reason: str, samples: Sequence[Mapping[str, Any]],
          foreign_before_mib: float | None = None) -> tuple[Status, str]:
    """(status, reason) once GPU faults are taken into account (see the module); unchanged where there is none.

    ``foreign_before_mib``: other processes' device memory at an earlier point (the first probe of a search),
    against which a later out-of-memory probe is read.
    """
    lost = gpu_lost(samples)
    if lost is not None:
        said = f"; the worker's own outcome: {status}" + (f" ({reason})" if reason else "")
        return "error", (f"the GPU was lost while the trial ran ({lost}): it fell off the bus or was reset "
                         f"(see dmesg for an Xid); nothing it measured is a result{said}")
    if status != "oom":
        return status, reason
    foreign = foreign_mib(samples)
    if not foreign:
        return status, reason
    base = min(foreign) if foreign_before_mib is None else min(foreign_before_mib, min(foreign))
    grown = max(foreign) - base
    if grown > FOREIGN_GROWTH_MIB:
        return "error", (f"out of memory while another process took {grown:,.0f} MiB of the GPU (memory outside "
                         f"this worker grew from {base:,.0f} to {max(foreign):,.0f} MiB): not this model's limit; "
                         f"free the GPU and run again ({reason})")
    return status, reason
