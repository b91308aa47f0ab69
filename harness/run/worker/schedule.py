"""A batch-size schedule in the worker (issue 52; experiment key ``batch_schedule``, harness/config/schedule.py).

The steps themselves are :class:`~harness.run.worker.steps.StepRunner`'s (it cuts the schedule's updates from the
seeded order, so the sample stream, augmentation and prefetch carry on across a change). Here: what happens *at* a
change, off the training clock (:func:`switches`: the learning rate ``lr_policy`` gives the new size, through the
adapter's ``set_learning_rate``; a compilation of the new size where the adapter compiles per shape, which its
``compile_stats`` counts as compile time), and its figures per size (:func:`schedule_figures`: steps, samples, median
step time and samples per second of step time of each stretch: ``WorkerMetrics.schedule``, stored as the trial's
``schedule_json``). Where it evaluates is the rule every training follows (harness.run.worker.trial.trial_eval_steps).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from adapters.base import Adapter
from harness.config.schedule import Segment, segments
from harness.config.trial import TrialSpec
from harness.records import ScheduleStretch
from harness.run.worker.steps import StepRunner


def trial_segments(trial: TrialSpec, n_train: int) -> list[Segment]:
    """The stretches of ``trial``'s schedule on ``n_train`` samples (empty for a constant size)."""
    return segments(trial.schedule, n_train, trial.epochs) if trial.batch_schedule else []


class Switches:
    """What runs at each change of size (step -> function), and what the changes took (``seconds``, per change)."""

    def __init__(self, trial: TrialSpec, adapter: Adapter, runner: StepRunner, n_train: int) -> None:
        self.trial, self.adapter, self.runner = trial, adapter, runner
        self.segments = trial_segments(trial, n_train)
        self.rates = {b: lr for _, b, lr in trial.batch_schedule}
        self.seconds: dict[int, float] = {}

    def at(self) -> dict[int, Callable[[], object]]:
        """step -> the change before it, for every stretch after the first."""
        return {seg.first_step: self._change(k) for k, seg in enumerate(self.segments) if k}

    def _change(self, k: int) -> Callable[[], object]:
        seg, before = self.segments[k], self.segments[k - 1]
        end = self.segments[k + 1].first_step if k + 1 < len(self.segments) else len(self.runner.sizes)

        def change() -> None:
            t0 = time.perf_counter()
            lr = self.rates[seg.batch]
            if lr != self.rates[before.batch]:
                self.adapter.set_learning_rate(lr)
            self.runner.warm_shapes([s for s, _ in self.runner.sizes[seg.first_step:end]])
            self.seconds[seg.first_step] = time.perf_counter() - t0

        return change


def schedule_figures(trial: TrialSpec, segs: Sequence[Segment], step_ms: Sequence[float], warmup_n: int,
                     switch_s: dict[int, float]) -> tuple[ScheduleStretch, ...]:
    """Per stretch: its size and rate, first step and sample, steps and samples trained, and its post-warm-up steps'
    median time and samples per second of step time (None where none of its steps was after the warm-up or ran)."""
    rates = {b: lr for _, b, lr in trial.batch_schedule}
    out = []
    for seg in segs:
        done = step_ms[max(seg.first_step, warmup_n): seg.first_step + seg.steps]
        median = statistics.median(done) if done else None
        out.append(ScheduleStretch(batch=seg.batch, lr=rates[seg.batch], first_step=seg.first_step,
                                   first_sample=seg.first_sample,
                                   steps=min(seg.steps, max(len(step_ms) - seg.first_step, 0)),
                                   step_ms_median=median,
                                   step_samples_per_s=seg.batch / (median / 1e3) if median else None,
                                   switch_s=switch_s.get(seg.first_step)))
    return tuple(out)


def schedule_metrics(trial: TrialSpec, switches: Switches, step_ms: Sequence[float], warmup_n: int,
                     post_warmup_samples: int, flop_per_sample: float | None) -> dict[str, Any]:
    """The trial's ``schedule`` figures (:func:`schedule_figures`); its ``step_samples_per_s`` as samples per second
    of step time over every post-warm-up step (a median step is not one size's in a schedule), and no drift (early and
    late steps are of different sizes: their times are not comparable); {} for a constant size."""
    if not trial.batch_schedule:
        return {}
    figures = schedule_figures(trial, switches.segments, step_ms, warmup_n, switches.seconds)
    out: dict[str, Any] = {"schedule": figures, "drift_change_pct": None,
                           "drift_threshold_pct": None, "drift_flagged": None}
    step_s = sum(step_ms[warmup_n:]) / 1e3
    if step_s > 0:
        out["step_samples_per_s"] = post_warmup_samples / step_s
        out["achieved_gflop_per_s"] = None if flop_per_sample is None else flop_per_sample * out[
            "step_samples_per_s"] / 1e9
    return out
