"""XLA's CPU thread pools narrowed by CPU affinity, for the JAX adapter (:mod:`adapters.jax.adapter`); JAX is never
imported here."""

from __future__ import annotations

import os

#: the CPUs the process could run on before :func:`limit_threads` narrowed them (empty: never narrowed)
_BEFORE: list[int] = []


def limit_threads(threads: int) -> list[int]:
    """Make XLA's CPU thread pools ``threads`` wide; returns the CPUs this process may run on.

    XLA sizes its Eigen and task pools from the CPUs the process may be scheduled on (sched_getaffinity),
    and has no flag for "N threads" besides 1. Restricting the affinity is the knob that always works.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if not _BEFORE:  # the first narrowing's: a second setup in the process would record its own narrowing
        _BEFORE[:] = allowed
    chosen = allowed[:threads]
    os.sched_setaffinity(0, chosen)
    if threads == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    return chosen


def release_this_thread() -> list[int]:
    """Let the calling thread run on the CPUs the process had before :func:`limit_threads` (Linux applies
    ``sched_setaffinity(0, ...)`` to the calling thread alone); returns them (empty where nothing was narrowed).

    For the worker's prefetch thread: the narrowing is XLA's only knob for its own pools' width, and a thread created
    after it inherits it, so the batch gathering of a user's input pipeline, which no user pins to XLA's CPU, would
    be time-sliced with the step on that one CPU."""
    if _BEFORE:
        os.sched_setaffinity(0, _BEFORE)
    return list(_BEFORE)
