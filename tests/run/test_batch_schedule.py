"""Training with a batch-size schedule in the worker (issue 52): the sample stream, the changes off the clock, the
compilation of a new size before its first step, the figures per size, and a whole fake trial through a worker."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from harness.config.schedule import step_sizes
from harness.records import ScheduleStretch
from harness.run.protocol import ProgressTicker
from harness.run.worker.schedule import Switches, schedule_metrics
from harness.run.worker.steps import StepPlan, StepRunner, train
from tests.conftest import make_trial
from tests.helpers.fake_trial import run_fake

SWITCH_S = 0.3


class Recorder:
    """What the worker asks of an adapter that compiles per shape: batches prepared, steps trained, rate changes."""

    compiles_per_shape = True

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        self.events.append(("prepare", len(x)))
        return x, y

    def train_step(self, batch: Any) -> None:
        self.events.append(("step", batch[0][:, 0, 0, 0].astype(int).tolist()))

    def set_learning_rate(self, lr: float) -> None:
        time.sleep(SWITCH_S)  # a slow change (a recompilation): none of it may count as training
        self.events.append(("lr", lr))


def _train(schedule: tuple[tuple[float, int, float], ...], n: int = 10, epochs: int = 2
           ) -> tuple[Recorder, Any, Switches, StepRunner]:
    trial = make_trial(batch_size=schedule[0][1], epochs=epochs, warmup_steps=1, timed_steps=2, prefetch=False,
                       batch_schedule=schedule, optimizer=make_trial().optimizer)
    adapter = Recorder()
    x = np.arange(n, dtype=np.float32)[:, None, None, None] * np.ones((1, 1, 2, 2), np.float32)  # sample i reads i
    runner = StepRunner(adapter, trial, x, np.zeros(n, np.int64), n)  # type: ignore[arg-type]
    order = np.stack([np.random.default_rng(e).permutation(n) for e in range(epochs)])
    switches = Switches(trial, adapter, runner, n)  # type: ignore[arg-type]
    runner.warm_shapes()
    total = len(runner.sizes)
    ticker = ProgressTicker(None, None, total, total, epochs)  # type: ignore[arg-type]  # sends nothing
    trained = train(runner, order, StepPlan(1, 2, total - 3), lambda phase: None, ticker, lambda: None,
                    switch_at=switches.at())
    runner.close()
    return adapter, (trained, order), switches, runner


def test_the_schedule_cuts_one_stream_and_changes_rate_and_shape_off_the_clock():
    adapter, (trained, order), switches, runner = _train(((0.0, 2, 0.1), (0.5, 4, 0.2)))
    steps = [e[1] for e in adapter.events if e[0] == "step"]
    assert [len(s) for s in steps] == [2] * 5 + [4, 4, 2] == [s for s, _ in step_sizes(((0, 2), (0.5, 4)), 10, 2)]
    # every sample once per epoch, in the seeded order: the change continued the stream
    for i, s in enumerate(steps[:5]):
        assert s == sorted(order[0][2 * i: 2 * i + 2].tolist())
    assert steps[5:] == [sorted(order[1][a:b].tolist()) for a, b in ((0, 4), (4, 8), (8, 10))]
    # the rate change, then the new stretch's sizes compiled (prepared once each), before its first step, once
    lr_at = adapter.events.index(("lr", 0.2))
    assert adapter.events[lr_at + 1: lr_at + 3] == [("prepare", 2), ("prepare", 4)]
    first_big = next(i for i, e in enumerate(adapter.events) if e[0] == "step" and len(e[1]) == 4)
    assert lr_at < first_big and adapter.events.count(("lr", 0.2)) == 1
    assert trained.train_s < SWITCH_S  # the change is off the training clock
    assert switches.seconds[5] >= SWITCH_S


def test_a_schedule_whose_rate_does_not_change_never_asks_for_it():
    adapter, _, _, _ = _train(((0.0, 2, 0.1), (0.5, 4, 0.1)))
    assert not any(e[0] == "lr" for e in adapter.events)


def test_the_figures_are_per_size():
    _, (trained, _), switches, runner = _train(((0.0, 2, 0.1), (0.5, 4, 0.2)))
    trial = runner.trial
    step_ms = [1.0] * 5 + [3.0] * 3
    out = schedule_metrics(trial, switches, step_ms, 1, 18, None)
    figures = out["schedule"]
    assert all(isinstance(f, ScheduleStretch) for f in figures)
    assert [(f.batch, f.lr, f.first_step, f.first_sample, f.steps) for f in figures] == [
        (2, 0.1, 0, 0, 5), (4, 0.2, 5, 10, 3)]
    assert figures[0].step_samples_per_s == 2000.0 and figures[1].step_samples_per_s == 4 / 0.003
    assert out["step_samples_per_s"] == 18 / 0.013 and out["drift_flagged"] is None
    assert schedule_metrics(make_trial(), switches, step_ms, 1, 18, None) == {}


@pytest.mark.process  # the whole worker, in a process of its own (tests/helpers/processes.py)
def test_a_scheduled_fake_trial_runs_through_a_worker(tiny_data, tmp_path):
    """The whole worker: 64 samples x 2 epochs, batch 4 then 16 from half the samples, 3 evaluation points spread
    over the samples, the noise measured at each at the size the training is at."""
    schedule = ((0.0, 4, 0.01), (0.5, 16, 0.01))
    outcome, _ = run_fake(tiny_data, tmp_path, batch_size=4, batch_schedule=schedule, eval_points=3,
                          gradient_noise=1, warmup_steps=1, timed_steps=2)
    assert outcome.status == "ok", outcome.error
    sizes = step_sizes(((0.0, 4), (0.5, 16)), 64, 2)
    assert len(outcome.step_times_ms) == len(sizes) == 16 + 4
    figures = outcome.metrics.schedule
    assert figures is not None
    assert [(f.batch, f.first_step, f.first_sample, f.steps) for f in figures] == [
        (4, 0, 0, 16), (16, 16, 64, 4)]
    assert [p.samples_seen for p in outcome.curve] == [32, 64, 96, 128]  # by samples, not steps
    assert [r.b_small for r in outcome.gradient_noise] == [4, 16, 16, 16]
    assert outcome.metrics.epochs_done == 2.0


def test_the_progress_line_names_a_schedules_sizes():
    from harness.cli.progress import trial_label

    trial = make_trial(batch_size=16, batch_schedule=((0.0, 16, 0.1), (0.3, 64, 0.1)), variant="ramp")
    assert "ramp bs=16→64 rep 0" in trial_label(trial)
    assert "bs=16    rep 0" in trial_label(make_trial(batch_size=16))
