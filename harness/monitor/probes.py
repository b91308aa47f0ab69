"""Probes: what the sampler reads at every tick, behind one small interface with units in every name.

* :class:`HostProbe` (psutil): CPU % and RSS of the worker's process tree, system memory in use.
* :class:`harness.monitor.nvml.NvmlProbe`: the GPU the worker uses (utilisation, memory, power, energy...).
* :class:`NullGpuProbe`: stands in for the GPU when there is none, with one clear notice.
* :class:`ReplayProbe`: replays a stream of readings (a list, a CSV such as an exported ``samples``
  table, or :func:`synthetic_gpu_stream`) for tests and demos: no GPU and no worker needed.

A probe's ``read(pids)`` returns ``{field: value}`` (NaN where it has no value) for the worker's
process tree ``pids``. It raises :class:`~harness.errors.PartialReadingError` when some readings
failed (the sample keeps the rest and records a gap), :class:`~harness.errors.ProbeError` when all
failed, and :class:`~harness.errors.WorkerGoneError` when there is nothing left to watch.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import psutil

from harness.errors import DataError, PartialReadingError, WorkerGoneError
from harness.monitor.fields import HOST_FIELDS, NO_GPU_NOTICE, NOT_READINGS

MIB = 1024.0 * 1024.0
NAN = math.nan

#: The sample fields the host probe fills.



class Probe(Protocol):
    """Something the sampler reads at every tick."""

    name: str
    fields: tuple[str, ...]

    def read(self, pids: frozenset[int]) -> Mapping[str, float]:
        """One reading of every field for the worker's process tree ``pids`` (NaN where unknown)."""

    def close(self) -> None:
        """Release what the probe holds (called once, when sampling ends)."""


class Tree(Protocol):
    """What the sampler asks of a process tree (tests pass a fixed one)."""

    def refresh(self) -> frozenset[int]:
        """The tree's pids now; raises :class:`WorkerGoneError` once the worker has exited."""


