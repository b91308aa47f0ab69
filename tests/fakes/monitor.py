"""Fakes for the monitor's sampler: a clock that moves only when told to, and a process tree that never changes."""

from __future__ import annotations


class FakeClock:
    """Monotonic time that moves only when the sampler waits (or a probe says a read took time)."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.t

    def wait(self, timeout_s: float) -> bool:
        self.waits.append(timeout_s)
        self.t += timeout_s
        return False


class FixedTree:
    """A process tree that is always there (the replay probe ends sampling)."""

    def __init__(self, pid: int) -> None:
        self.pids = frozenset({pid})

    def refresh(self) -> frozenset[int]:
        return self.pids
