"""Denormal floats on the CPU: set and read the x86-64 flush-to-zero (FTZ) and denormals-are-zero (DAZ) bits.

Why this exists: on x86 CPUs an operation on a denormal (subnormal) float takes a microcode assist,
tens to a hundred times slower than a normal one. Small weights and gradients of a model trained for
a few thousand steps drift into the denormal range, and a framework that does not flush them slows
down mid-training (measured on 2 cores: MXNet 3.3 -> 38 ms per step after step ~600, PyTorch 5 -> 11 ms;
TensorFlow flushes in its kernels and stays flat). See docs/denormals.md.

The bits live in the MXCSR register of each thread. A thread created after they are set inherits them
(Linux ``clone`` copies the floating-point state), so setting them on the main thread *before* a
framework is imported reaches the framework's thread pools: the only way to flush in MXNet, which has
no API for it. ``fegetenv``/``fesetenv`` from libm are called through ctypes; on x86-64 glibc
``fenv_t`` is 32 bytes with MXCSR at byte 28. Elsewhere (aarch64, macOS) these functions return None
and callers must say they could not apply the setting.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys

FTZ = 0x8000  # MXCSR bit 15: results that would be denormal are written as zero
DAZ = 0x0040  # MXCSR bit 6: denormal inputs are read as zero
_FENV_BYTES = 32
_MXCSR_OFFSET = 28


def _libm() -> ctypes.CDLL | None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    name = ctypes.util.find_library("m") or "libm.so.6"
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def read_mxcsr() -> int | None:
    """This thread's MXCSR, or None where it cannot be read (not x86-64 Linux)."""
    libm = _libm()
    if libm is None:
        return None
    env = ctypes.create_string_buffer(_FENV_BYTES)
    if libm.fegetenv(env) != 0:
        return None
    return int.from_bytes(env.raw[_MXCSR_OFFSET:_MXCSR_OFFSET + 4], "little")


def set_cpu_flush(flush: bool) -> bool:
    """Set (or clear) FTZ and DAZ on this thread; True when the register now says so."""
    libm = _libm()
    if libm is None:
        return False
    env = ctypes.create_string_buffer(_FENV_BYTES)
    if libm.fegetenv(env) != 0:
        return False
    mxcsr = int.from_bytes(env.raw[_MXCSR_OFFSET:_MXCSR_OFFSET + 4], "little")
    mxcsr = mxcsr | FTZ | DAZ if flush else mxcsr & ~(FTZ | DAZ)
    ctypes.memmove(ctypes.addressof(env) + _MXCSR_OFFSET, mxcsr.to_bytes(4, "little"), 4)
    if libm.fesetenv(env) != 0:
        return False
    return cpu_denormals_state() == ("flush" if flush else "keep")


def cpu_denormals_state() -> str:
    """What this thread's CPU does with denormals: ``flush`` (FTZ and DAZ set), ``keep`` (neither), or
    ``unknown`` (only one of them, or not readable here)."""
    mxcsr = read_mxcsr()
    if mxcsr is None:
        return "unknown"
    bits = mxcsr & (FTZ | DAZ)
    return "flush" if bits == FTZ | DAZ else "keep" if bits == 0 else "unknown"