class ProcessTree:
    """The worker and every process under it.

    The list of descendants is refreshed every ``relist_every_s`` (1 s), from Linux's per-thread
    ``children`` files where the kernel has them, else through psutil (which scans every process on
    the machine, about 2 ms on a busy box); the worker itself is checked at every tick (one /proc
    read). A child started between listings is found at the next one, and its CPU time since it
    started is counted from when it is first seen (see :class:`HostProbe`).
    """

    def __init__(self, pid: int, relist_every_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pid = pid
        self._relist_every_s = relist_every_s
        self._clock = clock
        self._listed_at: float | None = None
        self._pids = frozenset([pid])
        try:
            self._root = psutil.Process(pid)
        except psutil.NoSuchProcess as e:
            raise WorkerGoneError(f"worker {pid} exited before sampling started") from e

    def refresh(self) -> frozenset[int]:
        """The pids of the tree now. Raises :class:`WorkerGoneError` once the worker has exited (a
        zombie waiting for its parent to reap it counts as exited)."""
        now = self._clock()
        relist = self._listed_at is None or now - self._listed_at >= self._relist_every_s
        try:
            if self._root.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                raise WorkerGoneError(f"worker {self.pid} exited")
            if relist:
                found = _proc_descendants(self.pid)
                if found is None:  # no /proc/<pid>/task/<tid>/children here: psutil scans every process
                    found = [c.pid for c in self._root.children(recursive=True)]
                self._pids = frozenset([self.pid, *found])
                self._listed_at = now
        except (psutil.NoSuchProcess, psutil.ZombieProcess) as e:
            raise WorkerGoneError(f"worker {self.pid} exited") from e
        except psutil.AccessDenied:
            self._listed_at = now  # cannot list them (hardened /proc): watch the worker alone
        return self._pids


def _proc_descendants(pid: int) -> list[int] | None:
    """Descendants of ``pid`` from Linux's per-thread ``children`` files: it reads only the tree's own
    entries, where psutil scans every process on the machine (~10x the cost on a busy box). None
    where the kernel has no such files. The kernel warns the list can miss a child being created at
    that instant; the next re-list finds it."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        return None
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue  # exited meanwhile
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", encoding="ascii") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue  # that thread ended meanwhile
            out.extend(kids)
            todo.extend(kids)
    return out


#: The shortest span a CPU rate is taken over. Linux counts a process's CPU time in clock ticks (10 ms), so a
#: rate over the 1-5 ms between two readings that a loaded machine can squeeze together reads one tick as
#: 200-1000 % of a core (seen: 455 % and 1404 % for a one-thread worker). Over 50 ms a tick is 20 %.
CPU_RATE_WINDOW_S = 0.05


class HostProbe:
    """CPU and resident memory of the worker's process tree, and the system's memory in use.

    ``cpu_util_pct`` is the tree's CPU time over the wall time since a reference reading, in percent
    of one core (200 = two cores busy), like ``top``. The reference is the latest reading at least
    ``window_s`` (:data:`CPU_RATE_WINDOW_S`) before this one, so each value is a trailing mean over
    50-70 ms at the sampler's 20 ms ticks: never a ratio of one CPU tick to a few milliseconds. Summing
    per-process CPU time rather than asking psutil for ``cpu_percent()`` keeps the sum exact: every
    process's CPU time since the reference counts once. The first readings (within ``window_s`` of the
    start) count the worker's CPU time since it was made: its start-up. A process first seen later (a
    child started between two listings of the tree, up to a second apart) counts from when it is first
    seen; its CPU time before that is not attributed to any reading (counting it all at once put a
    second of a child's work into one 50 ms reading).
    ``rss_mib`` sums the tree's resident sets (pages shared between processes count once per process).
    ``sys_mem_used_mib`` is total minus available memory: what the machine cannot hand out now.
    """

    name = "host"
    fields: tuple[str, ...] = HOST_FIELDS

    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = CPU_RATE_WINDOW_S,
                 process: Callable[[int], psutil.Process] = psutil.Process) -> None:
        self._clock = clock
        self._window_s = window_s
        self._process = process
        self._procs: dict[int, psutil.Process] = {}
        self._first_cpu_s: dict[int, float] = {}  # each pid's CPU time when first seen
        # (time, CPU time by pid) of recent readings, oldest first; the first stands for the worker's start,
        # made when the worker starts: readings taken against it count every process's CPU time in full
        self._history: deque[tuple[float, dict[int, float] | None]] = deque([(clock(), None)])

    def read(self, pids: frozenset[int]) -> dict[str, float]:
        """One reading (see the class docstring)."""
        now = self._clock()
        rss = 0
        seen: dict[int, float] = {}
        for pid in pids:
            proc = self._procs.get(pid)
            try:
                if proc is None:
                    proc = self._procs[pid] = self._process(pid)
                with proc.oneshot():
                    times = proc.cpu_times()
                    rss_bytes = proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                self._procs.pop(pid, None)  # a child that just exited, or one we may not read
                self._first_cpu_s.pop(pid, None)  # if it is back later, it counts from then
                continue
            seen[pid] = times.user + times.system
            rss += rss_bytes  # 0 for a process caught exiting: its memory is already released
        for gone in set(self._procs) - set(seen):
            self._procs.pop(gone, None)
        while len(self._history) > 1 and now - self._history[1][0] >= self._window_s:
            self._history.popleft()  # the reference: the latest reading at least window_s old
        ref_t, ref_cpu = self._history[0]
        cpu_delta_s = 0.0
        for pid, cpu_s in seen.items():
            if ref_cpu is None:  # against the start: everything since the process was made
                base = 0.0
            elif pid in ref_cpu:
                base = ref_cpu[pid]
            else:  # first seen since the reference (or back after a failed read): from its first sighting
                base = self._first_cpu_s.get(pid, cpu_s)
            cpu_delta_s += max(cpu_s - base, 0.0)
            self._first_cpu_s.setdefault(pid, cpu_s)
        self._history.append((now, seen))
        wall_s = now - ref_t
        vm = psutil.virtual_memory()
        return {
            "cpu_util_pct": 100.0 * cpu_delta_s / wall_s if wall_s > 0 else NAN,
            "rss_mib": rss / MIB if rss else NAN,
            "sys_mem_used_mib": (vm.total - vm.available) / MIB,
        }

    def close(self) -> None:
        """Forget the processes."""
        self._procs.clear()
        self._history.clear()


class NullGpuProbe:
    """The GPU probe where there is no GPU (or NVML cannot be had): reads nothing, says why once."""

    name = "gpu"
    fields: tuple[str, ...] = ()

    def __init__(self, reason: str = "") -> None:
        self.notice = NO_GPU_NOTICE + (f" ({reason})" if reason else "")

    def read(self, pids: frozenset[int]) -> dict[str, float]:
        """Nothing: the GPU columns stay empty."""
        return {}

    def close(self) -> None:
        """Nothing to release."""


def _number(text: str | float | int | None) -> float:
    if text is None or text == "":
        return NAN
    return float(text)


class ReplayProbe:
    """Replays a stream of readings, one per tick; the stream's end ends sampling like a worker exit.

    A row's ``gap_reason`` (as stored in the ``samples`` table) is replayed as a failed reading, so a
    replay reproduces gaps too. Values may be ints (an energy counter near 2**64 stays exact).
    """

    name = "replay"

    def __init__(self, rows: Iterable[Mapping[str, float | int | str | None]]) -> None:
        self._rows: Iterator[Mapping[str, float | int | str | None]] = iter(rows)
        self.fields: tuple[str, ...] = ()
        self.reads_n = 0

    @classmethod
    def from_csv(cls, path: str | Path) -> ReplayProbe:
        """A replay of a CSV with a header of sample column names (e.g. ``batchscope export`` of samples)."""
        try:
            with open(path, newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
        except OSError as e:
            raise DataError(f"{path}: cannot read the stream to replay ({e})") from e
        if not rows:
            raise DataError(f"{path}: no rows to replay; give a CSV with a header and one row per sample")
        out = []
        for i, row in enumerate(rows, 2):
            try:
                out.append({k: (v if k == "gap_reason" else _number(v)) for k, v in row.items()
                            if k not in NOT_READINGS[:3]})
            except ValueError as e:
                raise DataError(f"{path}:{i}: {e}; every reading column must hold a number or nothing") from e
        return cls(out)

    def read(self, pids: frozenset[int]) -> dict[str, float]:
        """The next row's readings."""
        try:
            row = next(self._rows)
        except StopIteration:
            raise WorkerGoneError(f"replay ended after {self.reads_n} readings") from None
        self.reads_n += 1
        values = {k: v for k, v in row.items() if k not in NOT_READINGS}
        if not self.fields:
            self.fields = tuple(values)
        reason = row.get("gap_reason")
        if reason:
            raise PartialReadingError(str(reason), values)  # type: ignore[arg-type]
        return values  # type: ignore[return-value]

    def close(self) -> None:
        """Nothing to release."""


def synthetic_gpu_stream(n: int, interval_s: float = 0.1, busy_from: float = 0.3, idle_w: float = 60.0,
                         busy_w: float = 250.0, start_energy_mj: int = 10**9) -> Sequence[dict[str, float]]:
    """A made-up, deterministic GPU stream for demos and tests (it is NOT a measurement): idle for the
    first ``busy_from`` of the ``n`` readings, then busy; the energy counter integrates the power, so
    a counter-based energy and a power integration agree on it."""
    rows = []
    energy = float(start_energy_mj)
    for i in range(n):
        busy = i >= busy_from * n
        power_w = busy_w if busy else idle_w
        if i:  # a reading stands for the interval that ends at it, so this interval drew power_w
            energy += power_w * interval_s * 1000.0  # W x s = J; the counter counts mJ
        rows.append({
            "gpu_util_pct": 90.0 + (i % 5) if busy else 0.0, "gpu_mem_util_pct": 40.0 if busy else 0.0,
            "gpu_mem_used_mib": 4000.0 if busy else 500.0, "gpu_mem_total_mib": 16384.0,
            "proc_gpu_mem_mib": 3600.0 if busy else 0.0, "power_w": power_w, "energy_mj": round(energy),
            "sm_clock_mhz": 1800.0 if busy else 300.0, "temperature_c": 70.0 if busy else 40.0,
        })
    return rows
