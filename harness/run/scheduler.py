"""Run a sweep's chains side by side, as many at once as the executor has slots for (issue 23).

Pure: the executor comes in as three functions, ``submit(trial, attempt) -> handle``, ``wait(handles) -> [(handle,
outcome), ...]`` (blocks until at least one has finished) and ``cancel(handles)``; every outcome goes out through
``on_done``, in the driver's thread, so the store is written by the driver only. Unit-tested with a fake backend
(tests/run/test_scheduler.py); :class:`harness.run.ray_executor.RayExecutor` is the real one.

Rules:

* a chain (:mod:`harness.run.chains`) has at most one trial in flight, and its sizes run smallest first: a size
  above one of its sizes that ran out of memory is recorded as skipped (``skip_larger``), without a slot;
* with free slots, the next trial started is the ready one earliest in the planner's order, so with one slot the
  order is exactly the serial sweep's;
* a trial whose node died (``lost``) is passed on (its row is written), then run again once (attempt 2); lost a
  second time it stays lost for ``--resume``;
* an out-of-memory outcome is a result like any other, never retried;
* anything raised while trials are in flight (Ctrl-C) cancels all of them before it propagates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from harness.config.trial import TrialSpec
from harness.records import TrialOutcome
from harness.run.chains import ChainKey, doomed_reason, split_chains

Submit = Callable[[TrialSpec, int], Hashable]
Wait = Callable[[list[Hashable]], list[tuple[Hashable, TrialOutcome]]]
Cancel = Callable[[list[Hashable]], None]


class Backend(Protocol):
    """What the scheduler drives: ``slots()`` trials at once at most, and the three functions."""

    def slots(self) -> int:
        """How many trials may be in flight now."""

    def submit(self, trial: TrialSpec, attempt: int) -> Hashable:
        """Start ``trial`` (its ``attempt``-th run); returns its handle."""

    def wait(self, handles: list[Hashable]) -> list[tuple[Hashable, TrialOutcome]]:
        """Block until at least one of ``handles`` has finished; their outcomes."""

    def cancel(self, handles: list[Hashable]) -> None:
        """Stop every one of ``handles`` (and their workers) before returning."""


#: how many times a trial is started at most when its node keeps dying: the first run and one re-run
MAX_ATTEMPTS = 2


@dataclass
class ScheduleStats:
    """What a schedule did: the most trials in flight at once, and each trial's attempts."""

    peak_in_flight: int = 0
    started: list[tuple[str, int]] = field(default_factory=list)  # (trial hash, attempt), in start order
    not_run: int = 0  # trials left when no slot was left (every node gone)


def run_chains(trials: Sequence[TrialSpec], *, submit: Submit, wait: Wait, cancel: Cancel,
               slots: int | Callable[[], int], on_done: Callable[[TrialOutcome], None],
               on_start: Callable[[TrialSpec, int], None] | None = None,
               skip_larger: bool = True, oom_at: dict[ChainKey, int] | None = None,
               max_attempts: int = MAX_ATTEMPTS) -> ScheduleStats:
    """Run ``trials`` (the planner's order) chain by chain, up to ``slots`` at once; see the module's rules.

    ``slots``: a number, or a function asked before each start (a cluster that lost a node has fewer); with none
    left and trials still to run, the schedule ends and ``stats.not_run`` counts them (``--resume`` runs them).
    ``oom_at``: the smallest out-of-memory size per chain already known (stored before a ``--resume``).
    ``on_start(trial, attempt)`` is told each start. Returns what the schedule did.
    """
    free = slots if callable(slots) else (lambda: slots)  # type: ignore[misc]
    order = {t.trial_hash: i for i, t in enumerate(trials)}
    queues: dict[ChainKey, deque[tuple[TrialSpec, int]]] = {
        c.key: deque((t, 1) for t in c.trials) for c in split_chains(trials)}
    limits = dict(oom_at or {})
    running: dict[Hashable, tuple[ChainKey, TrialSpec, int]] = {}
    busy: set[ChainKey] = set()
    stats = ScheduleStats()

    def next_ready() -> ChainKey | None:
        ready = [k for k, q in queues.items() if q and k not in busy]
        return min(ready, key=lambda k: order[queues[k][0][0].trial_hash]) if ready else None

    try:
        while True:
            while len(running) < free():
                key = next_ready()
                if key is None:
                    break
                trial, attempt = queues[key].popleft()
                limit = limits.get(key)
                if skip_larger and limit is not None and trial.batch_size > limit:
                    on_done(TrialOutcome(trial=trial, status="skipped", reason=doomed_reason(limit)))
                    continue
                if on_start is not None:
                    on_start(trial, attempt)
                running[submit(trial, attempt)] = (key, trial, attempt)
                busy.add(key)
                stats.started.append((trial.trial_hash, attempt))
                stats.peak_in_flight = max(stats.peak_in_flight, len(running))
            if not running:
                stats.not_run = sum(len(q) for q in queues.values())
                return stats
            for handle, outcome in wait(list(running)):
                key, trial, attempt = running.pop(handle)
                busy.discard(key)
                on_done(outcome)
                if outcome.status == "lost" and attempt < max_attempts:
                    queues[key].appendleft((trial, attempt + 1))  # again, first of its chain
                elif outcome.status == "oom":
                    limits[key] = min(limits.get(key, trial.batch_size), trial.batch_size)
    except BaseException:
        if running:
            cancel(list(running))
        raise



class SerialBackend:
    """Any executor with only ``run`` (the local one, a test's fake) as the scheduler's backend: one slot, each
    trial run to its end inside ``submit``. On this machine two timed trials never share its cores."""

    def __init__(self, run: Callable[[TrialSpec, int], TrialOutcome]) -> None:
        self._run = run
        self._done: dict[int, TrialOutcome] = {}
        self._next = 0

    def slots(self) -> int:
        """One trial at a time."""
        return 1

    def submit(self, trial: TrialSpec, attempt: int) -> Hashable:
        """Run ``trial`` now; its handle is a counter."""
        self._next += 1
        self._done[self._next] = self._run(trial, attempt)
        return self._next

    def wait(self, handles: list[Hashable]) -> list[tuple[Hashable, TrialOutcome]]:
        """The outcomes of ``handles`` (all finished already)."""
        return [(h, self._done.pop(h)) for h in handles if h in self._done]  # type: ignore[call-overload]

    def cancel(self, handles: list[Hashable]) -> None:
        """Nothing runs between calls: nothing to cancel."""
