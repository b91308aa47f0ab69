"""The critical batch size: McCandlish et al. 2018's S = S_min (1 + B_crit / B), fitted to the measured steps.

S is the optimizer steps to reach the target at batch size B (:mod:`report.answer.target`). The model is linear in
1/B: S = S_min + (S_min · B_crit) · (1/B), so an ordinary least-squares line through the points (1/B, S) gives S_min
(its intercept) and B_crit (slope / intercept); at least :data:`MIN_POINTS` sizes are needed.

**Which sizes count** is one definition, :attr:`report.answer.target.SizeTarget.steps_measured`, read by
:func:`fit_sizes` for ``recommend``'s summary and the report, and by the critical-batch study's choice of a rate per
size (:func:`report.answer.critical_batch.choose`): a size counts when every finished repeat reached the target and
none diverged, with the mean steps over its repeats (:data:`BASIS`). A size some repeat missed is left out and named
with how many repeats reached (``batch 1024 (1 of 3 repeats reached)``): the missing repeats' steps lie beyond the
budget, so the mean of the others would be biased low exactly at the sizes that miss (and B_crit high).

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
from report.answer.target import SizeTarget

#: fewer sizes than this give a line through every point, not a fit
MIN_POINTS = 3
#: B below B_crit / REGIME_FACTOR: perfect scaling; above B_crit x REGIME_FACTOR: no further gain
REGIME_FACTOR = 4.0


#: which steps the fit takes, said wherever its figure is printed
BASIS = "every repeat of each reached the target (mean steps over its repeats)"


def left_out_text(left_out: Sequence[tuple[int, str]]) -> str:
    """E.g. ``batch 512 (not reached in 6 epochs), batch 1024 (1 of 3 repeats reached)``; "" for none."""
    return ", ".join(f"batch {b} ({why})" for b, why in left_out)


@dataclass(frozen=True)
class CriticalFit:
    """S = s_min (1 + b_crit / B) through ``n`` sizes (batch, mean steps to target); ``left_out``: the sizes measured
    but not counted, each with why (:func:`fit_sizes`)."""

    s_min: float
    b_crit: float
    n: int
    r2: float | None
    points: tuple[tuple[int, float], ...]
    left_out: tuple[tuple[int, str], ...] = ()

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

    def sizes_text(self) -> str:
        """E.g. ``over 3 sizes, every repeat of each reached the target (...); left out: batch 1024 (1 of 3 repeats
        reached)``."""
        left = f"; left out: {left_out_text(self.left_out)}" if self.left_out else ""
        return f"over {self.n} sizes, {BASIS}{left}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return {"b_crit": self.b_crit, "s_min": self.s_min, "n": self.n, "r2": self.r2,
                "points": [[b, s] for b, s in self.points], "basis": BASIS,
                "left_out": [{"batch_size": b, "why": why} for b, why in self.left_out]}


def fit_text(found: CriticalFit | None, why: str) -> str:
    """The fit in words, the same in ``recommend``'s summary and the report: ``B_crit ≈ 93, S_min ≈ 20 steps: S =
    S_min (1 + B_crit / B) over 3 sizes, every repeat of each ...; left out: ...`` or ``no fit: why``."""
    if found is None:
        return f"no fit: {why}"
    return (f"B_crit ≈ {found.b_crit:,.0f}, S_min ≈ {found.s_min:,.0f} steps: "
            f"S = S_min (1 + B_crit / B) {found.sizes_text()}")


def fit_sizes(targets: Sequence[SizeTarget]) -> tuple[CriticalFit | None, str]:
    """The fit over the sizes whose steps are measured (:attr:`SizeTarget.steps_measured`), the others left out with
    why: what ``recommend``'s summary and the report print for a series."""
    points = [(t.batch_size, t.steps.mean) for t in targets if t.steps_measured and t.steps is not None]
    return fit(points, [(t.batch_size, t.fit_gap()) for t in targets if not t.steps_measured])


def fit(points: Sequence[tuple[int, float]], left_out: Sequence[tuple[int, str]] = (),
        ) -> tuple[CriticalFit | None, str]:
    """(the fit, "") through (batch, mean steps to target), or (None, why there is none); ``left_out``: the sizes
    not counted, each with why, carried by the fit and said in the why."""
    pts = sorted((int(b), float(s)) for b, s in points if b > 0 and s > 0)
    left = tuple(sorted(left_out))
    said = f" (left out: {left_out_text(left)})" if left else ""
    if len(pts) < MIN_POINTS:
        return None, (f"{len(pts)} batch size(s) reached the target in every repeat; the fit needs at least "
                      f"{MIN_POINTS}{said}")
    line = linear_fit([(1.0 / b, s) for b, s in pts])
    if line is None:
        return None, f"the sizes do not differ{said}"
    if line.intercept <= 0:
        return None, ("the steps fall at least as fast as 1/B over every size measured (perfect scaling "
                      f"throughout): B_crit is above the largest size, add larger sizes{said}")
    if line.slope <= 0:
        return None, ("the steps do not fall as the batch grows (no further gain from the smallest size): "
                      f"B_crit is below the smallest size, add smaller sizes{said}")
    return CriticalFit(s_min=line.intercept, b_crit=line.slope / line.intercept, n=len(pts), r2=line.r2,
                       points=tuple(pts), left_out=left), ""
