"""The figures of the answer's evidence: learning curves and steps to target against the batch size (B_crit).

* :func:`learning_curve_figure`: per series, held-out accuracy against training time, one line per batch size
  (each repeat drawn; the series' target as a dashed line), from the ``curve`` rows.
* :func:`critical_figure`: per series, the steps to the target against the batch size on log-log axes, with the
  perfect-scaling line (S proportional to 1/B through the smallest size), McCandlish et al.'s fit
  S = S_min (1 + B_crit / B) and the three regimes of Shallue et al. 2019 (:mod:`report.answer.critical`). A predicted
  B (the gradient noise scale B_simple, measured by :mod:`harness.noise` where it exists) is drawn beside B_crit
  when ``predicted`` gives one for the series.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from harness.cells import batch_of
from report.answer.critical import REGIME_FACTOR
from report.answer.recommend import Recommendation
from report.document.figures import FigureResult, _log2_axis, palette, recommendation_lines, themed
from report.load import StoredExperiment

_PANEL_W, _PANEL_H = 3.5, 2.6


def plain_log(axis: Any) -> None:
    """Log-scale ticks as plain numbers (0.5, 2, 100), not 5×10⁻¹, with no minor labels to collide."""
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))


def _grid(n: int) -> tuple[int, int]:
    cols = 1 if n == 1 else 2
    return math.ceil(n / cols), cols


def _batch_colours(batches: Sequence[int]) -> dict[int, str]:
    cmap = plt.get_cmap("viridis")
    return {b: cmap(0.9 * i / max(1, len(batches) - 1)) for i, b in enumerate(batches)}  # type: ignore[misc]


def learning_curve_figure(exp: StoredExperiment, recs: Sequence[Recommendation]) -> FigureResult:
    """Accuracy against training time per series, one line per batch size (every repeat), the target dashed."""
    title = "Learning curves: held-out accuracy against training time"
    series = [r for r in recs if r.series is not None]
    by_series: list[tuple[Recommendation, dict[int, list[list[dict]]]]] = []  # type: ignore[type-arg]
    for r in series:
        lines: dict[int, list[list[dict]]] = {}  # type: ignore[type-arg]
        for t in exp.trials:
            if t.settings.purpose not in (None, "sweep") or t.status not in ("ok", "diverged"):
                continue
            if t.series != r.series:
                continue
            curve = [p for p in exp.curves.get(t.trial_hash, ()) if p.get("accuracy") is not None]
            if curve:
                lines.setdefault(batch_of(t), []).append(sorted(curve, key=lambda p: p["point"]))
        if lines:
            by_series.append((r, lines))
    if not by_series:
        return FigureResult(key="learning_curves", title=title, caption="",
                            absent_reason="No learning curve: no trial recorded an evaluation during training "
                                          "(eval_points = 0, eval = false, or a store made before curves).")
    themed()
    rows, cols = _grid(len(by_series))
    fig, axes = plt.subplots(rows, cols, figsize=(_PANEL_W * cols, _PANEL_H * rows + 0.5), squeeze=False)
    batches = sorted({b for _, lines in by_series for b in lines})
    colours = _batch_colours(batches)
    for ax, (r, lines) in zip(axes.flat, by_series, strict=False):
        for b, repeats in sorted(lines.items()):
            for i, curve in enumerate(repeats):
                xs = [max(float(p["train_s"]), 1e-3) for p in curve]
                ax.plot(xs, [100 * float(p["accuracy"]) for p in curve], color=colours[b], lw=1.1,
                        alpha=0.9 if i == 0 else 0.5, marker="o", markersize=2.5)
        if r.target is not None and r.target.accuracy is not None:
            ax.axhline(100 * r.target.accuracy, color="grey", ls="--", lw=0.9)
        ax.set_xscale("log")
        plain_log(ax.xaxis)
        ax.set_title(r.name, fontsize=9)
        ax.set_xlabel("training time (s, log)")
        ax.set_ylabel("held-out accuracy (%)")
    for ax in list(axes.flat)[len(by_series):]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=colours[b], lw=1.5, label=f"batch {b}") for b in batches]
    handles.append(Line2D([], [], color="grey", ls="--", label="target"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 7), fontsize=7.5, frameon=False)
    fig.tight_layout(rect=(0, 0.1 if rows == 1 else 0.05, 1, 1))
    caption = ("Each evaluation on the held-out split during training (eval_points, plus the end), against the "
               "training seconds so far (evaluation time left out); one line per trial, the second repeat fainter. "
               "The dashed line is the series' target; where a line first crosses it is the trial's time to target "
               "(interpolated between the two points around the crossing).")
    return FigureResult(key="learning_curves", title=title, caption=caption, figure=fig)


def critical_figure(exp: StoredExperiment, recs: Sequence[Recommendation],
                    predicted: Mapping[str, float] | None = None) -> FigureResult:
    """Steps to target against batch size (log-log) per series: measured, perfect scaling, the B_crit fit.

    ``predicted``: a predicted critical batch size per series name (:attr:`Recommendation.name`), e.g. the
    gradient noise scale B_simple; drawn as a dotted line beside the fit's B_crit where given.

    One function (about 75 lines): each series' points, its perfect-scaling line, its fit and its prediction share
    one colour and one pair of log axes, and the caption says what was drawn; matplotlib's calls are most of it.
    """
    del exp  # the recommendations carry every number; kept for the figures' common signature
    title = "Steps to the target against batch size, and the critical batch size"
    usable = [r for r in recs if any(t.steps is not None for t in r.targets)]
    if not usable:
        return FigureResult(key="critical_batch", title=title, caption="",
                            absent_reason="No steps-to-target figure: no size reached the target.")
    themed()
    rows, cols = _grid(len(usable))
    fig, axes = plt.subplots(rows, cols, figsize=(_PANEL_W * cols, _PANEL_H * rows + 0.7), squeeze=False)
    colours = palette([r.name for r in usable], recommendation_lines(usable))
    notes = []
    for ax, r in zip(axes.flat, usable, strict=False):
        c = colours[r.name]
        pts = [t for t in r.targets if t.steps is not None]
        full = [t for t in pts if t.steps_measured]  # the rest: hollow, left out of the fit (report/critical.py)
        xs = [t.batch_size for t in full]
        ax.errorbar(xs, [t.steps.mean for t in full], yerr=[t.steps.sd or 0.0 for t in full],  # type: ignore[union-attr]
                    color=c, marker="o", markersize=4, capsize=2, linestyle="none", label="measured")
        part = [t for t in pts if not t.steps_measured and not t.diverged_n]
        ax.plot([t.batch_size for t in part], [t.steps.mean for t in part], color=c, marker="o",  # type: ignore[union-attr]
                markerfacecolor="none", linestyle="none", label="some repeats missed (not fitted)")
        lo_b = min(t.batch_size for t in pts)
        hi_b = max(t.batch_size for t in r.targets)
        grid = [lo_b * (hi_b / lo_b) ** (i / 60) for i in range(61)] if hi_b > lo_b else [lo_b]
        anchor = min(pts, key=lambda t: t.batch_size)
        s0 = anchor.steps.mean  # type: ignore[union-attr]
        ax.plot(grid, [s0 * anchor.batch_size / b for b in grid], color="grey", ls=":", lw=1,
                label="perfect scaling (S ∝ 1/B)")
        fit = r.critical
        if fit is not None:
            ax.plot(grid, [fit.steps(b) for b in grid], color=c, lw=1.2, label="S_min (1 + B_crit/B)")
            ax.axvline(fit.b_crit, color=c, ls="--", lw=0.9)
            ax.annotate(f"B_crit ≈ {fit.b_crit:,.0f}", (fit.b_crit, 0.95), xycoords=("data", "axes fraction"),
                        xytext=(3, 0), textcoords="offset points", fontsize=7, color=c, va="top")
            lo_edge, hi_edge = fit.b_crit / REGIME_FACTOR, fit.b_crit * REGIME_FACTOR
            ax.axvspan(min(grid[0], lo_edge), lo_edge, color="#4daf4a", alpha=0.06, lw=0)
            ax.axvspan(hi_edge, max(grid[-1], hi_edge), color="#e41a1c", alpha=0.06, lw=0)
        else:
            notes.append(f"{r.name}: no fit: {r.critical_why}")
        if predicted and r.name in predicted:
            ax.axvline(predicted[r.name], color="black", ls=":", lw=1.0)
            ax.annotate(f"B_simple ≈ {predicted[r.name]:,.0f}", (predicted[r.name], 0.82),
                        xycoords=("data", "axes fraction"), xytext=(3, 0), textcoords="offset points", fontsize=7,
                        va="top")
        ax.set_yscale("log")
        plain_log(ax.yaxis)
        _log2_axis(ax, sorted({t.batch_size for t in r.targets}))
        ax.set_xlim(grid[0] / 1.3, grid[-1] * 1.3)
        ax.set_ylabel("steps to target")
        ax.set_title(r.name, fontsize=9)
    for ax in list(axes.flat)[len(usable):]:
        ax.set_visible(False)
    handles = [Line2D([], [], color="grey", marker="o", linestyle="none", label="measured (mean ± sd)"),
               Line2D([], [], color="grey", marker="o", markerfacecolor="none", linestyle="none",
                      label="some repeats missed (not fitted)"),
               Line2D([], [], color="grey", ls=":", label="perfect scaling"),
               Line2D([], [], color="grey", lw=1.2, label="fit S_min(1+B_crit/B)"),
               Line2D([], [], color="grey", ls="--", label="B_crit"),
               Patch(color="#4daf4a", alpha=0.15, label=f"perfect scaling (B < B_crit/{REGIME_FACTOR:g})"),
               Patch(color="#e41a1c", alpha=0.15, label=f"no further gain (B > {REGIME_FACTOR:g} B_crit)")]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.16 if rows == 1 else 0.09, 1, 1))
    caption = ("Mean optimizer steps to the target over the repeats, log-log. Dotted: perfect scaling through the "
               "smallest size (doubling the batch halves the steps). Solid: McCandlish et al. 2018's "
               "S = S_min (1 + B_crit / B), least squares on 1/B; dashed: B_crit. Shaded: the regimes of Shallue et "
               f"al. 2019 by this tool's convention, green perfect scaling (B < B_crit/{REGIME_FACTOR:g}), red no "
               f"further gain (B > {REGIME_FACTOR:g} B_crit), diminishing returns between. Hollow points: sizes "
               "some repeat did not bring to the target, drawn at the mean steps of the repeats that reached it and "
               "left out of the fit (the others' steps lie beyond the budget); the fit takes the sizes every repeat "
               "brought to the target.")
    return FigureResult(key="critical_batch", title=title, caption=caption, figure=fig, notes=tuple(notes))
