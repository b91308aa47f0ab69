"""MXNet's OpenMP threads, for the MXNet adapter (:mod:`adapters.mxnet.adapter`): one OpenMP thread for a Python
thread that copies NDArrays, through libgomp (MXNet is never imported here)."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def libgomp_library() -> Any:
    """MXNet's OpenMP library (libgomp, which MXNet 1.9.1's wheel links), or None for a build with another one."""
    import ctypes

    try:
        return ctypes.CDLL("libgomp.so.1")
    except OSError:
        return None


def single_omp_thread_here() -> bool:
    """One OpenMP thread for this (the Python) thread; True when libgomp was found and told.

    Why: a large NDArray <-> NumPy copy on the Python thread (``set_data(mx.nd.array(w))`` in build, any
    big ``asnumpy()``) makes libgomp start a second OpenMP team for this thread, beside the engine's.
    With more OpenMP threads than cores, libgomp's spin-waiting ones steal the cores the training needs
    and training runs as if OMP_WAIT_POLICY=PASSIVE (measured by the lead: make bench 0.75 -> 0.93 at
    bs 64 and 0.98 at bs 8 of a bare Gluon loop). The setting is per thread: the engine's threads keep theirs,
    and a thread started later starts from ``OMP_NUM_THREADS`` again (the prefetch thread calls this too).
    """
    libgomp = libgomp_library()
    if libgomp is None:
        return False  # an MXNet built with another OpenMP (or none): nothing to tell
    libgomp.omp_set_num_threads(1)
    return True
