"""A full disk, said as one wherever batchscope writes (issue 32).

Every write point (the store, a trial's row, a worker's log, the prepared-data cache, the resolved experiment,
figures, the PDF, an export, the max-batch table) turns a write refused for want of space (``ENOSPC``, a quota's
``EDQUOT``, SQLite's "database or disk is full") into a :class:`~harness.errors.DiskFullError`: the path, the space
left on its file system, what the write needed where that is known, and what was kept. Nothing half-written is left
under a name a later command would take as complete: files are written under a temporary name and renamed
(:func:`write_atomically`), as the report and the data cache already were.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from harness.errors import DiskFullError
from harness.tmpnames import tmp_tag

#: the errnos of a write refused for want of space: the disk (or the file system) is full, or a quota is used up
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_SHORT_WRITE = re.compile(r"^\d+ requested and \d+ written$")
#: what a command that writes a store says was kept, and how to go on
KEPT_RESUME = ("what was stored before is kept: free some space, then run the same command again (`run` with "
               "--resume, to continue its sweep)")
#: what a command that writes one file says
KEPT_AGAIN = "nothing half-written was left under that name: free some space and run the command again"


def is_disk_full(error: BaseException | None) -> bool:
    """Whether ``error`` (or an exception it was raised from) is a write refused for want of space."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
            return True
        if getattr(error, "sqlite_errorname", "") == "SQLITE_FULL":
            return True
        text = str(error)
        if "No space left on device" in text or "database or disk is full" in text:
            return True  # a library that wraps the OS's error in its own (pyarrow, reportlab)
        if isinstance(error, OSError) and error.errno is None and _SHORT_WRITE.search(text):
            return True  # NumPy's np.save into a file that stopped growing: "4096 requested and 2016 written"
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def _mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.1f} MiB" if n_bytes >= 2**20 else f"{n_bytes / 1024:,.0f} KiB"


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes free (to this user) on the file system that holds ``path`` or its nearest existing parent."""
    p = Path(path).absolute()
    for candidate in (p, *p.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def disk_full(path: str | os.PathLike[str], what: str, needed_bytes: int | None = None,
              kept: str = KEPT_RESUME) -> DiskFullError:
    """The error for ``what`` at ``path`` that did not fit: the path, the space left there, what was needed."""
    free = free_bytes(path)
    room = f"{_mib(free)} free there" if free is not None else "no free space known"
    need = f", about {_mib(needed_bytes)} needed" if needed_bytes else ""
    write = f"could not write {what}; " if what else ""
    return DiskFullError(f"{path}: the disk is full (No space left on device: {room}{need}); {write}{kept}")


@contextlib.contextmanager
def says_disk_full(path: str | os.PathLike[str], what: str, needed_bytes: int | None = None,
                   kept: str = KEPT_RESUME) -> Iterator[None]:
    """Within the block, a write refused for want of space is a :class:`DiskFullError` about ``path``; every
    other error is raised as it was."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as e:
        if is_disk_full(e):
            raise disk_full(path, what, needed_bytes, kept) from e
        raise


def write_atomically(path: str | os.PathLike[str], data: str | bytes, what: str, kept: str = KEPT_RESUME) -> None:
    """Write ``data`` to ``path`` whole or not at all: under a temporary name beside it (named after this process,
    :mod:`harness.tmpnames`), then renamed over it. A full disk half-way leaves ``path`` as it was (absent, or
    its previous content) and no temporary file, and is a :class:`DiskFullError`."""
    target = Path(path)
    tmp = target.with_name(f"{target.name}{tmp_tag()}{os.urandom(3).hex()}")
    raw = data.encode() if isinstance(data, str) else data
    with says_disk_full(target, what, len(raw), kept):
        try:
            with open(tmp, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
