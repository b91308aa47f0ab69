"""The figure of B_simple along the training (issue 52): one line per series, its jackknife band, and the batch-size
schedules drawn on it: the ramp B_simple suggests (dashed) and any schedule the store trained (solid steps)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from report.answer.along import RAMP_FACTOR, NoiseAlong, is_scheduled, total_samples
from report.document.figures import FigureResult, palette, themed
from report.load import StoredExperiment


def _steps(schedule: Sequence[tuple[float, int]], total: int) -> tuple[list[float], list[int]]:
    """A schedule as a step line over samples seen: (x, batch) pairs from 0 to ``total``."""
    xs, ys = [], []
    for i, (f, b) in enumerate(schedule):
        end = schedule[i + 1][0] if i + 1 < len(schedule) else 1.0
        xs += [f * total, end * total]
        ys += [b, b]
    return xs, ys


def noise_along_figure(exp: StoredExperiment, along: Sequence[NoiseAlong]) -> FigureResult:
    """B_simple (log) over samples seen per series, ± its standard error shaded, the schedules drawn as batch sizes."""
    title = "The critical batch size along the training: B_simple over samples seen, with the schedules"
    drawn = [a for a in along if any(p.b_simple is not None for p in a.points)]
    if not drawn:
        return FigureResult(key="noise_along", title=title, caption="",
                            absent_reason="No B_simple along the training: no constant-size trial measured the "
                                          "gradient noise (set gradient_noise = N, docs/noise.md).")
    themed()
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    colours = palette([a.name for a in drawn])
    handles = []
    for a in drawn:
        c = colours[a.name]
        total = a.total_samples
        pts = [p for p in a.points if p.b_simple is not None]
        xs = [p.fraction * total for p in pts]
        ys = [float(p.b_simple) for p in pts]  # type: ignore[arg-type]
        ax.plot(xs, ys, color=c, lw=1.6, marker="o", markersize=3)
        lo = [max(y - (p.se or 0.0), y * 0.05) for y, p in zip(ys, pts, strict=True)]
        hi = [y + (p.se or 0.0) for y, p in zip(ys, pts, strict=True)]
        ax.fill_between(xs, lo, hi, color=c, alpha=0.15, lw=0)
        handles.append(Line2D([], [], color=c, lw=1.6, marker="o", markersize=3, label=f"{a.name}: B_simple ± se"))
        if a.ramp is not None:
            sx, sy = _steps(a.ramp.schedule, total)
            ax.plot(sx, sy, color=c, lw=1.2, ls="--")
            handles.append(Line2D([], [], color=c, lw=1.2, ls="--", label=f"{a.name}: ramp suggested ({a.ramp.text})"))
    trained: dict[str, tuple[list[tuple[float, int]], int]] = {}
    for t in exp.trials:
        if is_scheduled(t) and t.status == "ok" and isinstance(t.spec, dict) and total_samples(exp, t):
            fw, variant = str(t.settings.framework), t.settings.variant
            label = f"{fw} · {variant}" if variant else fw
            schedule = [(float(f), int(b)) for f, b, *_ in t.spec["batch_schedule"]]
            trained.setdefault(label, (schedule, int(total_samples(exp, t) or 0)))
    for label, (schedule, total) in trained.items():
        sx, sy = _steps(schedule, total)
        ax.plot(sx, sy, color="black", lw=1.0, alpha=0.7)
        handles.append(Line2D([], [], color="black", lw=1.0, alpha=0.7, label=f"trained: {label}"))
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("training samples seen")
    ax.set_ylabel("B_simple; batch size (log)")
    ax.legend(handles=handles, fontsize=7, loc="upper left", frameon=False)
    fig.tight_layout()
    caption = ("B_simple (docs/noise.md) at each 10 % of the training, pooled over the points within ±10 % of every "
               "repeat and constant size of the series, the band ± its jackknife standard error over the measured "
               f"gradient groups. Dashed: the ramp it suggests (the next measured size where B_simple passes "
               f"{RAMP_FACTOR:g} × the current one; docs/critical_batch.md, 'Along the training'); solid black: a "
               "schedule this store trained.")
    return FigureResult(key="noise_along", title=title, caption=caption, figure=fig)
