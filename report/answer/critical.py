"""The critical batch size: McCandlish et al. 2018's S = S_min (1 + B_crit / B), fitted to the measured steps.

S is the optimizer steps to reach the target at batch size B (:mod:`report.answer.target`, mean over the repeats that
reached it). The model is linear in 1/B: S = S_min + (S_min · B_crit) · (1/B), so an ordinary least-squares line
through the points (1/B, S) gives S_min (its intercept) and B_crit (slope / intercept). Every size that some repeat
brought to the target counts, with the steps of the repeats that did (a repeat that missed it has no steps to
count); a size with a diverged repeat does not; at least :data:`MIN_POINTS` sizes are needed.

The three regimes of Shallue et al. 2019 follow from the curve's slope on log-log axes,
d log S / d log B = -B_crit / (B + B_crit): **perfect scaling** (doubling the batch halves the steps) while the
slope is steeper than -0.8, i.e. B < B_crit / 4; **no further gain** once it is flatter than -0.2, B > 4 B_crit;
**diminishing returns** between. The thresholds are this tool's convention, stated wherever they are drawn.

The gradient noise scale B_simple (McCandlish's prediction of B_crit from gradients measured at two batch sizes)
is drawn beside the fit when one is given (:func:`report.document.figures.critical_figure`'s ``predicted``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.numbers import linear_fit

#: fewer sizes than this give a line through every point, not a fit
MIN_POINTS = 3
#: B below B_crit / REGIME_FACTOR: perfect scaling; above B_crit x REGIME_FACTOR: no further gain
REGIME_FACTOR = 4.0


@dataclass(frozen=True)
class CriticalFit:
    """S = s_min (1 + b_crit / B) through ``n`` sizes (batch, mean steps to target)."""

    s_min: float
    b_crit: float
    n: int
    r2: float | None
    points: tuple[tuple[int, float], ...]

    def steps(self, batch: float) -> float:
        """The fitted steps to target at ``batch``."""
        return self.s_min * (1.0 + self.b_crit / batch)

    def regime(self, batch: float) -> str:
        """``perfect scaling``, ``diminishing returns`` or ``no further gain`` at ``batch`` (module docstring)."""
        if batch < self.b_crit / REGIME_FACTOR:
            return "perfect scaling"
        if batch > self.b_crit * REGIME_FACTOR:
            return "no further gain"
        return "diminishing returns"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return {"b_crit": self.b_crit, "s_min": self.s_min, "n": self.n, "r2": self.r2,
                "points": [[b, s] for b, s in self.points]}


def fit(points: Sequence[tuple[int, float]]) -> tuple[CriticalFit | None, str]:
    """(the fit, "") through (batch, mean steps to target), or (None, why there is none)."""
    pts = sorted((int(b), float(s)) for b, s in points if b > 0 and s > 0)
    if len(pts) < MIN_POINTS:
        return None, (f"{len(pts)} batch size(s) reached the target; the fit needs at least {MIN_POINTS}")
    line = linear_fit([(1.0 / b, s) for b, s in pts])
    if line is None:
        return None, "the sizes do not differ"
    if line.intercept <= 0:
        return None, ("the steps fall at least as fast as 1/B over every size measured (perfect scaling "
                      "throughout): B_crit is above the largest size, add larger sizes")
    if line.slope <= 0:
        return None, ("the steps do not fall as the batch grows (no further gain from the smallest size): "
                      "B_crit is below the smallest size, add smaller sizes")
    return CriticalFit(s_min=line.intercept, b_crit=line.slope / line.intercept, n=len(pts), r2=line.r2,
                       points=tuple(pts)), ""
