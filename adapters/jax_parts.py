"""Framework-free parts of the JAX adapter (:mod:`adapters.jax`): layer functions chained into one (how the model
is built from the description's layers) and XLA's CPU thread pools narrowed by CPU affinity. JAX is never imported
here."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

#: A layer function: (its parameters, its state, input, training?) -> (output, new state).
LayerFn = Callable[[list[Any], list[Any], Any, bool], tuple[Any, list[Any]]]


def chain(layers: list[tuple[LayerFn, int, int]]) -> tuple[LayerFn, int, int]:
    """Layers applied in order as one layer function: each takes its slice of the parameters and state."""
    n_params, n_state = sum(n for _, n, _ in layers), sum(n for _, _, n in layers)

    def chained(params: list[Any], state: list[Any], x: Any, train: bool) -> tuple[Any, list[Any]]:
        new_state: list[Any] = []
        pi = si = 0
        for fn, np_, ns in layers:
            x, s = fn(params[pi : pi + np_], state[si : si + ns], x, train)
            new_state += s
            pi, si = pi + np_, si + ns
        return x, new_state  # no layers: the input itself (a residual block's identity shortcut)

    return chained, n_params, n_state


def limit_threads(threads: int) -> list[int]:
    """Make XLA's CPU thread pools ``threads`` wide; returns the CPUs this process may run on.

    XLA sizes its Eigen and task pools from the CPUs the process may be scheduled on (sched_getaffinity),
    and has no flag for "N threads" besides 1. Restricting the affinity is the knob that always works.
    """
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[:threads]
    os.sched_setaffinity(0, chosen)
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    return chosen
