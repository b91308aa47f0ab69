"""The throughput knee: the smallest batch size within a share of the fastest (the recommendation's second column).

Before the time-to-target rule (:mod:`report.answer.recommend`), this was the recommendation itself. It stays beside the
answer because it says where larger batches stop buying speed; it says nothing about whether they learn, which is
why it no longer decides (docs/recommend.md). Pure: reads only the rows of one series.

1. A size's throughput is the mean over its finished repeats, its spread the sample standard deviation.
2. The *best* size has the highest mean throughput; the **knee is the smallest size whose mean throughput is at
   least** :data:`SHARE_OF_BEST` **of the best mean**.
3. Its range applies the same bar to mean - sd and mean + sd.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# a stored value as a finite float; report.answer.target and report.answer.recommend read it from here
from harness.numbers import finite_or_none
from harness.store import TrialRecord

#: the share of the best mean throughput the knee (smallest) size must reach
SHARE_OF_BEST = 0.90
#: the stored column the knee ranks by: the step throughput (batch / median time of forward, backward and update
#: over every post-warm-up step), the device work a batch size changes; batch preparation, which the end-to-end
#: figure adds, does not depend on the framework's batching (README, "What the numbers mean")
THROUGHPUT_COLUMN = "step_samples_per_s"


def throughput_of(row: Mapping[str, Any]) -> float | None:
    """The throughput (samples/s) of one stored trial row, or None where it was not measured."""
    return finite_or_none(row.get(THROUGHPUT_COLUMN))


def mean_sd(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample sd (None with one value); (None, None) with none."""
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


@dataclass(frozen=True)
class SizeStats:
    """One batch size of one series: mean and spread over the repeats that finished."""

    batch_size: int
    repeats_n: int
    samples_per_s_mean: float
    samples_per_s_sd: float | None  # None with one repeat
    accuracy_mean: float | None = None  # fraction in [0, 1]
    accuracy_sd: float | None = None
    j_per_sample_mean: float | None = None

    @property
    def samples_per_s_lo(self) -> float:
        """Mean minus one sd (the mean itself with one repeat)."""
        return self.samples_per_s_mean - (self.samples_per_s_sd or 0.0)

    @property
    def samples_per_s_hi(self) -> float:
        """Mean plus one sd (the mean itself with one repeat)."""
        return self.samples_per_s_mean + (self.samples_per_s_sd or 0.0)


def size_stats(by_batch: Mapping[int, Sequence[TrialRecord]]) -> list[SizeStats]:
    """Per batch size of one series (:func:`harness.cells.group`), ascending: throughput, accuracy and energy over
    the ok rows that have a throughput."""
    out = []
    for bs, rows in sorted(by_batch.items()):
        ok = [r for r in rows if r.status == "ok" and throughput_of(r) is not None]
        if not ok:
            continue
        t_mean, t_sd = mean_sd([v for v in (throughput_of(r) for r in ok) if v is not None])
        a_mean, a_sd = mean_sd([v for v in (finite_or_none(r.metrics.accuracy) for r in ok) if v is not None])
        assert t_mean is not None
        out.append(SizeStats(batch_size=bs, repeats_n=len(ok), samples_per_s_mean=t_mean, samples_per_s_sd=t_sd,
                             accuracy_mean=a_mean, accuracy_sd=a_sd,
                             j_per_sample_mean=mean_sd([v for v in (finite_or_none(r.j_per_sample) for r in ok)
                                                        if v is not None])[0]))
    return out


def knee(sizes: Sequence[SizeStats], share: float = SHARE_OF_BEST) -> tuple[int, int, int, int]:
    """(knee, best, range_lo, range_hi) batch sizes by the rule of this module's docstring.

    ``sizes`` must be non-empty and ascending. The bar is ``share`` x the best mean throughput.
    """
    best = max(sizes, key=lambda s: s.samples_per_s_mean)
    bar = share * best.samples_per_s_mean
    rec = next(s.batch_size for s in sizes if s.samples_per_s_mean >= bar)
    lo = next(s.batch_size for s in sizes if s.samples_per_s_hi >= bar)
    hi = next(s.batch_size for s in sizes if s.samples_per_s_lo >= bar or s is best)
    return rec, best.batch_size, lo, max(hi, rec)
