"""The figure of step time over the training, so drift is seen and not only reported.

One panel per batch size (the smallest, a middle one and the largest that finished), one line per
framework: the rolling median of the post-warm-up step times of the trial's first repeat, against the
step number. A flat line is a trial whose throughput figures describe all of it; a line that steps up
(denormal floats on the CPU: docs/denormals.md) is a trial whose early steps would have misled.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from harness.cells import Cell, batch_of
from report.answer.studies import line_label
from report.document.figures import PANEL_H_IN, PANEL_W_IN, FigureResult, line_palette, themed
from report.load import StoredExperiment

#: panels at most (a portrait page fits three)
MAX_PANELS = 3
#: fewest post-warm-up steps worth drawing: with fewer there is no "over the training"
MIN_STEPS = 20


def rolling_median(step_ms: Sequence[float]) -> list[float]:
    """Rolling median over ~2% of the steps (at least 5): one slow step does not draw a spike."""
    window = max(5, len(step_ms) // 50)
    return list(pd.Series(step_ms, dtype=float).rolling(window, min_periods=1, center=True).median())


def _batches(exp: StoredExperiment) -> list[int]:
    drawn = sorted({batch_of(t) for t in exp.ok_trials if len(exp.step_times.get(t.trial_hash, ())) >= MIN_STEPS})
    if len(drawn) <= MAX_PANELS:
        return drawn
    return [drawn[0], drawn[len(drawn) // 2], drawn[-1]]


def drift_figure(exp: StoredExperiment, cell_list: Sequence[Cell]) -> FigureResult:
    """Rolling median step time over the training per framework, for up to three batch sizes."""
    title = "Step time over the training"
    flagged = [f"{line_label(c.line)} at batch {c.batch_size} ({c.drift_text()}, {c.drift_flagged_n} of {c.n_ok} "
               f"trials: {c.drift_reading})" for c in cell_list if c.drift_flagged_n]
    caption = ("Rolling median of the post-warm-up step times (first repeat of each cell), log scale. "
               + ("Drift flagged: " + "; ".join(flagged) + "." if flagged else "No trial was flagged for drift."))
    batches = _batches(exp)
    if not batches:
        return FigureResult(key="drift", title=title, caption=caption,
                            absent_reason=f"No step-time figure: no finished trial has {MIN_STEPS} or more "
                                          "post-warm-up steps.")
    colours = line_palette(exp.line_series)
    themed()
    fig, axes = plt.subplots(1, len(batches), figsize=(PANEL_W_IN * max(len(batches), 2), PANEL_H_IN + 0.6),
                             squeeze=False)
    for ax, bs in zip(axes[0], batches, strict=True):
        for line, colour in colours.items():
            trials = sorted((t for t in exp.ok_trials if t.series.line == line and batch_of(t) == bs
                             and t.trial_hash in exp.step_times), key=lambda t: int(t.settings.repeat or 0))
            if trials:
                ys = rolling_median(exp.step_times[trials[0].trial_hash])
                ax.plot(range(len(ys)), ys, color=colour, label=line_label(line), linewidth=1.2)
        ax.set_yscale("log")
        ax.set_title(f"batch {bs}", fontsize=9)
        ax.set_xlabel("post-warm-up step")
        ax.set_ylabel("step time (ms)")
    axes[0][0].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return FigureResult(key="drift", title=title, caption=caption, figure=fig)
