"""A trial's throughput figures and its drift, from the times of its post-warm-up steps.

Two figures, because they answer two questions (README, "What the numbers mean"):

* **step throughput** (``step_samples_per_s``): the batch size over the *median* time of every
  post-warm-up step's forward, backward and update. It is what the framework's device work costs per
  sample; the median keeps a stray slow step (a context switch, a page fault) out, and its spread is
  the interquartile range (``step_time_ms_iqr``).
* **end-to-end throughput** (``e2e_samples_per_s``): the samples of every post-warm-up step over the
  wall time those steps took, batch preparation included. It is what the user waits for.

Before this module, the headline was the median of the first 20 timed steps only, and a trial whose
steps slowed down later (denormal floats on the CPU: 3 ms -> 38 ms per step after step ~600 in MXNet)
published a figure the rest of its training contradicted. Now every post-warm-up step counts, and a
trial whose early and late steps differ by more than their noise carries a drift flag.

Pure functions over lists of floats: the worker calls them, tests feed them made-up step times.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: the share of post-warm-up steps at each end compared for drift
DRIFT_WINDOW_FRACTION = 0.10
#: fewest steps in each window: with fewer, a median is one or two steps and says nothing
DRIFT_MIN_WINDOW_STEPS = 3
#: a change below this is never called drift, however quiet the steps (timer and scheduler noise)
DRIFT_FLOOR_PCT = 10.0


@dataclass(frozen=True)
class StepFigures:
    """Throughput and step-time statistics of one trial's post-warm-up steps."""

    steps_n: int
    step_time_ms_median: float
    step_time_ms_iqr: float
    step_samples_per_s: float
    e2e_samples_per_s: float | None  # None when the wall time is not known (or zero)


@dataclass(frozen=True)
class Drift:
    """The change of the median step time from the first to the last window of post-warm-up steps.

    ``change_pct`` is (late median / early median - 1) x 100: positive means the steps slowed down.
    ``threshold_pct`` is the noise the change is compared with: the larger of :data:`DRIFT_FLOOR_PCT`
    and the two windows' mean interquartile range relative to the early median (a change within the
    typical spread of single steps is not called drift). ``flagged`` is |change| > threshold.
    """

    window_steps_n: int
    early_ms: float
    late_ms: float
    change_pct: float
    threshold_pct: float
    flagged: bool


def _iqr(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[2] - q[0]


def step_figures(step_ms: Sequence[float], batch_size: int, samples_n: int, wall_s: float | None) -> StepFigures:
    """Figures of the post-warm-up steps ``step_ms`` (ms each), which trained ``samples_n`` samples in ``wall_s``.

    ``batch_size`` is the configured batch: the step figure is per full batch (the median step is a
    full one; an epoch's short last batch is one step among many).
    """
    if not step_ms:
        raise ValueError("no post-warm-up steps to take figures from")
    median = statistics.median(step_ms)
    e2e = samples_n / wall_s if wall_s and wall_s > 0 else None
    return StepFigures(steps_n=len(step_ms), step_time_ms_median=median, step_time_ms_iqr=_iqr(step_ms),
                       step_samples_per_s=batch_size / (median / 1e3) if median > 0 else float("inf"),
                       e2e_samples_per_s=e2e)


def drift(step_ms: Sequence[float]) -> Drift | None:
    """Early against late steps of ``step_ms`` (post-warm-up, in order); None with too few steps to tell."""
    window = max(DRIFT_MIN_WINDOW_STEPS, int(len(step_ms) * DRIFT_WINDOW_FRACTION))
    if 2 * window > len(step_ms):
        return None
    early, late = list(step_ms[:window]), list(step_ms[-window:])
    early_ms, late_ms = statistics.median(early), statistics.median(late)
    if early_ms <= 0:
        return None
    change = (late_ms / early_ms - 1.0) * 100.0
    noise = (_iqr(early) + _iqr(late)) / 2.0 / early_ms * 100.0
    threshold = max(DRIFT_FLOOR_PCT, noise)
    return Drift(window_steps_n=window, early_ms=early_ms, late_ms=late_ms, change_pct=change,
                 threshold_pct=threshold, flagged=abs(change) > threshold)
