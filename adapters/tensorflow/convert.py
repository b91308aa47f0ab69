"""The TensorFlow adapter's weight layouts: the framework-neutral description's arrays to Keras' layouts and back
(conv kernels OIHW <-> HWIO, a Dense kernel after a Flatten from (C, H, W) rows to Keras' (H, W, C)), one pair of
converters per kind of array. NumPy only."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# Weight converters: canonical layout -> Keras layout, and back. One pair per kind of array.
Converter = Callable[[np.ndarray], np.ndarray]
ConverterPair = tuple[Converter, Converter]


def identity(a: np.ndarray) -> np.ndarray:
    return a


def conv_to_keras(a: np.ndarray) -> np.ndarray:
    return a.transpose(2, 3, 1, 0)  # (out, in, kh, kw) -> (kh, kw, in, out)


def conv_from_keras(a: np.ndarray) -> np.ndarray:
    return a.transpose(3, 2, 0, 1)


IDENTITY: ConverterPair = (identity, identity)


def flatten_dense_converters(chw: tuple[int, ...]) -> ConverterPair:
    """Row permutation of a Dense kernel reading a Flatten: canonical rows are (c, h, w), Keras' (h, w, c)."""
    c, h, w = chw

    def to_keras(a: np.ndarray) -> np.ndarray:
        return a.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(c * h * w, -1)

    def from_keras(a: np.ndarray) -> np.ndarray:
        return a.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(c * h * w, -1)

    return to_keras, from_keras
