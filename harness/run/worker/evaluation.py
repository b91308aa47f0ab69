"""Evaluation points: where the worker pauses the training to evaluate on the held-out split (one learning-curve
point each), to check that the training has not diverged, and to take any other measurement that belongs to a
point of the training.

``eval_points`` (an experiment key) evaluations are spread evenly over the training's samples, or one falls every
``target_eval_samples`` samples in train-to-target mode, by one rule for constant sizes and schedules alike
(:func:`harness.config.schedule.eval_steps`, called by :func:`harness.run.worker.trial.trial_eval_steps`), and
the final evaluation at the end of the training is the last point. Everything here runs outside the training
clock: the loop (:func:`harness.run.worker.steps.train`) stops its clock before a point and starts it again after,
so neither ``train_s`` nor either throughput figure includes an evaluation, and the worker announces the ``eval``
phase for each point, so the sampler's timed and training aggregates leave the evaluations out too.

**The seam for more measurements** (docs/architecture.md): :meth:`EvalPoints.measure` is called at every point,
the final one included, after the evaluation and before the divergence check, with a :class:`PointContext` (the
adapter, the step, the training data and its order). A measurement of the training's state at that point (the
gradient noise scale, :mod:`harness.run.worker.noise`) is added there: it must leave the weights, the optimizer
state and BatchNorm statistics as they were, keep its rows on this object, and have
:func:`harness.run.worker.trial` put them in the result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from adapters.base import Adapter, MemoryStats
from harness.config.trial import TrialSpec
from harness.noise import NoiseRecord
from harness.numbers import finite_or_none
from harness.records import CurvePoint
from harness.run.worker.noise import measure_noise
from harness.run.worker.point import PointContext


def non_finite_weights(adapter: Adapter) -> str | None:
    """What is not finite in the adapter's weights (``get_weights``), or None where all are finite. An adapter
    with no canonical layout (a native model) returns no weights: only the loss can tell then."""
    weights = adapter.get_weights()
    bad = [i for i, w in enumerate(weights) if not np.isfinite(w).all()]
    if not bad:
        return None
    return f"{len(bad)} of {len(weights)} weight arrays hold NaN or inf (the first is array {bad[0]})"


@dataclass
class EvalPoints:
    """One trial's evaluation points: the learning curve, the divergence check, the extra measurements.

    ``check_divergence`` is off for max-batch probes: they measure memory, not learning, and the check's copy of
    the weights on the host must not count against their budget.
    """

    trial: TrialSpec
    adapter: Adapter
    x_test: np.ndarray
    y_test: np.ndarray
    x_train: np.ndarray
    y_train: np.ndarray
    order: np.ndarray
    n_train: int
    check_divergence: bool = True
    curve: list[CurvePoint] = field(default_factory=list)
    diverged: str | None = None  # where and how the training diverged; None while it has not
    eval_total_s: float = 0.0
    #: the framework's peak memory of each stretch of training before an intermediate point (the peak is reset
    #: after each point's evaluation, so that evaluating at its own batch size is not taken for training's peak)
    training_peaks: list[MemoryStats] = field(default_factory=list)
    #: the gradient-noise measurement of each point (``trial.gradient_noise`` > 0; harness.run.worker.noise)
    noise: list[NoiseRecord] = field(default_factory=list)
    #: the batch size the training is at after so many samples (a batch-size schedule's); None: the trial's
    batch_at: Callable[[int], int] | None = None

    def at(self, step: int, samples_seen: int, train_s: float, final: bool = False) -> CurvePoint:
        """Evaluate after ``step`` updates (``train_s`` seconds of training so far), take the point's measurements
        and check for divergence (:attr:`diverged`)."""
        if not final:
            self.training_peaks.append(self.adapter.memory_stats())
        ctx = PointContext(point=len(self.curve), step=step, samples_seen=samples_seen, final=final, trial=self.trial,
                           adapter=self.adapter, x_train=self.x_train, y_train=self.y_train, order=self.order,
                           batch_size=self.batch_at(samples_seen) if self.batch_at else 0)
        t0 = time.perf_counter()
        ev = self.adapter.evaluate(np.asarray(self.x_test), np.asarray(self.y_test), self.trial.eval_batch_size)
        eval_s = time.perf_counter() - t0
        point = CurvePoint(point=ctx.point, step=step, samples_seen=samples_seen, epoch=samples_seen / self.n_train,
                           train_s=train_s, accuracy=finite_or_none(ev.accuracy),
                           eval_loss=finite_or_none(ev.loss), eval_samples=ev.samples, eval_s=eval_s)
        self.curve.append(point)
        self.measure(ctx)
        if self.check_divergence:
            self.diverged = self.check(ctx, ev.loss)
        if not final:
            self.adapter.reset_memory_stats()
        self.eval_total_s += time.perf_counter() - t0
        return point

    def measure(self, ctx: PointContext) -> None:
        """Measurements at an evaluation point besides the curve (the seam; see the module docstring): the gradient
        noise, where the trial asks for it."""
        if self.trial.gradient_noise > 0:
            self.noise.append(measure_noise(ctx, self.trial.gradient_noise))

    def check(self, ctx: PointContext, loss: float) -> str | None:
        """Why the training has diverged at this point (a non-finite evaluation loss or weights), or None."""
        where = f"at eval point {ctx.point} (step {ctx.step})" if not ctx.final else f"at the end (step {ctx.step})"
        if not math.isfinite(loss):
            return f"eval loss is {loss} {where}"
        bad = non_finite_weights(self.adapter)
        return f"weights not finite {where}: {bad}" if bad else None

    def training_peak(self, last: MemoryStats) -> MemoryStats:
        """The framework's peak over every stretch of training, ``last`` being the final stretch's stats."""
        peaks = [s.peak_mib for s in (*self.training_peaks, last) if s.peak_mib is not None]
        return MemoryStats(peak_mib=max(peaks) if peaks else None, source=last.source, reserved_mib=last.reserved_mib,
                           context_mib=getattr(last, "context_mib", None))  # a plugin's own stats record may lack it
