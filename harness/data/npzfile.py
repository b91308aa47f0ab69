"""Your own data from a ``.npz`` file: ``dataset = "npz:path/to/data.npz"``.

The file holds four arrays, ``x_train``, ``y_train``, ``x_test`` and ``y_test`` (``numpy.savez``).
Images are ``(N, C, H, W)`` or ``(N, H, W, C)``; which one is detected from where a channel axis of
1, 3 or 4 sits, or declared with ``data_layout = "nchw"`` / ``"nhwc"`` where both or neither fit.
Grey images may come as ``(N, H, W)``. Labels are integers ``0 .. classes-1``; the class count is the
largest training label plus one, or the file's optional scalar ``classes``.

Everything is checked here, in the parent, before any worker starts: a bad file is a
:class:`~harness.errors.DataError` that names the array and the problem, and nothing is written. The
prepared copy is cached like the other sets, under a name that includes the file's SHA-256, so an edited
file is prepared again and an unchanged one is not.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.data.checks import NpyHeader, read_npy_header
from harness.data.footprint import require_memory
from harness.errors import DataError


class NpzRequest(Protocol):
    """What :func:`load_npz` reads of a data request (``harness.data.prepared.DataRequest`` is one)."""

    @property
    def name(self) -> str: ...  # "npz:PATH"

    @property
    def layout(self) -> str: ...  # auto | nchw | nhwc


PREFIX = "npz:"
LAYOUTS = ("auto", "nchw", "nhwc")
REQUIRED = ("x_train", "y_train", "x_test", "y_test")
CHANNEL_SIZES = (1, 3, 4)  # grey, RGB, RGBA: what a channel axis of an image set holds


def is_npz(name: str) -> bool:
    """Whether a dataset name points at a file (``npz:...``)."""
    return name.startswith(PREFIX)


def npz_path(name: str) -> Path:
    """The file a ``npz:`` dataset name points at (relative paths: from the current directory)."""
    return Path(name[len(PREFIX):]).expanduser()


def check_path(name: str) -> Path:
    """The file of ``name``, refused at once (while the experiment is read) when it is not there."""
    path = npz_path(name)
    if not str(path) or str(path) == ".":
        raise DataError(f"dataset {name!r} names no file; write dataset = \"npz:path/to/data.npz\"")
    if not path.is_file():
        raise DataError(f"dataset {name!r}: {path} is not a file (relative paths are read from the current "
                        f"directory, {Path.cwd()}); give the path of a .npz file written with numpy.savez")
    return path


def file_digest(path: Path) -> str:
    """SHA-256 of the file's bytes, the first 16 hex digits (part of the cache directory's name)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or e}); check the file's permissions") from e
    return h.hexdigest()[:16]


def slug(name: str, layout: str) -> str:
    """The cache directory's name: the file's stem and content hash, and the declared layout."""
    path = check_path(name)
    stem = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in path.stem)[:40]
    return f"npz-{stem}-{file_digest(path)}-{layout}"


#: the most classes a data file may have: a larger label is most likely an ID, and the last layer's width with it
MAX_CLASSES = 100_000
_NPY_MAGIC = b"\x93NUMPY"


def _declared(path: Path, where: str) -> dict[str, NpyHeader]:
    """Every ``.npy`` member's header, read before any array is (a header may declare terabytes)."""
    try:
        with open(path, "rb") as f:
            start = f.read(len(_NPY_MAGIC))
    except OSError as e:
        raise DataError(f"{where}: cannot be read ({e.strerror or e}); check the file's permissions") from e
    if start == _NPY_MAGIC:
        raise DataError(f"{where}: holds one .npy array (numpy.save), not a .npz of four; write it with "
                        "numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)")
    headers: dict[str, NpyHeader] = {}
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                if key in REQUIRED and not info.filename.endswith(".npy"):
                    raise DataError(f"{where}: member {info.filename!r} is not a .npy array (a raw member of the zip); "
                                    "write the file with numpy.savez")
                if not info.filename.endswith(".npy"):
                    continue
                with z.open(info) as member:
                    header = read_npy_header(member)  # type: ignore[arg-type]
                if header.dtype.hasobject:  # pickled Python objects: never unpickled (they could run code)
                    raise DataError(f"{where}: cannot be read as a .npz of plain arrays: {key} holds Python objects "
                                    "(dtype object); save numeric arrays")
                if header.header_bytes + header.data_bytes != info.file_size:
                    raise DataError(f"{where}: {key} declares shape {header.shape} of {header.dtype} "
                                    f"({header.data_bytes:,} bytes) but holds {info.file_size - header.header_bytes:,}"
                                    " bytes; the file is damaged or was not written by numpy.savez")
                headers[key] = header
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise DataError(f"{where}: cannot be read as a .npz of plain arrays ({type(e).__name__}: {e}); write it "
                        "with numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...) from numeric "
                        "arrays") from e
    return headers


