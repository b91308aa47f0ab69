"""HostProbe's CPU rate against processes whose CPU time is known: Linux counts CPU time in 10 ms clock ticks,
and a loaded machine can take two readings a millisecond apart, so a rate over the gap between two readings
read one tick as 455-1404 % of a core for a one-thread worker (seen in test_sampler_integration). These fakes
advance CPU time in whole ticks as the kernel does; no process is started."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace

import psutil
import pytest

from harness.monitor.probes import CPU_RATE_WINDOW_S, HostProbe

TICK_S = 0.01


class World:
    """A fake clock and fake processes, each busy on ``cores`` cores from its birth, CPU time in whole ticks."""

    def __init__(self) -> None:
        self.t = 0.0
        self.born: dict[int, tuple[float, float]] = {}  # pid -> (birth, cores)
        self.failing: set[int] = set()

    def clock(self) -> float:
        return self.t

    def cpu_s(self, pid: int) -> float:
        birth, cores = self.born[pid]
        return int(round((self.t - birth) * cores / TICK_S, 9)) * TICK_S  # whole ticks, as /proc/<pid>/stat

    def process(self, pid: int) -> object:
        world = self

        class Proc:
            @contextlib.contextmanager
            def oneshot(self) -> Iterator[None]:
                yield

            def cpu_times(self) -> SimpleNamespace:
                if pid in world.failing:
                    raise psutil.AccessDenied(pid)
                return SimpleNamespace(user=world.cpu_s(pid), system=0.0)

            def memory_info(self) -> SimpleNamespace:
                return SimpleNamespace(rss=100 << 20)

        return Proc()


def _probe(world: World) -> HostProbe:
    return HostProbe(clock=world.clock, process=world.process)  # type: ignore[arg-type]


def _irregular_gaps() -> Iterator[float]:
    """20 ms ticks, with a late tick followed by two taken 1 ms apart, as a loaded machine schedules them."""
    while True:
        yield from (0.02, 0.02, 0.047, 0.001, 0.001, 0.02, 0.013, 0.0005)


def test_a_rate_is_never_one_clock_tick_over_a_millisecond() -> None:
    world = World()
    world.born[1] = (0.0, 1.0)  # one core busy from the start
    probe = _probe(world)
    gaps = _irregular_gaps()
    readings = []
    for _ in range(400):
        world.t += next(gaps)
        readings.append((world.t, probe.read(frozenset([1]))["cpu_util_pct"]))
    later = [pct for t, pct in readings if t > 2 * CPU_RATE_WINDOW_S]
    # the error is at most one tick over the window (20 %), never 10x a core
    assert max(later) <= 100 + 100 * TICK_S / CPU_RATE_WINDOW_S + 1e-6
    assert min(later) >= 100 - 100 * TICK_S / CPU_RATE_WINDOW_S - 1e-6


def test_the_first_readings_count_the_workers_start_up() -> None:
    world = World()
    world.born[1] = (0.0, 2.0)  # two cores busy while the framework imports
    probe = _probe(world)
    world.t = 0.02
    assert probe.read(frozenset([1]))["cpu_util_pct"] == pytest.approx(200.0)


def test_a_child_found_a_second_late_is_counted_from_then_not_all_at_once() -> None:
    world = World()
    world.born[1] = (0.0, 1.0)
    probe = _probe(world)
    for _ in range(10):
        world.t += 0.02
        probe.read(frozenset([1]))
    world.born[2] = (world.t, 1.0)  # a child starts; the tree is re-listed only a second later
    for _ in range(50):
        world.t += 0.02
        probe.read(frozenset([1]))
    values = []
    for _ in range(20):
        world.t += 0.02
        values.append(probe.read(frozenset([1, 2]))["cpu_util_pct"])
    # before: the child's whole second of CPU time in one 20 ms reading (5,000 % more)
    assert max(values) <= 200 + 2 * 100 * TICK_S / CPU_RATE_WINDOW_S + 1e-6
    assert values[-1] == pytest.approx(200.0, abs=2 * 100 * TICK_S / CPU_RATE_WINDOW_S)  # both counted once seen


def test_a_process_back_after_a_failed_read_is_not_counted_twice() -> None:
    world = World()
    world.born[1] = (0.0, 1.0)
    probe = _probe(world)
    values = []
    for i in range(60):
        world.t += 0.02
        world.failing = {1} if 20 <= i < 40 else set()  # unreadable for 0.4 s (AccessDenied)
        pct = probe.read(frozenset([1]))["cpu_util_pct"]
        if i >= 40:
            values.append(pct)
    assert max(values) <= 100 + 100 * TICK_S / CPU_RATE_WINDOW_S + 1e-6
