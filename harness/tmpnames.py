"""Temporary files named after their writer's PID, so that what a process killed outright (SIGKILL) left behind
is removed by the next one, and what a live process is writing is left alone (issue 24).

Used by the data preparation (a partial copy of a data set, a shuffle order being written) and the report (its
build directory).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

_STALE = re.compile(r"\.(?:tmp|report)-(\d+)-")


def tmp_tag(kind: str = "tmp") -> str:
    """The part of a temporary file's name that says who writes it (see :func:`remove_stale`)."""
    return f".{kind}-{os.getpid()}-"


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
