"""CIFAR-10 (python version): found locally or downloaded once, verified, read without extracting.

Where the archive comes from, in order:

1. ``--data-dir PATH``: the ``cifar-10-python.tar.gz`` file itself, a folder holding it, a folder
   holding the extracted ``cifar-10-batches-py``, or that extracted folder itself.
2. The cache: ``<cache>/downloads/cifar-10-python.tar.gz`` from an earlier download.
3. A download from :data:`URL` into ``<cache>/downloads``: written to a ``.part`` file, checked
   (size and SHA-256), and only then renamed to its final name, so a partial or corrupt download
   never lands in the cache under the name later runs trust.

Every source is checked before use: an archive against the published SHA-256, each batch file
against torchvision's per-batch MD5, each batch's layout (uint8 rows of 3,072 values, labels 0-9).
Anything wrong is a :class:`~harness.errors.DataError`; nothing is half-used.

Batches are Python pickles. They are read with an unpickler that only builds dicts, lists, strings
and NumPy arrays, so a doctored file cannot run code.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tarfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.errors import DataError

if TYPE_CHECKING:
    from harness.data.prepared import DataRequest

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
ARCHIVE = "cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5")
TEST_BATCH = "test_batch"
DOWNLOAD_TIMEOUT_S = 60.0
#: a batch file is 31,035,704 bytes (30 MiB); one this much larger is not one, and is not read into memory
MAX_BATCH_BYTES = 64 * 2**20
EMBEDDED_HINT = ('use a data set that needs no network: dataset = "mnist5k" (real MNIST digits), "digits" '
                 'or "synthetic" in the experiment file')


@dataclass(frozen=True)
class Checksums:
    """What a genuine copy looks like (tests substitute the checksums of a small fake)."""

    archive_sha256: str
    archive_bytes: int
    batch_md5: Mapping[str, str]


#: SHA-256 and size as published with Keras' ``cifar10.load_data`` (``file_hash``); the archive's MD5
#: c58f30108f718f92721af3b95e74349a and the per-batch MD5s are torchvision's ``CIFAR10`` lists.
CANONICAL = Checksums(
    archive_sha256="6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
    archive_bytes=170_498_071,
    batch_md5={
        "data_batch_1": "c99cafc152244af753f735de768cd75f",
        "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
        "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
        "data_batch_4": "634d18415352ddfa80567beed471001a",
        "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
        "test_batch": "40351d587109b95175f43aff81a1287e",
    },
)

Fetch = Callable[[str, Path], None]


def download(url: str, dest: Path) -> None:
    """Stream ``url`` into ``dest`` (the caller verifies it and renames it into place)."""
    request = urllib.request.Request(url, headers={"User-Agent": "batchscope"})
    with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT_S) as response, open(dest, "wb") as f:
        while chunk := response.read(1 << 20):
            f.write(chunk)


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def verify_archive(path: Path, checks: Checksums) -> None:
    """Refuse an archive whose size or SHA-256 is not the published one."""
    size = path.stat().st_size
    if size != checks.archive_bytes:
        raise DataError(f"cifar10: {path} has {size:,} bytes, the published archive "
                        f"{checks.archive_bytes:,}: it is truncated or not the CIFAR-10 python archive; "
                        "delete it and download it again")
    try:
        digest = sha256_of(path)
    except OSError as e:
        raise DataError(f"cifar10: {path} cannot be read ({e.strerror or e}); check its permissions") from e
    if digest != checks.archive_sha256:
        raise DataError(f"cifar10: {path} fails the SHA-256 check (got {digest}, published "
                        f"{checks.archive_sha256}): the file is corrupt; delete it and download it again")


# ---------------------------------------------------------------- finding the data
def _no_copy_error(cause: str, cache_dir: Path) -> DataError:
    return DataError(
        f"cifar10: {cause}. Remedies: (1) run again with network access: {URL} is downloaded once (163 MiB) "
        f"into {cache_dir / 'downloads'} (set BATCHSCOPE_CACHE to move it); (2) copy {ARCHIVE} (or its "
        f"extracted {FOLDER} folder) to this machine and pass it with --data-dir PATH; (3) {EMBEDDED_HINT}")


def _local_source(data_dir: Path, checks: Checksums) -> Path:
    """The archive or extracted folder that ``--data-dir`` points at (archives are verified)."""
    candidates = [data_dir, data_dir / ARCHIVE, data_dir / FOLDER]
    for c in candidates:
        if c.is_file() and c.name.endswith((".tar.gz", ".tgz")):
            verify_archive(c, checks)
            return c
        if c.is_dir() and (c / TRAIN_BATCHES[0]).exists():
            return c
    if not data_dir.exists():
        raise DataError(f"cifar10: --data-dir {data_dir} does not exist; give the path of {ARCHIVE} or "
                        f"of the extracted {FOLDER} folder")
    raise DataError(f"cifar10: --data-dir {data_dir} holds neither {ARCHIVE} nor an extracted {FOLDER} "
                    f"folder (with {TRAIN_BATCHES[0]} ... {TEST_BATCH}); give the path of one of them")


def fetch_archive(cache_dir: Path, fetch: Fetch | None = None, checks: Checksums | None = None) -> Path:
    """The verified archive in the cache, downloading it first if needed.

    The download goes to a ``.part`` file that is renamed to the final name only once its size and
    SHA-256 are right, and is deleted on any failure.
    """
    checks = checks or CANONICAL
    final = cache_dir / "downloads" / ARCHIVE
    if final.exists():
        verify_archive(final, checks)
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    part = final.with_name(f"{ARCHIVE}.{os.getpid()}.part")
    try:
        try:
            (fetch or download)(URL, part)
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            raise _no_copy_error(f"no local copy was given and the download of {URL} failed ({e})",
                                 cache_dir) from e
        verify_archive(part, checks)
        os.replace(part, final)
    finally:
        part.unlink(missing_ok=True)
    return final


def find_source(req: DataRequest, cache_dir: Path, fetch: Fetch | None = None,
                checks: Checksums | None = None) -> Path:
    """Where the CIFAR-10 batches come from for ``req`` (see the module docstring for the order)."""
    checks = checks or CANONICAL
    if req.data_dir:
        return _local_source(Path(req.data_dir).expanduser(), checks)
    return fetch_archive(cache_dir, fetch, checks)


# ---------------------------------------------------------------- reading the batches
class _BatchUnpickler(pickle.Unpickler):
    """Builds only what a CIFAR batch holds: containers, strings, numbers and NumPy arrays."""

    #: numpy 1.x's module paths, and numpy 2's (``numpy._core``: numpy.core is its deprecated alias there)
    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy", "ndarray"), ("numpy", "dtype"),
               ("numpy.core.numeric", "_frombuffer"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy._core.numeric", "_frombuffer"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"a CIFAR batch may not refer to {module}.{name}")
        return super().find_class(module, name)


def _parse_batch(name: str, raw: bytes, checks: Checksums, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 3, 32, 32) uint8, labels (N,) int64) of one batch file, checked."""
    digest = hashlib.md5(raw, usedforsecurity=False).hexdigest()
    expected = checks.batch_md5.get(name)
    if expected is not None and digest != expected:
        raise DataError(f"cifar10: {where}/{name} fails the MD5 check (got {digest}, expected {expected}): "
                        "the file is corrupt or truncated; replace it with a fresh copy")
    try:
        batch = _BatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as e:
        raise DataError(f"cifar10: {where}/{name} cannot be read ({type(e).__name__}: {e}); the file is "
                        "corrupt or truncated; replace it with a fresh copy") from e
    data = batch.get(b"data") if isinstance(batch, dict) else None
    labels = batch.get(b"labels") if isinstance(batch, dict) else None
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        shape = getattr(data, "shape", None)
        raise DataError(f"cifar10: {where}/{name} is not a CIFAR-10 batch (data: {type(data).__name__} "
                        f"{shape}, expected uint8 rows of 3072 values)")
    y = np.asarray(labels if labels is not None else [], dtype=np.int64)
    if y.shape != (len(data),) or (len(y) and (y.min() < 0 or y.max() > 9)):
        raise DataError(f"cifar10: {where}/{name} has {len(y)} labels for {len(data)} images, or labels "
                        "outside 0-9: not a CIFAR-10 batch")
    return data.reshape(-1, 3, 32, 32), y


