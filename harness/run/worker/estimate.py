"""A max-batch probe's framework estimate (issue 41): the adapter's own figure for one training step's peak memory at
a few batch sizes, asked for after the probe's steps and evaluation, so that nothing the probe measured (its peak,
its steps) includes it.

The estimate is advice: it chooses where the search probes first, never what the answer is. So whatever happens
here (the adapter has no estimate, it answers None, it raises, it runs out of memory under the probe's limit) is
reported as text in ``step_estimate_json`` and the probe's own result stands.
"""

from __future__ import annotations

import json
import time

from adapters.base import Adapter

MIB = 1024.0 * 1024.0


def step_estimate_json(adapter: Adapter, batches: tuple[int, ...]) -> str:
    """JSON ``{"batches": [...], "mib": [...], "seconds": s}`` from ``adapter.estimate_step_memory`` at each of
    ``batches``, or ``{"error": "..."}`` saying why there is none (the probe's result stands either way)."""
    if type(adapter).estimate_step_memory is Adapter.estimate_step_memory:
        return json.dumps({"error": f"the {adapter.name} adapter offers no step-memory estimate"})
    t0 = time.perf_counter()
    sizes: list[int] = []
    mib: list[float] = []
    try:
        for batch in batches:
            found = adapter.estimate_step_memory(int(batch))
            if found is None or not found > 0:
                return json.dumps({"error": f"no estimate at batch {batch} (the adapter answered {found!r})"})
            sizes.append(int(batch))
            mib.append(float(found) / MIB)
    except MemoryError as exc:  # under the probe's RLIMIT_DATA: the same, said as such
        return json.dumps({"error": f"out of memory while estimating: {str(exc)[:200]}"})
    except Exception as exc:  # noqa: BLE001 - an estimate that fails costs the search probes, never the probe's result
        return json.dumps({"error": f"{type(exc).__module__}.{type(exc).__qualname__}: {str(exc)[:500]}"})
    return json.dumps({"batches": sizes, "mib": mib, "seconds": round(time.perf_counter() - t0, 3)})
