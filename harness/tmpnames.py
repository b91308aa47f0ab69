"""Temporary files named after their writer's PID, so that what a process killed outright (SIGKILL) left behind
is removed by the next one, and what a live process is writing is left alone (issue 24).

Used by the data preparation (a partial copy of a data set, a shuffle order being written) and the report (its
build directory).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_STALE = re.compile(r"\.(?:tmp|report)-(\d+)-")


def tmp_tag(kind: str = "tmp") -> str:
    """The part of a temporary file's name that says who writes it (see :func:`remove_stale`)."""
    return f".{kind}-{os.getpid()}-"


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends, then hand each one received to the handler it
    would have gone to, so that something made in the block and the note that it must be removed are made
    together: a signal between ``mkdtemp`` and the code that owns its result left a ``.report-*`` directory
    behind. The Python handlers are swapped (not the thread's signal mask: the kernel gives a process's
    signal to any thread that does not block it). Only the main thread may do that; elsewhere the block
    runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: object) -> None:
        received.append(signum)

    before: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        handler = signal.getsignal(sig)
        if handler is not None and handler is not signal.SIG_IGN:  # an ignored signal stays ignored
            before[sig] = signal.signal(sig, hold)
    try:
        yield
    finally:
        for held, handler in before.items():
            signal.signal(held, handler)
        for signum in received[:1]:  # the first one decides how the process unwinds, as it would have
            handler = before[signum]
            if callable(handler):
                handler(signum, None)
            else:  # SIG_DFL: what the signal does by default (for these three, end the process)
                os.kill(os.getpid(), signum)


def temporary_directory(kind: str, directory: Path) -> tempfile.TemporaryDirectory[str]:
    """A ``TemporaryDirectory`` named by :func:`tmp_tag` in ``directory``, made with the signals held: once
    it exists, its removal is registered (on leaving its ``with`` block or, at the latest, at exit)."""
    with deferred_signals():
        return tempfile.TemporaryDirectory(prefix=tmp_tag(kind), dir=directory)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_stale(directory: Path) -> None:
    """Remove the temporary files and directories in ``directory`` and its sub-directories whose writer
    (the PID in the name) is no longer running: a preparation killed outright. Best effort, never raises."""
    try:
        entries = [*directory.iterdir(), *(e for d in directory.iterdir() if d.is_dir() and not
                                           d.name.startswith(".") for e in d.iterdir())]
    except OSError:
        return
    for entry in entries:
        match = _STALE.search(entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError:
            pass
