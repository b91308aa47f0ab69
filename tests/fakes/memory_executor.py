"""A stand-in executor for max-batch searches: a known memory law and faults on chosen calls, no framework.

``fake_executor`` (tests/maxbatch/conftest.py) installs it as the executor every search builds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.records import StepEstimate, TrialOutcome, TrialUnit, WorkerMetrics

BUDGET_MIB = 385.0  # with a peak of 100 + 10 * batch MiB: batch 28 fits (380), 29 does not (390)


class LinearMemory:
    """A stand-in executor: peak = 100 + 10·batch MiB against the worker's RLIMIT_DATA; faults on chosen calls.

    ``killed_calls``: the 1-based calls whose worker is killed from outside (SIGKILL, as the OOM killer or a
    user's ``kill`` would), whatever its size. ``growth_mib_per_step``: the peak grows by this much per timed
    step (a heap that fragments). ``failing_purpose``: runs with this trial purpose fail, with ``failing_status``
    (out of memory unless told otherwise: a timeout, a crash).

    Settings ("what helps"): a precision other than fp32 halves the activations (5 MiB per sample); gradient
    accumulation leaves the peak at the micro-batch's, as a real one does, and costs 10% of the step throughput
    (1000 samples/s without it, made up).
    """

    def __init__(self, killed_calls: tuple[int, ...] = (), growth_mib_per_step: float = 0.0,
                 failing_purpose: str | None = None, failing_status: str = "oom",
                 estimate_factor: float | None = 1.0, estimate_error: str | None = None,
                 estimate_kills: bool = False) -> None:
        self.killed_calls, self.growth, self.failing_purpose = killed_calls, growth_mib_per_step, failing_purpose
        self.failing_status = failing_status
        #: issue 41: a probe asked for the step-memory estimate reports the law's per-sample MiB times this (None: the
        #: worker reports none), or ``estimate_error`` as the adapter's failure, or (``estimate_kills``) its worker
        #: dies while estimating, after the probe's own steps
        self.estimate_factor, self.estimate_error, self.estimate_kills = estimate_factor, estimate_error, estimate_kills
        self.units: list[TrialUnit] = []

    def run(self, unit: TrialUnit, on_event: Any = None) -> TrialOutcome:
        self.units.append(unit)
        if len(self.units) in self.killed_calls:
            return TrialOutcome(trial=unit.trial, status="crashed", reason="killed by SIGKILL in phase timed")
        if unit.trial.purpose == self.failing_purpose:
            reason = "RuntimeError: can't allocate memory" if self.failing_status == "oom" else "made up"
            return TrialOutcome(trial=unit.trial, status=self.failing_status, reason=reason)  # type: ignore[arg-type]
        per_sample = 10.0 if unit.trial.precision == "fp32" else 5.0
        peak = 100.0 + per_sample * unit.trial.batch_size + self.growth * unit.trial.timed_steps
        if unit.os_memory_limit_mib is not None and peak > unit.os_memory_limit_mib:
            return TrialOutcome(trial=unit.trial, status="oom",
                                reason="RuntimeError: DefaultCPUAllocator: can't allocate memory")
        speed = 1000.0 if unit.trial.accumulate_steps == 1 else 900.0
        estimate = None
        if unit.trial.estimate_batches:
            if self.estimate_kills:
                return TrialOutcome(trial=unit.trial, status="crashed", reason="killed by SIGSEGV in phase finish")
            if self.estimate_error is not None:
                estimate = StepEstimate(error=self.estimate_error)
            elif self.estimate_factor is not None:  # what a step allocates, without the process's fixed 100 MiB
                sizes = list(unit.trial.estimate_batches)
                estimate = StepEstimate(tuple(sizes), tuple(8.0 + per_sample * self.estimate_factor * b
                                                            for b in sizes), 0.1)
        return TrialOutcome(trial=unit.trial, status="ok",
                            metrics=WorkerMetrics(vmdata_peak_mib=peak, step_samples_per_s=speed,
                                                  step_estimate=estimate))


def install(monkeypatch: pytest.MonkeyPatch, make: Callable[[], Any]) -> list[Any]:
    """Make every max-batch search build its executor with ``make()``; return the executors made, in order."""
    from harness.maxbatch import searching

    made: list[Any] = []

    def build(**kw: Any) -> Any:
        made.append(make())
        return made[-1]

    monkeypatch.setattr(searching, "LocalExecutor", build)
    return made
