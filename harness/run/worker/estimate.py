"""A max-batch probe's framework estimate (issue 41): the adapter's own figure for one training step's peak memory at
a few batch sizes, asked for after the probe's steps and evaluation, so that nothing the probe measured (its peak,
its steps) includes it.

The estimate is advice: it chooses where the search probes first, never what the answer is. So whatever happens
here (the adapter has no estimate, it answers None, it raises, it runs out of memory under the probe's limit) is
reported as the estimate's ``error`` (:class:`harness.records.StepEstimate`) and the probe's own result stands.
"""

from __future__ import annotations

import time

from adapters.base import Adapter
from harness.records import StepEstimate

MIB = 1024.0 * 1024.0


def step_estimate(adapter: Adapter, batches: tuple[int, ...]) -> StepEstimate:
    """``adapter.estimate_step_memory`` at each of ``batches`` (MiB) and the seconds it took, or an estimate whose
    ``error`` says why there is none (the probe's result stands either way)."""
    if type(adapter).estimate_step_memory is Adapter.estimate_step_memory:
        return StepEstimate(error=f"the {adapter.name} adapter offers no step-memory estimate")
    t0 = time.perf_counter()
    sizes: list[int] = []
    mib: list[float] = []
    try:
        for batch in batches:
            found = adapter.estimate_step_memory(int(batch))
            if found is None or not found > 0:
                return StepEstimate(error=f"no estimate at batch {batch} (the adapter answered {found!r})")
            sizes.append(int(batch))
            mib.append(float(found) / MIB)
    except MemoryError as exc:  # under the probe's RLIMIT_DATA: the same, said as such
        return StepEstimate(error=f"out of memory while estimating: {str(exc)[:200]}")
    except Exception as exc:  # noqa: BLE001 - an estimate that fails costs the search probes, never the probe's result
        return StepEstimate(error=f"{type(exc).__module__}.{type(exc).__qualname__}: {str(exc)[:500]}")
    return StepEstimate(tuple(sizes), tuple(mib), round(time.perf_counter() - t0, 3))
