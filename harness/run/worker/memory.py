"""The worker process's own memory, read from the OS: ``/proc/self/status`` readings and the ``VmData`` watcher.

These are the figures the max-batch search turns into the units the OS limit counts (RLIMIT_DATA counts
``VmData``; :func:`harness.run.worker.lifeline.limit_memory` sets it). Linux only: elsewhere every reading is
None, never a guess.
"""

from __future__ import annotations

import os
import re
import resource
import threading


def maxrss_mib() -> float:
    """The highest resident set size of this process so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def proc_status_mib(*keys: str) -> dict[str, float | None]:
    """Current ``VmData``/``VmRSS``... of this process in MiB (Linux ``/proc``; None elsewhere)."""
    out: dict[str, float | None] = dict.fromkeys(keys)
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in out:
                    out[key] = float(value.split()[0]) / 1024.0  # kB
    except OSError:
        pass
    return out


class VmDataWatcher:
    """The highest ``VmData`` of this process while it trains, sampled in a thread (Linux ``/proc``).

    RLIMIT_DATA counts ``VmData``; what training maps and unmaps again between two reads of the figures
    at the step boundaries (a framework's scratch arenas, reserved-but-untouched mappings) is only seen
    while the step runs. One read costs ~10 us (``pread`` on an fd opened once), so every millisecond
    costs ~1% of a core; it runs only in trials under an OS memory limit (max-batch probes on CPU), never
    in timed sweeps. A spike shorter than the interval can still be missed: this is a lower bound.
    """

    _PATTERN = re.compile(rb"VmData:\s+(\d+)")

    def __init__(self, interval_s: float = 0.001) -> None:
        self.interval_s = interval_s
        self.peak_kib: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd: int | None = None

    def _read_kib(self) -> int | None:
        assert self._fd is not None
        match = self._PATTERN.search(os.pread(self._fd, 16384, 0))
        return int(match.group(1)) if match else None

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                self._sample()
        except BaseException:  # noqa: BLE001 - near the limit even a read may fail; the peak so far stands
            return

    def _sample(self) -> None:
        kib = self._read_kib()
        if kib is not None and (self.peak_kib is None or kib > self.peak_kib):
            self.peak_kib = kib

    def start(self) -> VmDataWatcher:
        """Take a first reading and start the thread (nothing to watch where ``/proc`` is missing)."""
        try:
            self._fd = os.open("/proc/self/status", os.O_RDONLY)
            self._sample()
        except OSError:  # not Linux: nothing to watch
            self._fd = None
            return self
        self._thread = threading.Thread(target=self._loop, name="vmdata-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> float | None:
        """Stop sampling (one last read); the peak in MiB, or None where ``/proc`` is missing."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._fd is not None:
            try:
                self._sample()
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None
        return None if self.peak_kib is None else self.peak_kib / 1024.0
