"""The chain scheduler without Ray (issue 23): chains, slots, doomed sizes within a chain, lost trials, Ctrl-C.

The backend is a fake with a clock of its own: each submitted trial finishes after as many ``wait`` calls as the
test says, in submission order, so what ran at once is exact, not timed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable

import pytest

from harness.config.trial import OptimizerSpec, TrialSpec
from harness.records import Placement, TrialOutcome
from harness.run.chains import chain_key, oom_limits, split_chains
from harness.run.scheduler import Estimates, SerialBackend, cell_of, known_durations, run_chains


def _trial(framework: str = "fake", batch: int = 16, repeat: int = 0, variant: str = "") -> TrialSpec:
    return TrialSpec(experiment="e", framework=framework, model="tiny_cnn", dataset="synthetic", batch_size=batch,
                     repeat=repeat, seed=repeat, epochs=0, warmup_steps=1, timed_steps=1,
                     optimizer=OptimizerSpec(name="sgd", lr=0.1, momentum=0.0), device="cpu", threads=1,
                     timeout_s=60.0, variant=variant)


def _plan(frameworks: tuple[str, ...] = ("a", "b"), sizes: tuple[int, ...] = (16, 32, 64),
          repeats: int = 1) -> list[TrialSpec]:
    """The planner's order: framework, batch size, repeat."""
    return [_trial(f, b, r) for f in frameworks for b in sizes for r in range(repeats)]


class FakeBackend:
    """Trials end one per ``wait``, oldest first; ``status(trial, attempt)`` says how each ends."""

    def __init__(self, status: Callable[[TrialSpec, int], str] = lambda t, a: "ok") -> None:
        self.status = status
        self.in_flight: dict[int, tuple[TrialSpec, int]] = {}
        self.concurrent: list[int] = []  # how many were in flight at each wait
        self.cancelled: list[int] = []
        self._n = 0

    def submit(self, trial: TrialSpec, attempt: int) -> Hashable:
        self._n += 1
        self.in_flight[self._n] = (trial, attempt)
        return self._n

    def wait(self, handles: list[Hashable]) -> list[tuple[Hashable, TrialOutcome]]:
        self.concurrent.append(len(self.in_flight))
        h = min(self.in_flight)
        trial, attempt = self.in_flight.pop(h)
        return [(h, TrialOutcome(trial=trial, status=self.status(trial, attempt),  # type: ignore[arg-type]
                                 placement=Placement(attempt=attempt)))]

    def cancel(self, handles: list[Hashable]) -> None:
        self.cancelled.extend(handles)  # type: ignore[arg-type]


def _run(trials: list[TrialSpec], backend: FakeBackend, slots: int, **kw: object) -> list[TrialOutcome]:
    done: list[TrialOutcome] = []
    run_chains(trials, submit=backend.submit, wait=backend.wait, cancel=backend.cancel, slots=slots,
               on_done=done.append, **kw)  # type: ignore[arg-type]
    return done


def test_chains_are_framework_variant_repeat_over_ascending_sizes() -> None:
    trials = [_trial("a", 64, 0), _trial("a", 16, 1), _trial("a", 16, 0), _trial("b", 32, 0, "v")]
    chains = split_chains(trials)
    assert [c.key for c in chains] == [("a", "", 0, "sweep"), ("a", "", 1, "sweep"), ("b", "v", 0, "sweep")]
    assert [t.batch_size for t in chains[0].trials] == [16, 64]


def test_one_slot_runs_the_serial_order() -> None:
    trials = _plan(repeats=2)
    done = _run(trials, FakeBackend(), slots=1)
    assert [o.trial.trial_hash for o in done] == [t.trial_hash for t in trials]


def test_chains_run_side_by_side_up_to_the_slots() -> None:
    trials = _plan(frameworks=("a", "b", "c", "d"), sizes=(16, 32))
    backend = FakeBackend()
    done = _run(trials, backend, slots=2)
    assert max(backend.concurrent) == 2  # never more than the slots ...
    assert sorted(o.trial.trial_hash for o in done) == sorted(t.trial_hash for t in trials)  # ... each trial once
    in_flight: set[tuple[object, ...]] = set()  # and a chain never has two trials in flight: sizes in order
    for key in {chain_key(t) for t in trials}:
        sizes = [o.trial.batch_size for o in done if chain_key(o.trial) == key]
        assert sizes == sorted(sizes)
        in_flight.add(key)
    assert len(in_flight) == 4


