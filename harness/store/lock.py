"""One writer per output directory: a lock taken for as long as a command writes into it.

Two runs into one ``--out`` at once would both run every trial (last writer wins) and interleave their
rows. ``flock`` on ``DIR/.batchscope.lock`` lets the first hold the directory and refuses the second at
once with the first's process id; the kernel drops the lock when its holder dies, however it dies, so a
killed run never leaves a stale lock behind. Readers (``compare``, ``report``, ``export``) take none.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.diskfull import is_disk_full
from harness.errors import OutputError, StoreError

LOCK_NAME = ".batchscope.lock"


@contextmanager
def locked_out_dir(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir``'s writer lock for the body; refuse (StoreError, exit 2) when another process has it."""
    path = Path(out_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise OutputError(f"{out_dir}: cannot create the lock file {LOCK_NAME} ({e.strerror or e}); give a "
                          "writable output directory") from e
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            raise StoreError(f"{out_dir} is in use by another batchscope command (pid {holder}); wait for it to "
                             "finish, or give another output directory") from None
        os.ftruncate(fd, 0)
        try:
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError as e:  # a full disk: the lock holds without its note of who holds it; the store's own write
            if not is_disk_full(e):  # says the disk is full, naming the store (issue 32)
                raise
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
