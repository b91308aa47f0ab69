"""Checks on data files before they are trusted, shared by the loaders and the prepared cache.

* An ``.npy`` header says what the array claims to be (shape, dtype) before any byte of it is read, so a file
  that declares terabytes is refused by its size, not by the allocation that would exhaust the parent.
* A prepared copy in the cache is checked against its ``meta.json`` (:func:`npy_file_problem`) before use.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

import numpy as np

from harness.errors import DataError


class NpyHeader:
    """What an ``.npy`` stream declares: shape, dtype, and the bytes of header before the data."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, fortran: bool, header_bytes: int) -> None:
        self.shape, self.dtype, self.fortran, self.header_bytes = shape, dtype, fortran, header_bytes

    @property
    def data_bytes(self) -> int:
        """How many bytes of data the header promises (Python ints: no overflow for any declared shape)."""
        count = 1
        for d in self.shape:
            count *= int(d)
        return count * self.dtype.itemsize


def read_npy_header(f: IO[bytes]) -> NpyHeader:
    """The header of the ``.npy`` stream ``f`` (positioned at its start); ValueError when it is not one."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise ValueError(f".npy format version {version} is not known")
    return NpyHeader(tuple(int(d) for d in shape), np.dtype(dtype), bool(fortran), f.tell())


def npy_file_problem(path: Path, shape: tuple[int, ...], dtype: np.dtype) -> str | None:
    """Why the ``.npy`` file ``path`` is not an array of ``shape`` and ``dtype`` whole on disk (None: it is)."""
    if not path.is_file():
        return f"{path.name} is missing or not a file"
    try:
        with open(path, "rb") as f:
            header = read_npy_header(f)
    except (OSError, ValueError) as e:
        return f"{path.name} cannot be read as .npy ({e})"
    if header.shape != tuple(shape) or header.dtype != dtype:
        return f"{path.name} holds {header.dtype} {header.shape}, not {dtype} {tuple(shape)}"
    size = path.stat().st_size
    if size != header.header_bytes + header.data_bytes:
        return f"{path.name} has {size} bytes, not {header.header_bytes + header.data_bytes} (truncated?)"
    return None


def cache_error(directory: Path, error: OSError) -> DataError:
    """A cache that cannot be written: named, with the variable that moves it."""
    return DataError(f"{directory}: cannot write the data cache ({error.strerror or error}); set BATCHSCOPE_CACHE to "
                     "a directory you can write, or make this one writable")
