"""Evaluation points: spread over the training, off its clock, one curve point each; a diverged training is a result."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

from harness.config.schedule import constant_updates, eval_steps
from harness.records import CurvePoint, TrialOutcome, WorkerMetrics
from harness.run.protocol import Phase, ProgressTicker
from harness.run.worker import steps
from harness.run.worker.steps import StepPlan, train
from harness.store import Store
from tests.conftest import make_trial
from tests.fakes.adapter import DIVERGES_AT_STEP
from tests.helpers.fake_trial import run_fake


def test_eval_steps_are_spread_evenly_inside_the_training():
    def spread(steps: int, points: int) -> list[int]:  # full batches of 4 (no epochs: no short one)
        return eval_steps(constant_updates(4, 64, 0, steps), points_n=points)

    assert spread(100, 4) == [20, 40, 60, 80]
    assert spread(90, 8) == [10, 20, 30, 40, 50, 60, 70, 80]
    assert spread(4, 3) == [1, 2, 3]  # as many points as steps inside the training: one point per step
    assert spread(4, 8) == [1, 2, 3]  # more (the planner caps them): never twice on a step
    assert spread(10, 0) == [] and spread(1, 8) == []  # 0: the final evaluation only


def test_a_constant_sizes_points_are_spread_over_its_samples_not_its_steps():
    # batch 10 over 64 samples: 7 steps an epoch (6 of 10, 1 of 4), 14 over 2 epochs. 3 points at 32, 64 and 96
    # samples: after steps 4, 7 and 11 (104 samples; after step 10, 94). Over the steps they fell after 4, 7, 10.
    assert eval_steps(constant_updates(10, 64, 2, 14), points_n=3) == [4, 7, 11]


class _Clock:
    """A fake perf_counter: only the fake steps and evaluations move it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


class _Runner:
    """Each step takes exactly 1 s of the fake clock."""

    def __init__(self, clock: _Clock, batch: int) -> None:
        self.clock = clock
        self.trial = make_trial(batch_size=batch, epochs=0)
        self.window = 1  # every step waited for (no queued steps)

    def run(self, step: int, idx: np.ndarray, following: object = None, queued: bool = False) -> tuple[float, float]:
        self.clock.now += 1.0
        return 0.0, 1.0