def _check_batch_size(where: str, size: int) -> None:
    """Refuse a batch file far larger than a real one (each is about 30 MiB) before it is read whole into memory."""
    if size > MAX_BATCH_BYTES:
        raise DataError(f"cifar10: {where} has {size / 2**30:.2f} GiB: not a CIFAR-10 batch (each is about 30 MiB); "
                        "replace it with a fresh copy")


def _read_members(source: Path) -> tuple[dict[str, bytes], str]:
    """The raw bytes of every batch file in an archive or folder, and a name for messages."""
    names = (*TRAIN_BATCHES, TEST_BATCH)
    if source.is_dir():
        missing = [n for n in names if not (source / n).is_file()]
        if missing:
            raise DataError(f"cifar10: {source} lacks {', '.join(missing)}; "
                            "the extracted folder is incomplete")
        out_dir: dict[str, bytes] = {}
        for n in names:
            _check_batch_size(f"{source}/{n}", (source / n).stat().st_size)
            try:
                out_dir[n] = (source / n).read_bytes()
            except OSError as e:
                raise DataError(f"cifar10: {source}/{n} cannot be read ({e.strerror or e}); check its "
                                "permissions") from e
        return out_dir, str(source)
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(source, "r:gz") as tar:
            for n in names:
                try:
                    member = tar.getmember(f"{FOLDER}/{n}")
                except KeyError:
                    raise DataError(f"cifar10: {source} lacks {FOLDER}/{n}; it is not the CIFAR-10 python "
                                    "archive or it is incomplete") from None
                _check_batch_size(f"{source}:{FOLDER}/{n}", member.size)
                f = tar.extractfile(member)
                if f is None:
                    raise DataError(f"cifar10: {source}: {FOLDER}/{n} is not a regular file")
                out[n] = f.read()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        raise DataError(f"cifar10: {source} cannot be read as a .tar.gz ({type(e).__name__}: {e}); it is "
                        "corrupt or truncated; delete it and download it again") from e
    return out, f"{source}:{FOLDER}"


def read_batches(source: Path, checks: Checksums | None = None) -> dict[str, np.ndarray]:
    """Every batch of ``source`` (archive or extracted folder), checked, as NCHW uint8 arrays."""
    checks = checks or CANONICAL
    raw, where = _read_members(source)
    train = [_parse_batch(n, raw[n], checks, where) for n in TRAIN_BATCHES]
    x_test, y_test = _parse_batch(TEST_BATCH, raw[TEST_BATCH], checks, where)
    return {"x_train": np.concatenate([x for x, _ in train]),
            "y_train": np.concatenate([y for _, y in train]),
            "x_test": x_test, "y_test": y_test}


def load_cifar10(req: DataRequest, cache_dir: Path) -> tuple[dict[str, np.ndarray], int]:
    """The 50,000 / 10,000 CIFAR-10 images as (N, 3, 32, 32) pixel values 0-255, ten classes."""
    return read_batches(find_source(req, cache_dir)), 10
