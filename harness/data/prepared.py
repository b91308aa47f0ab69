"""Prepared data sets on disk and the request that names one (no loaders here: see :mod:`harness.data.catalogue`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.data.checks import cache_error, npy_file_problem
from harness.diskfull import says_disk_full
from harness.errors import BatchscopeWarning, DataError
from harness.tmpnames import deferred_signals, tmp_tag

ARRAYS = ("x_train", "y_train", "x_test", "y_test")


@dataclass(frozen=True)
class DatasetInfo:
    """A data set the harness knows how to prepare."""

    name: str
    description: str
    accuracy_meaningful: bool  # False for synthetic data: its accuracy says nothing
    offline: bool  # available with no network


@dataclass(frozen=True)
class PreparedData:
    """A prepared data set on disk."""

    directory: str
    name: str
    input_shape: tuple[int, int, int]
    classes: int
    n_train: int
    n_test: int
    key: str  # content hash: part of every trial's hash
    accuracy_meaningful: bool

    def load(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """x_train, y_train, x_test, y_test, memory-mapped read-only."""
        d = Path(self.directory)
        return tuple(np.load(d / f"{a}.npy", mmap_mode="r") for a in ARRAYS)  # type: ignore[return-value]

    def order_path(self, seed: int, epochs: int) -> Path:
        """Where the index order for ``seed`` lives (see :meth:`write_order`)."""
        return Path(self.directory) / f"order-seed{seed}-epochs{max(epochs, 1)}.npy"

    def order_bytes(self, epochs: int) -> int:
        """The size on disk of one seed's order file (see :meth:`write_order`)."""
        return max(epochs, 1) * self.n_train * 4

    def write_order(self, seed: int, epochs: int) -> Path:
        """Write (once) the shuffled training order for ``seed``: shape (max(epochs, 1), n_train), int32.

        Streamed one epoch at a time into a memory-mapped file, so the parent holds one permutation
        however many epochs there are; refused up front when the disk has no room for it.
        """
        from harness.data.footprint import require_disk

        path = self.order_path(seed, epochs)
        rows = max(epochs, 1)
        if path.exists():
            problem = npy_file_problem(path, (rows, self.n_train), np.dtype(np.int32))
            if problem is None:
                return path
            warnings.warn(f"the shuffle order {path} was damaged ({problem}); written again", BatchscopeWarning,
                          stacklevel=2)
        # missing, or damaged (truncated by a full disk, edited): written anew, the same draws as ever
        require_disk(self.order_bytes(epochs), path.parent, f"the shuffle order of {rows} epoch(s)", "lower epochs")
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x0BA7C4]))
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + tmp_tag())
        except OSError as e:
            raise cache_error(path.parent, e) from e
        os.close(fd)
        try:
            order = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.int32, shape=(rows, self.n_train))
            for row in range(rows):  # the same draws, in the same sequence, as one np.stack of them
                order[row] = rng.permutation(self.n_train)
            with says_disk_full(path.parent, f"the shuffle order of {rows} epoch(s)", self.order_bytes(epochs),
                                kept=_KEPT_DATA):  # a sparse file: the disk fills as it is written
                order.flush()
                del order
                os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def to_dict(self) -> dict:
        """JSON-able form (sent to workers)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> PreparedData:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**data, "input_shape": tuple(data["input_shape"])})


#: what a data preparation stopped by a full disk says it kept (nothing: it comes before anything is stored)
_KEPT_DATA = ("the partial copy was removed and nothing was run or stored: free some space (or point BATCHSCOPE_CACHE "
              "elsewhere) and run the command again")


def _atomic_save(path: Path, array: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def refuse_non_finite(images: dict[str, np.ndarray], name: str, chunk_rows: int = 4096) -> None:
    """Refuse (:class:`DataError`, exit 2) prepared images that are not finite.

    A raw array can be finite and still overflow here: float64 values beyond float32's range become inf when
    converted, and values near it overflow the per-channel standard deviation; a network trained on them "runs"
    and learns nothing. Checked in chunks of ``chunk_rows`` images, so the check needs no array-sized copy.
    ``name`` is the data set's (``npz:PATH`` for a file, which is then named).
    """
    where = name[len("npz:"):] if name.startswith("npz:") else f"data set {name!r}"
    for key, x in images.items():
        if all(np.isfinite(x[i : i + chunk_rows]).all() for i in range(0, len(x), chunk_rows)):
            continue
        bad = sum(int(np.count_nonzero(~np.isfinite(x[i : i + chunk_rows]))) for i in range(0, len(x), chunk_rows))
        raise DataError(f"{where}: {key} holds {bad} value(s) that are not finite once prepared (converted to float32 "
                        f"and normalised per channel): its values overflow float32 (largest "
                        f"{float(np.finfo(np.float32).max):.3g}); rescale the images, e.g. to [0, 1] or [0, 255], "
                        "before saving them")


def _write_prepared(target: Path, name: str, arrays: dict[str, np.ndarray], classes: int,
                    accuracy_meaningful: bool) -> PreparedData:
    """Normalise, hash and write arrays into ``target`` atomically (a temp dir renamed into place).

    The footprint stays near one copy of the images (issue 13, item 1): the loader's arrays are dropped as
    soon as they are converted, normalisation is in place, and the
    hash reads the arrays' buffers instead of copying them with ``tobytes``.
    """
    # values beyond float32 become inf, and a spread beyond it overflows the std: refused below, naming the array
    with np.errstate(over="ignore", invalid="ignore"):
        x_train = np.array(arrays.pop("x_train"), dtype=np.float32, order="C")  # a copy of our own to modify
        x_test = np.array(arrays.pop("x_test"), dtype=np.float32, order="C")
        # the same formulas as ever (the data key hashes the result bit for bit); std makes one temporary copy
        mean = x_train.mean(axis=(0, 2, 3), keepdims=True)
        std = x_train.std(axis=(0, 2, 3), keepdims=True) + 1e-7
        for x in (x_train, x_test):
            x -= mean
            x /= std
    refuse_non_finite({"x_train": x_train, "x_test": x_test}, name)
    final: dict[str, np.ndarray] = {
        "x_train": x_train,
        "y_train": np.ascontiguousarray(arrays["y_train"], dtype=np.int64),
        "x_test": x_test,
        "y_test": np.ascontiguousarray(arrays["y_test"], dtype=np.int64),
    }
    h = hashlib.sha256(name.encode())
    for a in ARRAYS:
        h.update(memoryview(final[a]).cast("B"))  # type: ignore[arg-type]  # ndarray is a buffer
    key = h.hexdigest()[:16]
    prepared = PreparedData(
        directory=str(target), name=name, input_shape=tuple(final["x_train"].shape[1:]),  # type: ignore[arg-type]
        classes=classes, n_train=len(final["x_train"]), n_test=len(final["x_test"]), key=key,
        accuracy_meaningful=accuracy_meaningful,
    )
    tmp: Path | None = None
    try:  # Ctrl-C, SIGTERM or a full disk half-way: the partial copy (hundreds of MiB) goes with it
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with deferred_signals():  # made and named in `tmp` before a signal can unwind
                tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{tmp_tag()}"))
        except OSError as e:
            raise cache_error(target.parent, e) from e
        with says_disk_full(target.parent, f"the prepared copy of {name}", sum(a.nbytes for a in final.values()),
                            kept=_KEPT_DATA):
            for a in ARRAYS:
                np.save(tmp / f"{a}.npy", final[a])
            (tmp / "meta.json").write_text(json.dumps(prepared.to_dict() | {"directory": None}, indent=1))
        if target.exists():  # prepared meanwhile by someone else: keep theirs
            shutil.rmtree(tmp)
            return load_prepared(target)
        os.replace(tmp, target)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return prepared


class DamagedCopy(DataError):
    """A prepared copy in the cache that cannot be trusted (the reason is the message): prepared again."""


def load_prepared(target: Path) -> PreparedData:
    """Open a directory written by :func:`_write_prepared`, checked against its ``meta.json``.

    Raises:
        DamagedCopy: ``meta.json`` unreadable, or an array missing, truncated or not the shape it says; the
            headers and sizes are read, not the data (milliseconds), so a copy with flipped bytes inside passes.
    """
    try:
        meta = json.loads((target / "meta.json").read_text())
        meta["directory"] = str(target)
        prepared = PreparedData.from_dict(meta)
        shape = tuple(int(d) for d in prepared.input_shape)
        n = {"train": int(prepared.n_train), "test": int(prepared.n_test)}
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise DamagedCopy(f"meta.json cannot be read ({type(e).__name__}: {e})") from e
    for split in ("train", "test"):
        for array, want, dtype in ((f"x_{split}", (n[split], *shape), np.float32), (f"y_{split}", (n[split],),
                                                                                      np.int64)):
            problem = npy_file_problem(target / f"{array}.npy", want, np.dtype(dtype))
            if problem:
                raise DamagedCopy(problem)
    return prepared


@dataclass(frozen=True)
class DataRequest:
    """What an experiment asks of the data (the parts that change the prepared bytes)."""

    name: str
    seed: int = 0
    train_samples: int = 0  # 0: all
    synthetic_shape: tuple[int, int, int] = (3, 32, 32)
    synthetic_classes: int = 10
    synthetic_samples: int = 2048
    data_dir: str | None = None  # a local copy of a downloadable data set
    layout: str = "auto"  # an npz file's image layout: auto, nchw or nhwc (harness.data.npzfile)

    def slug(self) -> str:
        """Directory name in the cache for this request."""
        if self.name.startswith("npz:"):
            from harness.data.npzfile import slug

            base = slug(self.name, self.layout)  # the file's content hash: an edited file is prepared anew
        elif self.name == "synthetic":
            shape = "x".join(map(str, self.synthetic_shape))
            base = f"synthetic-{shape}-c{self.synthetic_classes}-n{self.synthetic_samples}-s{self.seed}"
        else:
            base = self.name
        return base + (f"-first{self.train_samples}" if self.train_samples else "")


#: the cache's folder under the platform's cache directory
CACHE_NAME = "batchscope"


def default_cache_dir(environ: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """batchscope's cache (prepared data, managed environments, compiled programs): ``$BATCHSCOPE_CACHE`` where it
    is set, else the platform's cache directory, as ``platformdirs.user_cache_dir("batchscope")`` names it:

    - Linux and other POSIX systems: ``$XDG_CACHE_HOME/batchscope`` (an absolute path: the XDG Base Directory
      specification ignores a relative one), else ``~/.cache/batchscope``;
    - macOS: ``~/Library/Caches/batchscope``;
    - Windows: ``%LOCALAPPDATA%\\batchscope\\Cache``.

    Followed here by hand, not through platformdirs: a worker reads this too (its compilation cache), and a
    framework's environment holds the framework and numpy alone (docs/environments.md). The worker inherits the
    parent's environment variables, so both name the same folder. ``environ`` and ``platform`` (``sys.platform``)
    stand in for the process's in tests.
    """
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if environ.get("BATCHSCOPE_CACHE"):
        return Path(environ["BATCHSCOPE_CACHE"])
    home = Path(environ.get("HOME") or Path.home())
    if platform == "darwin":
        return home / "Library" / "Caches" / CACHE_NAME
    if platform.startswith("win"):
        local = environ.get("LOCALAPPDATA") or str(home / "AppData" / "Local")
        return Path(local) / CACHE_NAME / "Cache"
    xdg = environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".cache") / CACHE_NAME