def _train(monkeypatch, at_point_s: float, go_on: list[bool]) -> tuple[Any, list[str], list[tuple[int, int, float]]]:
    clock = _Clock()
    monkeypatch.setattr(steps, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    announced: list[str] = []
    seen: list[tuple[int, int, float]] = []

    def at_point(step: int, samples: int, train_s: float) -> bool:
        announced.append("eval")
        seen.append((step, samples, train_s))
        clock.now += at_point_s  # an evaluation that takes long: none of it may count as training
        return go_on[len(seen) - 1]

    ticker = ProgressTicker(None, None, 8, 8, 0)  # type: ignore[arg-type]  # interval None: sends nothing
    trained = train(_Runner(clock, 4), np.arange(64)[None, :], StepPlan(2, 6, 0), announced.append,  # type: ignore[arg-type]
                    ticker, lambda: None, eval_at=[2, 5], at_point=at_point)
    return trained, announced, seen


def test_the_training_clock_leaves_the_evaluation_points_out(monkeypatch):
    trained, announced, seen = _train(monkeypatch, at_point_s=100.0, go_on=[True, True])
    assert seen == [(2, 8, 2.0), (5, 20, 5.0)]  # training seconds so far: the steps only
    assert trained.train_s == 8.0 and trained.post_warmup_s == 6.0  # 8 steps of 1 s; 200 s of evaluation left out
    assert len(trained.step_ms) == 8 and not trained.stopped
    # back from each point into the phase it interrupted (the point at step 2 falls on the timed phase's start)
    assert announced == ["warmup", "eval", "timed", "eval", "timed"]


def test_a_point_that_finds_the_training_diverged_stops_it(monkeypatch):
    trained, _, seen = _train(monkeypatch, at_point_s=1.0, go_on=[True, False])
    assert len(seen) == 2 and trained.stopped and len(trained.step_ms) == 5
    assert trained.phase_steps(StepPlan(2, 6, 0)) == {"warmup": 2, "timed": 3, "train": 0}
    assert trained.train_s == 5.0


@pytest.mark.process
def test_a_trial_evaluates_at_its_points_and_at_the_end(tiny_data, tmp_path):
    outcome, events = run_fake(tiny_data, tmp_path, eval_points=3)
    assert outcome.status == "ok", outcome.reason
    m = outcome.metrics
    total = len(outcome.step_times_ms)
    assert total == 16 and [p.step for p in outcome.curve] == [4, 8, 12, total]  # 2 x 64 samples at batch 8
    assert [p.point for p in outcome.curve] == [0, 1, 2, 3]
    assert outcome.curve[-1].samples_seen == 2 * tiny_data.n_train and outcome.curve[-1].epoch == 2.0
    train_s = [p.train_s for p in outcome.curve]
    assert train_s == sorted(train_s) and train_s[-1] == pytest.approx(m.train_s)
    last = outcome.curve[-1]
    assert (last.accuracy, last.eval_loss, last.eval_s) == (m.accuracy, m.eval_loss, m.eval_s)
    assert m.eval_total_s >= sum(p.eval_s for p in outcome.curve)
    phases = [e.phase for e in events if isinstance(e, Phase)]
    assert phases.count("eval") == 4 and phases[-1] == "eval"
    assert [p for p, _ in outcome.phases] == phases


@pytest.mark.process
def test_the_curve_is_stored_with_the_trial_and_read_back_by_the_report(tiny_data, tmp_path):
    from report.load import load

    outcome, _ = run_fake(tiny_data, tmp_path, eval_points=2)
    with Store.open(tmp_path / "out") as store:
        store.write_trial(outcome, store.begin_run("test", {"name": "test"}, "", {}), {})
        rows = store.curves(outcome.trial.trial_hash)
    assert [CurvePoint(**{k: v for k, v in r.items() if k != "trial_hash"}) for r in rows] == outcome.curve
    (exp,) = load(tmp_path / "out").experiments
    assert [r["point"] for r in exp.curves[outcome.trial.trial_hash]] == [0, 1, 2]


def test_a_rewritten_trial_replaces_its_curve(tmp_path):
    def with_points(n: int) -> TrialOutcome:
        curve = [CurvePoint(point=i, step=i, samples_seen=4 * i, epoch=0.1 * i, train_s=float(i), accuracy=0.5,
                            eval_loss=1.0, eval_samples=10, eval_s=0.1) for i in range(n)]
        return TrialOutcome(trial=make_trial(), status="ok", metrics=WorkerMetrics(), curve=curve)

    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {}, "", {})
        store.write_trial(with_points(3), run, {})
        store.write_trial(with_points(2), run, {})
        assert [r["point"] for r in store.curves()] == [0, 1]


@pytest.mark.process
@pytest.mark.parametrize(("behaviour", "words"), [("diverges", "eval loss is nan at eval point"),
                                                  ("nan_weights", "weights not finite at eval point")])
def test_a_diverged_training_is_a_result_that_says_where(tiny_data, tmp_path, behaviour, words):
    outcome, _ = run_fake(tiny_data, tmp_path, behaviour, eval_points=8)
    assert outcome.status == "diverged" and words in outcome.reason, outcome.reason
    m = outcome.metrics
    assert m is not None and m.train_steps_n == len(outcome.step_times_ms)  # measured up to where it stopped
    planned = 2 * -(-tiny_data.n_train // 8)
    assert DIVERGES_AT_STEP <= m.train_steps_n < planned  # stopped at the first point after it went bad
    assert outcome.curve and f"(step {outcome.curve[-1].step})" in outcome.reason
    assert sum(outcome.phase_steps.values()) == len(outcome.step_times_ms)
    assert outcome.curve[-1].accuracy == m.accuracy


@pytest.mark.process
def test_without_evaluation_the_weights_are_checked_at_the_end(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, tmp_path, "nan_weights", eval=False)
    assert outcome.status == "diverged" and "weights not finite at the end" in outcome.reason, outcome.reason
    assert outcome.curve == []


@pytest.mark.process
def test_a_max_batch_probe_is_not_checked_for_divergence(tiny_data, tmp_path):
    """A probe measures memory: a bad learning rate there says nothing about whether the size fits."""
    outcome, _ = run_fake(tiny_data, tmp_path, "nan_weights", purpose="probe")
    assert outcome.status == "ok", outcome.reason