def test_a_chain_never_has_two_trials_in_flight() -> None:
    trials = _plan(frameworks=("a",), sizes=(16, 32, 64, 128))  # one chain
    backend = FakeBackend()
    _run(trials, backend, slots=4)
    assert backend.concurrent == [1, 1, 1, 1]


def test_sizes_above_an_oom_are_skipped_within_its_chain_only() -> None:
    trials = _plan(frameworks=("a", "b"), sizes=(16, 32, 64))
    backend = FakeBackend(lambda t, a: "oom" if t.framework == "a" and t.batch_size >= 32 else "ok")
    done = {(o.trial.framework, o.trial.batch_size): o for o in _run(trials, backend, slots=2)}
    assert [done[("a", b)].status for b in (16, 32, 64)] == ["ok", "oom", "skipped"]
    assert "batch size 32" in done[("a", 64)].reason
    assert [done[("b", b)].status for b in (16, 32, 64)] == ["ok", "ok", "ok"]
    # and off: the larger size runs into the same wall
    done = {(o.trial.framework, o.trial.batch_size): o for o in _run(trials, backend, slots=2, skip_larger=False)}
    assert done[("a", 64)].status == "oom"


def test_an_oom_stored_before_dooms_its_chain_on_resume() -> None:
    trials = _plan(frameworks=("a",), sizes=(16, 32, 64))
    limits = oom_limits([{"status": "oom", "framework": "a", "variant": "", "repeat": 0, "purpose": "sweep",
                          "batch_size": 32}])
    done = _run(trials, FakeBackend(), slots=1, oom_at=limits)
    assert [o.status for o in done] == ["ok", "ok", "skipped"]  # 32 itself is run again (the test gave all three)


def test_a_lost_trial_is_recorded_then_run_once_more() -> None:
    trials = _plan(frameworks=("a", "b"), sizes=(16, 32))
    backend = FakeBackend(lambda t, a: "lost" if t.framework == "a" and t.batch_size == 16 and a == 1 else "ok")
    done = _run(trials, backend, slots=2)
    a16 = [o for o in done if o.trial.framework == "a" and o.trial.batch_size == 16]
    assert [(o.status, o.placement.attempt) for o in a16] == [("lost", 1), ("ok", 2)]
    assert {o.trial.trial_hash for o in done} == {t.trial_hash for t in trials}  # nothing dropped
    # the re-run went before the rest of its chain: 32 after 16's second attempt
    a = [o for o in done if o.trial.framework == "a"]
    assert [(o.trial.batch_size, o.status) for o in a] == [(16, "lost"), (16, "ok"), (32, "ok")]


def test_a_trial_lost_twice_stays_lost_for_resume() -> None:
    trials = _plan(frameworks=("a",), sizes=(16, 32))
    backend = FakeBackend(lambda t, a: "lost" if t.batch_size == 16 else "ok")
    done = _run(trials, backend, slots=1)
    assert [(o.trial.batch_size, o.status, o.placement.attempt) for o in done] == [
        (16, "lost", 1), (16, "lost", 2), (32, "ok", 1)]


def test_no_slot_left_ends_the_schedule_and_counts_what_did_not_run() -> None:
    trials = _plan(frameworks=("a", "b"), sizes=(16, 32))
    backend = FakeBackend(lambda t, a: "lost")
    left = {"n": 2}

    def slots() -> int:  # every trial's node dies; after the first two losses the cluster has no node left
        return left["n"]

    done: list[TrialOutcome] = []

    def on_done(o: TrialOutcome) -> None:
        done.append(o)
        left["n"] = max(0, left["n"] - 1)

    stats = run_chains(trials, submit=backend.submit, wait=backend.wait, cancel=backend.cancel, slots=slots,
                       on_done=on_done)
    assert [o.status for o in done] == ["lost", "lost"]
    assert stats.not_run == 4  # two to re-run and the two larger sizes: left for --resume, not dropped


def test_ctrl_c_cancels_every_trial_in_flight() -> None:
    trials = _plan(frameworks=("a", "b", "c"), sizes=(16,))
    backend = FakeBackend()

    def interrupted(handles: list[Hashable]) -> list[tuple[Hashable, TrialOutcome]]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_chains(trials, submit=backend.submit, wait=interrupted, cancel=backend.cancel, slots=3,
                   on_done=lambda o: None)
    assert sorted(backend.cancelled) == [1, 2, 3]


