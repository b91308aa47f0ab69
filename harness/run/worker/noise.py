"""The gradient-noise measurement at an evaluation point (experiment key ``gradient_noise``; docs/noise.md).

At each point (the seam :meth:`harness.run.worker.evaluation.EvalPoints.measure`, outside the training clock) the
worker takes ``gradient_noise`` groups of :data:`harness.noise.BIG_FACTOR` batches of the trial's batch size (at
most :data:`harness.noise.B_SMALL_MAX`), each drawn at random from the training set (and augmented as the training's
batches are), and asks the adapter for each batch's gradient (:meth:`adapters.base.Adapter.flat_gradient`, which
changes no weights, optimizer state or BatchNorm statistics). Every batch's squared gradient norm is an X_small,
every group's mean gradient's an X_big; their means are the point's :class:`harness.noise.NoiseRecord`. No batch is
larger than the trial's, so the measurement needs no more device memory than the training, and only two float64
vectors of the model's size on the host.
"""

from __future__ import annotations

import time

import numpy as np

from harness.data.augment import Augmenter
from harness.noise import B_SMALL_MAX, BIG_FACTOR, NoiseRecord
from harness.numbers import finite_or_none
from harness.run.worker.point import PointContext

#: mixed into the point's random generator, so that the measurement's batches are not the training's order
_STREAM = 0x6E6F697365  # "noise"


def measure_noise(ctx: PointContext, groups: int) -> NoiseRecord:
    """``groups`` big batches (``BIG_FACTOR`` small ones each) at the point ``ctx``: the X means and their cost."""
    t0 = time.perf_counter()
    trial, adapter = ctx.trial, ctx.adapter
    n = len(ctx.y_train)
    # never more memory than the training (at the size it is at: a schedule's), bounded cost
    b_small = min(ctx.batch_size or trial.batch_size, B_SMALL_MAX, n)
    # the same batches for every framework at the same step of the same trial settings (seed, step)
    rng = np.random.default_rng([_STREAM, trial.seed, ctx.step])
    augment = Augmenter(trial.augment, trial.augment_pad_px, trial.seed, n)
    epoch = ctx.samples_seen // n if n else 0
    x_small_sum = x_big_sum = 0.0
    # per group: its small norms' mean, its big norm (the uncertainty's units)
    kept: list[tuple[float | None, float | None]] = []
    for _ in range(groups):
        total: np.ndarray | None = None
        group_small = 0.0
        for _ in range(BIG_FACTOR):
            idx = np.sort(rng.choice(n, size=b_small, replace=False))
            g = np.asarray(adapter.flat_gradient(augment(ctx.x_train[idx], idx, epoch), ctx.y_train[idx]),
                           dtype=np.float64)
            group_small += float(g @ g)
            total = g.copy() if total is None else np.add(total, g, out=total)
        assert total is not None  # BIG_FACTOR > 0
        mean = total / BIG_FACTOR
        big = float(mean @ mean)
        x_small_sum += group_small
        x_big_sum += big
        kept.append((finite_or_none(group_small / BIG_FACTOR), finite_or_none(big)))
    small_n, big_n = groups * BIG_FACTOR, groups
    return NoiseRecord(point=ctx.point, step=ctx.step, samples_seen=ctx.samples_seen, b_small=b_small,
                       b_big=b_small * BIG_FACTOR, x_small_mean=finite_or_none(x_small_sum / small_n),
                       x_big_mean=finite_or_none(x_big_sum / big_n), small_n=small_n, big_n=big_n,
                       noise_s=time.perf_counter() - t0, groups=tuple(kept))
