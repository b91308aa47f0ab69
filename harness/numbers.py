"""One rule for a number read from outside (a stored row, a sampler reading, a computed float): finite, or None;
and the one least-squares line (:func:`linear_fit`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def finite_or_none(value: Any) -> float | None:
    """``value`` as a finite float, else None: NULL, text that is not a number, a bool, NaN and inf all give None
    (JSON and SQLite have no NaN or inf, and a reading that is not a number is no reading)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


@dataclass(frozen=True)
class LinearFit:
    """y = intercept + slope · x by least squares, over ``n`` points (the one least-squares line of the project: the
    report's findings and critical batch size, and the max-batch search's fallback when its two-point line is flat)."""

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
