"""Run a sweep's chains side by side, as many at once as the executor has slots for (issue 23).

Pure: the executor comes in as three functions, ``submit(trial, attempt) -> handle``, ``wait(handles) -> [(handle,
outcome), ...]`` (blocks until at least one has finished) and ``cancel(handles)``; every outcome goes out through
``on_done``, in the driver's thread, so the store is written by the driver only. Unit-tested with a fake backend
(tests/run/test_scheduler.py); :class:`harness.run.ray_executor.RayExecutor` is the real one.

Rules:

* a chain (:mod:`harness.run.chains`) has at most one trial in flight, and its sizes run smallest first: a size
  above one of its sizes that ran out of memory is recorded as skipped (``skip_larger``), without a slot;
* with one slot, the next trial started is the ready one earliest in the planner's order: exactly the serial sweep's
  order;
* with more than one slot, the ready chain with the most estimated work left goes first (longest processing time
  first, which keeps the longest chain from starting last: docs/scaling.md measured 1.33x the bound on 8 GPUs in the
  planner's order, 1.00 longest first); ties, and a start where nothing is known yet, keep the planner's order. A
  trial's estimate (:class:`Estimates`) is the mean ``elapsed_s`` of the finished trials of its cell (framework,
  variant, purpose, batch size: another repeat of the same trial), from this sweep and from the store's earlier
  runs (``--resume``), else the mean over every trial known, so a chain of unmeasured trials counts by their number;
* a trial whose node died (``lost``) is passed on (its row is written), then run again once (attempt 2); lost a
  second time it stays lost for ``--resume``;
* an out-of-memory outcome is a result like any other, never retried;
* anything raised while trials are in flight (Ctrl-C) cancels all of them before it propagates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
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

#: what a duration estimate is kept for: (framework, variant, purpose, batch size), the repeats of one trial
CellKey = tuple[str, str, str, int]


def cell_of(trial: TrialSpec) -> CellKey:
    """The cell whose finished trials estimate ``trial``'s duration."""
    return (trial.framework, trial.variant, trial.purpose, trial.batch_size)


def known_durations(rows: Iterable[Mapping[str, object]]) -> list[tuple[CellKey, float]]:
    """(cell, elapsed seconds) of the stored sweep trial rows that finished (``--resume``: the store's earlier runs).
    A max-batch search's probes, settling and verify runs are left out: many short runs that are no sweep trial's
    repeat would pull down the estimate of every trial not measured yet."""
    out = []
    for r in rows:
        if r.get("status") in ("ok", "diverged") and r.get("elapsed_s") and (r.get("purpose") or "sweep") == "sweep":
            out.append(((str(r["framework"]), str(r.get("variant") or ""), str(r.get("purpose") or "sweep"),
                         int(r["batch_size"])), float(r["elapsed_s"])))  # type: ignore[call-overload, arg-type]
    return out


class Estimates:
    """How long a trial is expected to take (seconds): the mean ``elapsed_s`` of the finished trials of its cell,
    else the mean over every trial known, else 0 (nothing known: every chain ties, and the planner's order decides).
    """

    def __init__(self, known: Iterable[tuple[CellKey, float]] = ()) -> None:
        self._by_cell: dict[CellKey, tuple[float, int]] = {}  # (sum of seconds, trials): a mean in constant time
        self._sum, self._n = 0.0, 0
        for cell, seconds in known:
            self.add(cell, seconds)

    def add(self, cell: CellKey, seconds: float) -> None:
        """One finished trial of ``cell`` took ``seconds``."""
        if seconds > 0:
            total, n = self._by_cell.get(cell, (0.0, 0))
            self._by_cell[cell] = (total + seconds, n + 1)
            self._sum, self._n = self._sum + seconds, self._n + 1

    def of(self, trial: TrialSpec) -> float:
        """``trial``'s expected seconds."""
        total, n = self._by_cell.get(cell_of(trial), (self._sum, self._n))
        return total / n if n else 0.0


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
               max_attempts: int = MAX_ATTEMPTS, known: Iterable[tuple[CellKey, float]] = ()) -> ScheduleStats:
    """Run ``trials`` (the planner's order) chain by chain, up to ``slots`` at once; see the module's rules.

    ``slots``: a number, or a function asked before each start (a cluster that lost a node has fewer); with none
    left and trials still to run, the schedule ends and ``stats.not_run`` counts them (``--resume`` runs them).
    ``oom_at``: the smallest out-of-memory size per chain already known (stored before a ``--resume``).
    ``on_start(trial, attempt)`` is told each start. ``known``: (cell, seconds) of trials finished before (the
    store's earlier runs), for the estimates that order chains when more than one slot is free. Returns what the
    schedule did.

    One function (about 75 lines): the start loop, the two closures that pick the next chain and the cancel on the
    way out all share the queues, the out-of-memory limits and the running set; as separate functions that state
    would travel as half a dozen parameters, or become a class with one method.
    """
    free = slots if callable(slots) else (lambda: slots)  # type: ignore[misc]
    # each trial's place in the planner's order, by object (a trial's hash is computed anew at each read: too dear to
    # read for every ready chain at every start of a sweep of thousands)
    order = {id(t): i for i, t in enumerate(trials)}
    queues: dict[ChainKey, deque[tuple[TrialSpec, int]]] = {
        c.key: deque((t, 1) for t in c.trials) for c in split_chains(trials)}
    limits = dict(oom_at or {})
    running: dict[Hashable, tuple[ChainKey, TrialSpec, int]] = {}
    busy: set[ChainKey] = set()
    stats = ScheduleStats()

    estimates = Estimates(known)

    def work_left(key: ChainKey) -> float:
        limit = limits.get(key) if skip_larger else None
        return sum(estimates.of(t) for t, _ in queues[key] if limit is None or t.batch_size <= limit)

    def next_ready(slots_n: int, free_n: int) -> ChainKey | None:
        ready = [k for k, q in queues.items() if q and k not in busy]
        if not ready:
            return None
        # with more ready chains than free slots, longest processing time first (ties, as when nothing is known yet,
        # in the planner's order); with room for every ready chain the order within this round changes nothing
        if slots_n > 1 and len(ready) > free_n:
            return min(ready, key=lambda k: (-work_left(k), order[id(queues[k][0][0])]))
        return min(ready, key=lambda k: order[id(queues[k][0][0])])

    try:
        while True:
            while len(running) < (slots_n := free()):
                key = next_ready(slots_n, slots_n - len(running))
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
                if outcome.status in ("ok", "diverged"):
                    estimates.add(cell_of(trial), outcome.elapsed_s)
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
