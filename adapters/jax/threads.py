"""XLA's CPU thread pools narrowed by CPU affinity, for the JAX adapter (:mod:`adapters.jax.adapter`); JAX is never
imported here."""

from __future__ import annotations

import os


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
