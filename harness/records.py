"""Typed records at the seams between the layers: a trial unit going in, its outcome coming out.

The executor builds a :class:`TrialOutcome`, the monitor fills in what it measured, the store writes it.
This module imports nothing heavier than the trial spec, so every layer may depend on it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.config.trial import TrialSpec
from harness.data import PreparedData

STATUSES = ("ok", "oom", "error", "timeout", "crashed", "skipped")
#: the worker's default bound on progress messages: a few a second is live enough for a person, and the
#: check between steps is one comparison (docs/benchmarks.md: no measurable effect on the timing)
PROGRESS_INTERVAL_S = 0.5


class Monitor(Protocol):
    """Watches a worker process while it runs (the sampler implements this)."""

    def start(self, pid: int) -> None:
        """The worker ``pid`` has started."""

    def phase(self, name: str, t_monotonic: float) -> None:
        """The worker announced ``name`` at ``t_monotonic``."""

    def stop(self) -> dict[str, Any]:
        """The worker is gone: stop and return what was measured (aggregates and raw samples)."""


class Executor(Protocol):
    """Runs trial units: :class:`LocalExecutor` here, :class:`harness.ray_executor.RayExecutor` on a cluster."""

    def run(self, unit: TrialUnit, on_event: Callable[[dict[str, Any]], None] | None = None) -> TrialOutcome:
        """Run one unit to completion and classify it; never raises for a trial's own failure."""


class NullMonitor:
    """Measures nothing."""

    def start(self, pid: int) -> None:  # noqa: D102
        pass

    def phase(self, name: str, t_monotonic: float) -> None:  # noqa: D102
        pass

    def stop(self) -> dict[str, Any]:  # noqa: D102
        return {}


@dataclass(frozen=True)
class TrialUnit:
    """One trial and everything needed to run it."""

    trial: TrialSpec
    data: PreparedData
    order_path: str
    adapter_target: str
    python: str = sys.executable
    oom_patterns: tuple[str, ...] = ()
    os_memory_limit_mib: float | None = None  # CPU budget: RLIMIT_DATA on the worker, enforced by the kernel
    env: dict[str, str] = field(default_factory=dict)
    progress_interval_s: float | None = PROGRESS_INTERVAL_S  # progress messages at most this often; None: none


@dataclass
class TrialOutcome:
    """What happened in one trial."""

    trial: TrialSpec
    status: str
    reason: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    step_times_ms: list[float] = field(default_factory=list)
    phase_steps: dict[str, int] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    param_count: int | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)
    exit_code: int | None = None
    stderr_tail: str = ""
    traceback: str = ""
    elapsed_s: float = 0.0
    started_at: str = ""
    finished_at: str = ""
    monitor: dict[str, Any] = field(default_factory=dict)
