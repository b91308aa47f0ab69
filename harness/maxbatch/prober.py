"""Moved (issue 39): the probes are :mod:`harness.maxbatch.probes`, the search as one object
:mod:`harness.maxbatch.searching`, the answer as the store records it :mod:`harness.maxbatch.answer`. Each old name
still resolves, once per lookup, with a :class:`DeprecationWarning` naming its new home (CHANGELOG)."""

from __future__ import annotations

import warnings
from typing import Any

#: old name -> (new module, new name)
_MOVED = {
    **{name: ("harness.maxbatch.probes", name) for name in (
        "WorkerProber", "probe_peak_mib", "probe_growth_mib", "control_limit_mib", "search_settings", "settle_heap",
        "parse_estimate", "estimate_batches", "does_not_fit_message", "CONTROL_FACTOR", "CONTROL_FLOOR_MIB",
        "HEAP_SETTLE_RUNS", "HEAP_SETTLE_ROUNDS", "ESTIMATE_SPAN", "SETUP_MEMORY_ERRORS", "MIB")},
    **{name: ("harness.maxbatch.answer", name) for name in (
        "estimate_capable", "cuda_context_mib", "answer_throughput", "settled", "verified")},
    "estimate_fields": ("harness.maxbatch.answer", "estimate_part"),
    "result_row": ("harness.maxbatch.answer", "answer_record"),
    "MaxBatchOutcome": ("harness.maxbatch.searching", "MaxBatchOutcome"),
    "run_maxbatch": ("harness.maxbatch.searching", "run_maxbatch"),
}

#: the names whose arguments or result changed with the move (typed parts, issue 39)
_CHANGED = {"estimate_fields", "result_row", "settled", "verified", "settle_heap"}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, new = _MOVED[name]
    warnings.warn(f"harness.maxbatch.prober.{name} is deprecated: import {new} from {module}"
                  + (" (its arguments or result changed: see its docstring)" if name in _CHANGED else ""),
                  DeprecationWarning, stacklevel=2)
    if module == "harness.maxbatch.probes":
        from harness.maxbatch import probes as home
    elif module == "harness.maxbatch.answer":
        from harness.maxbatch import answer as home  # type: ignore[no-redef]
    else:
        from harness.maxbatch import searching as home  # type: ignore[no-redef]
    return getattr(home, new)
