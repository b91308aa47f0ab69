"""How much memory and disk a preparation step may use, so that it is refused up front with the size it
would need instead of growing the parent until the kernel kills it (issue 13, item 1).

The parent must stay small: it holds the sampler, the store and the worker's process group, and its
death orphans the worker. So everything it prepares has a footprint known before it starts: the data
set (refused when it would not fit in the memory available), the shuffle order (streamed to disk one
epoch at a time, refused when the disk has no room).
"""

from __future__ import annotations

import resource
import shutil
from pathlib import Path

from harness.errors import DataError

GIB = float(2**30)


def _proc_kib(path: str, key: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name == key:
                    return int(value.split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return None


def available_memory_bytes() -> int | None:
    """What this process can still allocate: the least of the machine's available memory and the room
    left under this process's own limits (RLIMIT_DATA, RLIMIT_AS). None where nothing is known."""
    room: list[int] = []
    avail_kib = _proc_kib("/proc/meminfo", "MemAvailable")
    if avail_kib is not None:
        room.append(avail_kib * 1024)
    for limit, key in ((resource.RLIMIT_DATA, "VmData"), (resource.RLIMIT_AS, "VmSize")):
        soft, _ = resource.getrlimit(limit)
        used_kib = _proc_kib("/proc/self/status", key)
        if soft != resource.RLIM_INFINITY and used_kib is not None:
            room.append(max(soft - used_kib * 1024, 0))
    return min(room) if room else None


def require_memory(need_bytes: float, what: str, remedy: str) -> None:
    """Refuse (DataError: exit 2, nothing written) when ``need_bytes`` will not fit in memory."""
    room = available_memory_bytes()
    if room is not None and need_bytes > room:
        raise DataError(f"{what} needs about {need_bytes / GIB:.2f} GiB of memory to prepare, and this process "
                        f"can use {room / GIB:.2f} GiB; {remedy}")


def require_disk(need_bytes: float, directory: Path, what: str, remedy: str) -> None:
    """Refuse (DataError) when ``need_bytes`` will not fit on the file system of ``directory``."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need_bytes > free:
        unit, size = ("GiB", GIB) if need_bytes >= GIB else ("MiB", 2**20)  # a small need said in what shows it
        raise DataError(f"{what} needs {need_bytes / size:.2f} {unit} of disk in {directory}, and "
                        f"{free / size:.2f} {unit} are free (the disk is full for it); {remedy}")
