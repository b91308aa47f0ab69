"""The JAX adapter's host batches: arrays handed to XLA on a CPU aligned as XLA's CPU client takes them without a
copy (issue 40). NumPy only; JAX is never imported here."""

from __future__ import annotations

from typing import Any

import numpy as np

#: the host alignment XLA's CPU client takes a buffer at without copying it (its minimum alignment, 64 bytes)
HOST_ALIGN = 64


def aligned_copy(array: np.ndarray, dtype: Any, align: int = HOST_ALIGN) -> np.ndarray:
    """``array`` as a C-contiguous ``dtype`` array whose data start at a multiple of ``align`` bytes: itself where it
    is one already, else a copy into an aligned buffer (NumPy aligns to 16 bytes only, glibc's large blocks too)."""
    a = np.asarray(array)
    if a.dtype == dtype and a.flags.c_contiguous and a.ctypes.data % align == 0:
        return a
    out_bytes = a.size * np.dtype(dtype).itemsize
    raw = np.empty(out_bytes + align, dtype=np.uint8)
    start = -raw.ctypes.data % align
    out = raw[start:start + out_bytes].view(dtype).reshape(a.shape)
    out[...] = a
    return out
