"""The small least-squares fits the findings and the critical batch size use.

The statistics per framework × batch size over repeats (mean over the cell's *ok* trials ± sample sd) are
:mod:`harness.cells`', which every figure, table and finding of the report, the CLI and ``compare`` import from
there, so they agree with each other.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LinearFit", "linear_fit"]


@dataclass(frozen=True)
class LinearFit:
    """y = intercept + slope · x by least squares, over ``n`` points."""

    slope: float
    intercept: float
    r2: float | None  # None when y does not vary
    n: int
    x_lo: float
    x_hi: float


def linear_fit(points: Sequence[tuple[float, float]]) -> LinearFit | None:
    """Least-squares line through ``points``; None with fewer than two distinct x values."""
    xs = [float(x) for x, _ in points]
    ys = [float(y) for _, y in points]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    return LinearFit(slope=slope, intercept=intercept, r2=1 - ss_res / ss_tot if ss_tot > 0 else None,
                     n=len(xs), x_lo=min(xs), x_hi=max(xs))