def _read(path: Path, where: str) -> dict[str, np.ndarray]:
    headers = _declared(path, where)
    # the preparation's peak: the file's arrays, then a float32 copy of the images and std's temporary
    images = [h for k, h in headers.items() if k in ("x_train", "x_test")]
    need = sum(h.data_bytes for h in headers.values()) + sum(2 * 4 * h.data_bytes // h.dtype.itemsize
                                                             for h in images if h.dtype.itemsize)
    require_memory(need, f"{where} ({', '.join(f'{k} {h.shape}' for k, h in headers.items() if k in REQUIRED)})",
                   "use fewer or smaller images, or a machine with more memory")
    try:
        with np.load(path, allow_pickle=False) as f:
            return {key: f[key] for key in f.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        # allow_pickle=False: an object array (a list of Python objects) is refused rather than unpickled
        raise DataError(f"{where}: cannot be read as a .npz of plain arrays ({type(e).__name__}: {e}); "
                        "write it with numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...) "
                        "from numeric arrays") from e


def _to_nchw(x: np.ndarray, layout: str, key: str, where: str) -> np.ndarray:
    if x.ndim not in (3, 4):
        raise DataError(f"{where}: {key} has shape {x.shape}; images must be (N, C, H, W), (N, H, W, C) or "
                        "(N, H, W)")
    if 0 in x.shape[1:]:
        raise DataError(f"{where}: {key} has shape {x.shape}, an axis of size 0; an image needs at least one "
                        "channel, row and column")
    if x.ndim == 3:  # (N, H, W): one grey channel
        return x[:, None, :, :]
    if layout == "nchw":
        return x
    if layout == "nhwc":
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))  # contiguous: normalised exactly like NCHW input
    first, last = x.shape[1] in CHANNEL_SIZES, x.shape[3] in CHANNEL_SIZES
    if first and not last:
        return x
    if last and not first:
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    raise DataError(f"{where}: {key} has shape {x.shape}, and which axis holds the channels cannot be told "
                    f"({'both' if first else 'neither'} of axes 1 and 3 has 1, 3 or 4 entries); declare it "
                    "with data_layout = \"nchw\" or \"nhwc\" in the experiment (--data-layout for maxbatch)")


def _check_labels(y: np.ndarray, key: str, n: int, classes: int | None, where: str) -> np.ndarray:
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise DataError(f"{where}: {key} has shape {y.shape}; labels must be one integer per image, shape "
                        f"({n},) (one-hot labels: pass y.argmax(axis=1))")
    if not np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_:
        raise DataError(f"{where}: {key} has dtype {y.dtype}; labels must be integers 0 .. classes-1 "
                        "(convert with y.astype(numpy.int64) if they are whole numbers stored as floats)")
    if len(y) != n:
        x_key = key.replace("y_", "x_")
        raise DataError(f"{where}: {x_key} has {n} images but {key} has {len(y)} labels; they must match")
    if len(y) and y.min() < 0:
        raise DataError(f"{where}: {key} holds the label {int(y.min())}; labels must be 0 .. classes-1")
    if classes is not None and len(y) and y.max() >= classes:
        raise DataError(f"{where}: {key} holds the label {int(y.max())}, out of range for {classes} classes "
                        "(labels 0 .. classes-1); a test label the training split never has is refused too")
    return y.astype(np.int64)


def _declared_classes(arrays: dict[str, np.ndarray], where: str) -> int | None:
    if "classes" not in arrays:
        return None
    c = arrays["classes"]
    if c.shape != () or not np.issubdtype(c.dtype, np.integer) or int(c) < 2:
        raise DataError(f"{where}: classes is {c!r}; it must be a single integer >= 2 (or left out)")
    return int(c)


def load_npz(req: NpzRequest, cache_dir: Path) -> tuple[dict[str, np.ndarray], int]:
    """The file's four arrays as NCHW images and int64 labels, and the class count; every check applied."""
    path = check_path(req.name)
    where = str(path)
    arrays = _read(path, where)
    missing = [k for k in REQUIRED if k not in arrays]
    if missing:
        raise DataError(f"{where}: lacks {', '.join(missing)} (it has: {', '.join(sorted(arrays)) or 'nothing'}); "
                        "a data file holds x_train, y_train, x_test and y_test")
    out: dict[str, np.ndarray] = {}
    for key in ("x_train", "x_test"):
        x = arrays[key]
        if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)) or x.dtype == np.bool_:
            raise DataError(f"{where}: {key} has dtype {x.dtype}; images must be numbers (integers or floats)")
        if x.ndim and len(x) == 0:
            raise DataError(f"{where}: {key} holds no images")
        x = _to_nchw(x, req.layout, key, where)
        if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
            raise DataError(f"{where}: {key} holds NaN or infinite values; clean them before training")
        out[key] = x
    if out["x_train"].shape[1:] != out["x_test"].shape[1:]:
        raise DataError(f"{where}: x_train images are {out['x_train'].shape[1:]} (C, H, W) but x_test images are "
                        f"{out['x_test'].shape[1:]}; both splits must have one image shape")
    declared = _declared_classes(arrays, where)
    y_train = _check_labels(arrays["y_train"], "y_train", len(out["x_train"]), declared, where)
    classes = declared if declared is not None else int(y_train.max()) + 1
    if classes > MAX_CLASSES:
        raise DataError(f"{where}: y_train's labels make {classes:,} classes (the largest label + 1, or the file's "
                        f"classes), more than {MAX_CLASSES:,}: labels that are IDs must first be numbered 0 .. K-1 "
                        "(numpy.unique(y, return_inverse=True))")
    if classes < 2:
        raise DataError(f"{where}: y_train has only the label 0; a classifier needs at least two classes")
    out["y_train"] = y_train
    out["y_test"] = _check_labels(arrays["y_test"], "y_test", len(out["x_test"]), classes, where)
    return out, classes