def test_the_serial_backend_runs_each_trial_inside_submit() -> None:
    ran: list[tuple[int, int]] = []
    backend = SerialBackend(lambda t, a: ran.append((t.batch_size, a)) or TrialOutcome(trial=t, status="ok"))
    done = _run(_plan(frameworks=("a",), sizes=(16, 32)), backend, slots=backend.slots())  # type: ignore[arg-type]
    assert ran == [(16, 1), (32, 1)] and [o.status for o in done] == ["ok", "ok"]


class ClockBackend:
    """Each trial ends ``seconds[framework]`` after it started, on a clock of its own (the outcome carries it)."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds, self.now, self._n = seconds, 0.0, 0
        self._ends: list[tuple[float, int, TrialSpec, float]] = []
        self.starts: list[tuple[float, str, int]] = []  # (time, framework, batch size)

    def submit(self, trial: TrialSpec, attempt: int) -> Hashable:
        self._n += 1
        d = self.seconds[trial.framework]
        heapq.heappush(self._ends, (self.now + d, self._n, trial, d))
        self.starts.append((self.now, trial.framework, trial.batch_size))
        return self._n

    def wait(self, handles: list[Hashable]) -> list[tuple[Hashable, TrialOutcome]]:
        end, n, trial, d = heapq.heappop(self._ends)
        self.now = end
        return [(n, TrialOutcome(trial=trial, status="ok", elapsed_s=d))]

    def cancel(self, handles: list[Hashable]) -> None:
        pass


def _makespan(trials: list[TrialSpec], backend: ClockBackend, slots: int, **kw: object) -> float:
    _run(trials, backend, slots, **kw)  # type: ignore[arg-type]
    return backend.now


def test_with_several_slots_the_chain_with_the_most_work_left_goes_first() -> None:
    # chains a and b: two 1 s trials; c: two 2 s trials, last in the planner's order. Bound: max(4, 8 / 2) = 4 s.
    # The planner's order would start c after a and b had both finished a size: 6 s.
    trials = _plan(frameworks=("a", "b", "c"), sizes=(16, 32))
    seconds = {"a": 1.0, "b": 1.0, "c": 2.0}
    learning = ClockBackend(seconds)
    # nothing known at the start (a tie: the planner's order); after a and b's first sizes, c has the most left
    assert _makespan(trials, learning, slots=2) == 5.0
    assert learning.starts[:4] == [(0.0, "a", 16), (0.0, "b", 16), (1.0, "c", 16), (1.0, "a", 32)]
    known = [(cell_of(t), seconds[t.framework]) for t in trials]  # a study run again into the same store
    told = ClockBackend(seconds)
    assert _makespan(trials, told, slots=2, known=known) == 4.0
    assert told.starts[0] == (0.0, "c", 16)
    serial = ClockBackend(seconds)  # one slot: the planner's order, whatever is known
    _makespan(trials, serial, slots=1, known=known)
    assert [(f, b) for _, f, b in serial.starts] == [(t.framework, t.batch_size) for t in trials]


def test_a_trials_estimate_is_its_cells_mean_else_every_known_trials() -> None:
    est = Estimates([(cell_of(_trial("a", 16, 0)), 2.0), (cell_of(_trial("a", 16, 1)), 4.0)])
    assert est.of(_trial("a", 16, 2)) == 3.0  # another repeat of the same trial
    est.add(cell_of(_trial("b", 16)), 9.0)
    assert est.of(_trial("c", 64)) == 5.0  # never measured: the mean of all (2, 4, 9)
    assert Estimates().of(_trial("a", 16)) == 0.0


def test_stored_rows_that_finished_are_the_known_durations_on_resume() -> None:
    keys = ("framework", "variant", "purpose", "batch_size", "status", "elapsed_s")
    cases = (("a", None, "sweep", 16, "ok", 3.5), ("a", "v", None, 32, "diverged", 2.0),
             ("a", "", "sweep", 64, "oom", 9.0), ("b", "", "sweep", 16, "lost", 1.0),
             ("a", "", "probe", 16, "ok", 0.5))  # a max-batch probe: no sweep trial's repeat
    rows: list[dict[str, object]] = [dict(zip(keys, r, strict=True)) for r in cases]
    assert known_durations(rows) == [(("a", "", "sweep", 16), 3.5), (("a", "v", "sweep", 32), 2.0)]
    assert cell_of(_trial("a", 16, repeat=2)) == ("a", "", "sweep", 16)
