"""Data sets, prepared once by the parent into files every worker maps read-only.

A prepared data set is a directory of ``.npy`` files (float32 NCHW images, already normalised, and
int64 labels) plus ``meta.json``; the shuffled index order for each seed is written there too, so
every framework consumes the very same batches in the very same order. Workers open the arrays
with ``mmap_mode="r"``: nothing is copied per process.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.data import cifar10, embedded, npzfile
from harness.data.checks import cache_error
from harness.data.footprint import require_disk, require_memory
from harness.data.known import DATASETS
from harness.data.prepared import (
    DamagedCopy,
    DataRequest,
    DatasetInfo,
    PreparedData,
    _write_prepared,
    default_cache_dir,
    load_prepared,
)
from harness.errors import BatchscopeWarning, DataError
from harness.tmpnames import remove_stale, tmp_tag


def _synthetic(req: DataRequest, cache_dir: Path) -> tuple[dict[str, np.ndarray], int]:
    rng = np.random.default_rng(req.seed)
    n_test = max(req.synthetic_samples // 8, 1)
    shape = req.synthetic_shape
    arrays: dict[str, np.ndarray] = {
        "x_train": rng.standard_normal((req.synthetic_samples, *shape), dtype=np.float32),
        "y_train": rng.integers(0, req.synthetic_classes, req.synthetic_samples),
        "x_test": rng.standard_normal((n_test, *shape), dtype=np.float32),
        "y_test": rng.integers(0, req.synthetic_classes, n_test),
    }
    return arrays, req.synthetic_classes


Loader = Callable[[DataRequest, Path], tuple[dict[str, np.ndarray], int]]

#: name -> (info, loader). A loader gets the request and the cache directory (for downloads) and
#: returns raw arrays (NCHW, any numeric dtype) and the class count; :func:`prepare` normalises them.
LOADERS: dict[str, tuple[DatasetInfo, Loader]] = {
    "synthetic": (DATASETS["synthetic"], _synthetic),
    "mnist5k": (DATASETS["mnist5k"], embedded.load_mnist5k),
    "digits": (DATASETS["digits"], embedded.load_digits),
    "cifar10": (DATASETS["cifar10"], cifar10.load_cifar10),
}


#: a user's file: real labels (accuracy means something), nothing to download
NPZ_INFO = DatasetInfo("npz", "your own arrays from a .npz file (x_train, y_train, x_test, y_test)",
                       accuracy_meaningful=True, offline=True)


def _discard(target: Path) -> None:
    """Remove a damaged prepared copy: renamed aside first (atomic), so no reader sees it half-removed."""
    aside = target.with_name(f".{target.name}{tmp_tag()}damaged")
    try:
        os.replace(target, aside)
        shutil.rmtree(aside) if aside.is_dir() else aside.unlink()
    except OSError as e:
        raise cache_error(target.parent, e) from e


def prepare(req: DataRequest, cache_dir: Path | None = None) -> PreparedData:
    """Prepare (or reuse) the data set ``req`` in ``cache_dir``/prepared/<slug>."""
    info: DatasetInfo
    loader: Loader
    if npzfile.is_npz(req.name):
        info, loader = NPZ_INFO, npzfile.load_npz
    elif req.name not in LOADERS:
        raise DataError(f"unknown dataset {req.name!r}; known: {', '.join(sorted(LOADERS))}, or npz:FILE")
    else:
        info, loader = LOADERS[req.name]
    if req.data_dir and npzfile.is_npz(req.name):
        raise DataError(f"--data-dir {req.data_dir} was given, but {req.name!r} names its file itself; "
                        "drop --data-dir")
    if req.data_dir and info.offline:
        raise DataError(f"--data-dir {req.data_dir} was given, but {req.name!r} ships with the install and reads "
                        "no local copy; drop --data-dir (it is for downloadable data sets: cifar10)")
    cache = cache_dir or default_cache_dir()
    target = cache / "prepared" / req.slug()
    remove_stale(target.parent)  # what a preparation killed outright (SIGKILL) left behind
    if target.exists():
        try:
            return load_prepared(target)
        except DamagedCopy as e:  # a cache: damaged (a full disk, an edit, a killed writer) means prepare again
            _discard(target)
            warnings.warn(f"the prepared copy of {req.name!r} in {target} was damaged ({e}); prepared again",
                          BatchscopeWarning, stacklevel=2)
    if req.name == "synthetic":  # the only data set whose size the user chooses: check it fits first
        n = req.synthetic_samples + max(req.synthetic_samples // 8, 1)
        x_bytes = 4.0 * n * float(np.prod([float(d) for d in req.synthetic_shape]))
        # peak of the preparation: the generated images, our normalised copy, and std's temporary
        require_memory(3 * x_bytes, f"synthetic data of {n} samples of shape "
                       f"{'x'.join(map(str, req.synthetic_shape))}",
                       "lower synthetic_samples or synthetic_shape (--synthetic-shape)")
        require_disk(x_bytes, cache, "the prepared synthetic data", "free disk space or lower synthetic_samples")
    arrays, classes = loader(req, cache)
    if req.train_samples:
        available = len(arrays["x_train"])
        if req.train_samples > available:
            raise DataError(f"train_samples = {req.train_samples}, but {req.name!r} has only {available} "
                            "training samples; lower train_samples (0 means all)")
        arrays["x_train"] = arrays["x_train"][: req.train_samples]
        arrays["y_train"] = arrays["y_train"][: req.train_samples]
    return _write_prepared(target, req.name, arrays, classes, info.accuracy_meaningful)
