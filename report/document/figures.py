"""The report's figures: one metric (or a few related ones) against the batch size, per framework.

Conventions every figure follows, so a reader learns them once: the batch axis is log₂ with the
measured sizes as ticks; one colour per framework, the same in every figure; the line is the mean over
the repeats that finished, the band ± one standard deviation (only where there are repeats), the
small dots the individual trials; a cross at the bottom of the axis marks a size with no finished
trial (its status is written beside it: oom, skipped, ...); hollow diamonds are the published Ohio
State figures (Yin 2020, GTX 1060), drawn only on the plots they match.

A figure whose data is absent is not drawn: :class:`FigureResult` then carries the sentence that
says why, and the PDF prints that sentence instead of an empty axis.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # the report never needs a display; must precede pyplot

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from harness.cells import (
    ACCURACY,
    METRICS,
    Cell,
    Series,
    batch_of,
    has_metric,
)
from harness.monitor.fields import FIELDS, Shown, shown_in
from report.answer.recommend import Recommendation
from report.answer.studies import line_label
from report.document.context import had_gpu
from report.load import StoredExperiment

#: fixed framework colours (colour-blind safe), so a framework looks the same in every figure
FRAMEWORK_COLOURS = {"pytorch": "#D55E00", "tensorflow": "#E69F00", "mxnet": "#0072B2", "jax": "#009E73"}
_EXTRA_COLOURS = ["#CC79A7", "#56B4E9", "#F0E442", "#000000",
                  # a study draws one line per framework x variant: matplotlib's tab20 after the safe ones
                  "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
                  "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#bcbd22"]
REFERENCE_LABEL = "Yin 2020 (GTX 1060), published"
PANEL_W_IN, PANEL_H_IN = 3.6, 3.0


@dataclass(frozen=True)
class FigureResult:
    """A figure of the report, or the reason it is absent."""

    key: str
    title: str
    caption: str
    figure: Figure | None = None
    absent_reason: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def themed() -> Any:
    """seaborn, its report theme applied: called just before a figure is drawn, so a report that draws none (an
    empty or refused store) never imports it, nor the scipy.stats it imports (1.5 s of a 3.4 s start-up)."""
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper")
    return sns


def _shade(colour: str, i: int, n: int) -> str:
    """``colour`` darker (i = 0) to lighter (i = n - 1): one framework's variants in one hue family."""
    from matplotlib.colors import to_hex, to_rgb

    t = -0.45 + 0.9 * i / (n - 1) if n > 1 else 0.0  # < 0 towards black, > 0 towards white
    r, g, b = (c * (1 + t) if t < 0 else c + (1 - c) * t for c in to_rgb(colour))
    return to_hex((r, g, b))


def _colours(entries: Sequence[tuple[Series | None, str | None]]) -> list[str]:
    """One colour per entry (its series, and the name whose fixed colour it takes when it is not shaded): a series of
    a known framework with settings (a study's variant, a precision...) takes its framework's hue, one shade per
    distinct setting; any other entry its name's fixed colour, else the next of a colour-blind-safe list."""
    extra = iter(_EXTRA_COLOURS)
    shaded = [s is not None and s.framework in FRAMEWORK_COLOURS and any(s.settings()) for s, _ in entries]
    settings = list(dict.fromkeys(s.settings() for (s, _), sh in zip(entries, shaded, strict=True) if sh and s))
    out = []
    for (series, own), sh in zip(entries, shaded, strict=True):
        if sh and series is not None:
            colour = FRAMEWORK_COLOURS[series.framework]
            out.append(_shade(colour, settings.index(series.settings()), len(settings)) if len(settings) > 1
                       else colour)
        else:
            out.append(FRAMEWORK_COLOURS.get(own or "") or next(extra, "#777777"))
    return out


def line_palette(lines: Sequence[Series]) -> dict[Series, str]:
    """Colour per line (:attr:`harness.cells.Series.line`): a framework's own line its fixed colour (others from a
    colour-blind-safe list); a known framework's variants its hue, one shade each."""
    return dict(zip(lines, _colours([(line, None if any(line.settings()) else line.framework) for line in lines]),
                    strict=True))


def palette(names: Sequence[str], lines: Mapping[str, Series] | None = None) -> dict[str, str]:
    """Colour per line name: a framework's fixed colour (others from a colour-blind-safe list); a name ``lines``
    maps to a series of a known framework with settings (a study's variant, a precision...) takes its framework's
    hue, one shade per distinct setting."""
    return dict(zip(names, _colours([((lines or {}).get(name), name) for name in names]), strict=True))


def recommendation_lines(recs: Sequence[Recommendation]) -> dict[str, Series]:
    """Each recommendation's line name and its series (for :func:`palette`)."""
    return {r.name: r.series for r in recs if r.series is not None}


def trial_frame(exp: StoredExperiment) -> pd.DataFrame:
    """One row per finished trial with every metric (accuracy in %); ``line`` names its line in the legend."""
    rows = []
    for t in exp.ok_trials:
        row: dict[str, Any] = {"framework": t.settings.framework, "line": line_label(t.series.line),
                               "batch_size": batch_of(t), "repeat": t.settings.repeat}
        for key, metric in METRICS.items():
            row[key] = metric.value(t)
        rows.append(row)
    return pd.DataFrame(rows, columns=["framework", "line", "batch_size", "repeat", *METRICS])


def _log2_axis(ax: Any, batch_sizes: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(list(batch_sizes)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(b) for b in batch_sizes], rotation=45 if len(batch_sizes) > 7 else 0)
    ax.set_xlabel("batch size (log₂ scale)")
    ax.grid(True, which="major", alpha=0.3)


def _draw_metric(ax: Any, frame: pd.DataFrame, metric: str, colours: dict[Series, str], cell_list: Sequence[Cell],
                 batch_sizes: Sequence[int]) -> None:
    named = {line_label(line): colour for line, colour in colours.items()}  # the frame's ``line`` words
    hue_order = list(named)
    data = frame.dropna(subset=[metric])
    repeats = data.groupby(["line", "batch_size"]).size().max() if len(data) else 0
    import seaborn as sns  # imported by metric_figure's themed() already

    sns.lineplot(data=data, x="batch_size", y=metric, hue="line", hue_order=hue_order, palette=named,
                 marker="o", errorbar="sd" if repeats > 1 else None, err_style="band", ax=ax, legend=False)
    if repeats > 1:
        sns.scatterplot(data=data, x="batch_size", y=metric, hue="line", hue_order=hue_order,
                        palette=named, s=12, alpha=0.55, ax=ax, legend=False, linewidth=0)
    # sizes with no finished trial: a cross at the foot of the axis, labelled with the status
    transform = ax.get_xaxis_transform()
    for c in cell_list:
        status = c.failed_status
        if status and c.line in colours:
            ax.plot([c.batch_size], [0.04], marker="X", markersize=9, color=colours[c.line],
                    transform=transform, linestyle="none", clip_on=False, zorder=5)
            ax.annotate(status, (c.batch_size, 0.04), xycoords=transform, xytext=(0, 7),
                        textcoords="offset points", ha="center", fontsize=7, color=colours[c.line])
    m = METRICS[metric]
    ax.set_ylabel(f"{m.label} ({m.unit})")
    ax.set_title(m.label, fontsize=10)
    _log2_axis(ax, batch_sizes)


def _draw_reference(ax: Any, reference: Sequence[dict[str, Any]], colours: dict[Series, str]) -> int:
    """The published points, each beside its framework's own line (never beside a study's variant: the thesis
    measured one setting)."""
    drawn = 0
    for r in reference:
        if (line := Series(framework=r["framework"])) in colours:
            ax.plot([r["batch_size"]], [r["value"]], marker="D", markersize=6, markerfacecolor="none",
                    markeredgecolor=colours[line], markeredgewidth=1.4, linestyle="none", zorder=4)
            drawn += 1
    return drawn


def _legend(fig: Figure, colours: dict[Series, str], failed: bool, reference: bool, spread: bool) -> None:
    handles = [Line2D([], [], color=c, marker="o", label=line_label(line)) for line, c in colours.items()]
    if spread:
        handles.append(Line2D([], [], color="grey", lw=6, alpha=0.3, label="± 1 sd over repeats"))
    if failed:
        handles.append(Line2D([], [], color="grey", marker="X", linestyle="none", label="no finished trial"))
    if reference:
        handles.append(Line2D([], [], color="grey", marker="D", markerfacecolor="none", linestyle="none",
                              label=REFERENCE_LABEL))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)


def _reference_for(reference: Sequence[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """Published points matching one of our metrics.

    ``reference`` is :func:`report.answer.thesis.load_reference`'s rows, already in our metric names and units
    (GPU memory in MiB, accuracy in %), so the points are drawn as given: converting here again would
    make two sources of truth for the same unit question.
    """
    wanted = {"gpu_util_pct": "gpu_util_pct", "proc_gpu_mem_peak_mib": "gpu_mem_mib",
              "gpu_mem_used_peak_mib": "gpu_mem_mib",
              ACCURACY: "accuracy_pct"}.get(metric)
    return [r for r in reference if wanted and r.get("metric") == wanted and r.get("value") is not None]


def metric_figure(exp: StoredExperiment, frame: pd.DataFrame, cell_list: Sequence[Cell], *, key: str, title: str,
                  caption: str, metrics: Sequence[str], absent: dict[str, str],
                  reference: Sequence[dict[str, Any]] = (), log_y: bool = False) -> FigureResult:
    """A figure with one panel per metric that has data; ``absent`` gives each metric's why-not sentence."""
    present = [m for m in metrics if has_metric(cell_list, m)]
    missing = [absent[m] for m in metrics if m not in present]
    if not present:
        return FigureResult(key=key, title=title, caption=caption, absent_reason=" ".join(dict.fromkeys(missing)))
    colours = line_palette(exp.line_series)
    batch_sizes = exp.batch_sizes
    themed()
    fig, axes = plt.subplots(1, len(present), figsize=(PANEL_W_IN * max(len(present), 2) if len(present) > 1
                                                         else 7.0, PANEL_H_IN + 0.9), squeeze=False)
    any_ref = any_spread = False
    for ax, metric in zip(axes[0], present, strict=True):
        _draw_metric(ax, frame, metric, colours, cell_list, batch_sizes)
        # only at sizes this run measured: points elsewhere would stretch the axis past our data
        refs = [r for r in _reference_for(reference, metric) if r["batch_size"] in batch_sizes]
        any_ref |= _draw_reference(ax, refs, colours) > 0
        any_spread |= any((c.get(metric) is not None and c.get(metric).n > 1) for c in cell_list)  # type: ignore[union-attr]
        if log_y:
            ax.set_yscale("log")
        elif ax.get_ylim()[0] > 0:
            # a zero baseline, so differences are not exaggerated; headroom so a flat line near the
            # top is not drawn on the frame
            ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
    failed = any(c.failed_status for c in cell_list)
    _legend(fig, colours, failed, any_ref, any_spread)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    notes = tuple(dict.fromkeys(missing))
    return FigureResult(key=key, title=title, caption=caption, figure=fig, notes=notes)


def _sampler_absent(place: Shown, gpu_absent: Callable[[str], str]) -> dict[str, str]:
    """Why each sampler column shown in ``place`` may be missing, worded from the field table."""
    out = {}
    for f in FIELDS:
        if f.trial_column and place in f.shown:
            out[f.trial_column] = (gpu_absent(f"{f.label} figure") if f.source == "nvml" else
                                   f"No {f.label}: the sampler did not record it for these trials.")
    return out


def build_figures(exp: StoredExperiment, cell_list: Sequence[Cell], reference: Sequence[dict[str, Any]] = (),
                  ) -> list[FigureResult]:
    """Every figure of one experiment, in report order (open matplotlib figures: close them when saved).

    Long on purpose: every figure in report order; each block draws one figure or says why it is absent.
    """
    frame = trial_frame(exp)
    gpu = had_gpu(exp)
    no_gpu = "the run had no GPU." if not gpu else ""
    sampler_off = ("the sampler recorded none for these trials (sampler off, or the metric is not "
                   "supported by this GPU/driver).")
    spec = exp.spec
    data = spec.get("data") or {}

    def gpu_absent(what: str) -> str:
        return f"No {what}: {no_gpu or sampler_off}"

    figures = [
        metric_figure(exp, frame, cell_list, key="throughput", title="Throughput vs batch size",
                      caption="Left: step throughput (batch / median time of forward, backward and update over "
                              "every post-warm-up step). Right: end-to-end throughput (those steps' samples / "
                              "their wall time, batch preparation included). Log scale.",
                      metrics=["step_samples_per_s", "e2e_samples_per_s"],
                      absent={"step_samples_per_s": "No trial finished, so there is no throughput to plot.",
                              "e2e_samples_per_s": "No end-to-end throughput was recorded."}, log_y=True),
        metric_figure(exp, frame, cell_list, key="gpu_util", title="GPU utilisation vs batch size",
                      caption="NVML utilisation, mean over the timed phase: the share of time any kernel ran, "
                              "not SM occupancy (and, where shown, the memory controller's).",
                      metrics=list(shown_in("gpu_util figure")), absent=_sampler_absent("gpu_util figure", gpu_absent),
                      reference=reference),
        metric_figure(exp, frame, cell_list, key="gpu_memory", title="GPU memory vs batch size, in each view",
                      caption="Left to right where measured: the framework allocator's peak, then the sampler's "
                              "views (NVML: the whole device's used memory, the worker tree's GPU memory, which "
                              "includes the cache and CUDA context). Published points are the thesis's GPU memory.",
                      metrics=["framework_peak_mib", *shown_in("gpu_memory figure")],
                      absent={"framework_peak_mib": "The framework allocator reported no peak (e.g. PyTorch "
                                                    "keeps no CPU allocator statistics).",
                              **_sampler_absent("gpu_memory figure", gpu_absent)},
                      reference=reference if gpu else ()),
    ]
    if not spec.get("epochs"):
        acc_absent = ("No accuracy figure: the experiment trained no full epochs (epochs = 0), so the "
                      "accuracy after N epochs was not measured.")
    elif data and not data.get("accuracy_meaningful", True):
        acc_absent = (f"No accuracy figure: the data set ({data.get('name')}) is synthetic with random "
                      "labels, so its accuracy means nothing.")
    else:
        acc_absent = "No accuracy figure: no finished trial recorded an accuracy."
    acc_reference = reference if data.get("name") == "cifar10" and spec.get("epochs") == 10 else ()
    acc_caption = (f"Held-out accuracy after {spec.get('epochs', '?')} epoch(s) on {data.get('name', '?')}." +
                   (" Published points: TensorFlow after 10 epochs on CIFAR-10." if acc_reference else
                    " The published TensorFlow accuracy (CIFAR-10, 10 epochs) is not drawn: this run's data "
                    "set or epochs differ."))
    if not (data and not data.get("accuracy_meaningful", True)) and spec.get("epochs"):
        figures.append(metric_figure(exp, frame, cell_list, key="accuracy", title="Accuracy vs batch size",
                                     caption=acc_caption, metrics=[ACCURACY], absent={ACCURACY: acc_absent},
                                     reference=acc_reference))
    else:
        figures.append(FigureResult(key="accuracy", title="Accuracy vs batch size", caption=acc_caption,
                                    absent_reason=acc_absent))
    figures += [
        metric_figure(exp, frame, cell_list, key="energy", title="Energy per sample vs batch size",
                      caption="GPU energy over the timed phase (NVML energy counter) divided by the samples "
                              "trained in it.",
                      metrics=["j_per_sample"], absent={"j_per_sample": gpu_absent("energy figure")}),
        metric_figure(exp, frame, cell_list, key="host", title="CPU and host memory vs batch size",
                      caption="The host's view of the worker tree over the trial: CPU utilisation over the timed "
                              "phase (100% = one core) and the worker's peak resident memory, where measured.",
                      metrics=list(shown_in("host figure")), absent=_sampler_absent("host figure", gpu_absent)),
    ]
    return figures


def _ring(ax: Any, x: float, y: float, colour: str) -> None:
    ax.plot([x], [y], marker="o", markersize=15, markerfacecolor="none", markeredgecolor=colour,
            markeredgewidth=2.0, linestyle="none", zorder=6)


def recommendation_figure(exp: StoredExperiment, recs: Sequence[Recommendation]) -> FigureResult:
    """The first page's answer: time to the target against the batch size per series, the recommendation ringed,
    sizes that missed the target or diverged marked; beside it the throughput share (the knee, second column).

    One function (about 70 lines) because the two panels share their series colours, batch axis, legend and caption,
    which depend on whether the left panel is drawn at all; matplotlib's calls are most of the length."""
    title = "The answer: training time to the target accuracy, and throughput"
    usable = [r for r in recs if r.sizes or r.targets]
    if not usable:
        return FigureResult(key="recommendation", title=title, caption="",
                            absent_reason="No recommendation: no sweep trial finished.")
    themed()
    timed = [r for r in usable if any(t.train_s is not None for t in r.targets)]
    share = usable[0].share_of_best
    colours = palette([r.name for r in usable], recommendation_lines(usable))
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(7.2 if timed else 5.0, 2.9), squeeze=False)
    batches = sorted({s.batch_size for r in usable for s in r.sizes} | {t.batch_size for r in usable
                                                                           for t in r.targets})
    if timed:
        left = axes[0][0]
        top = max(t.train_s.mean + (t.train_s.sd or 0.0) for r in timed for t in r.targets if t.train_s is not None)
        for r in timed:
            pts = [t for t in r.targets if t.train_s is not None and t.eligible]
            left.errorbar([t.batch_size for t in pts], [t.train_s.mean for t in pts],  # type: ignore[union-attr]
                          yerr=[t.train_s.sd or 0.0 for t in pts], color=colours[r.name],  # type: ignore[union-attr]
                          marker="o", markersize=4, capsize=2, lw=1.2)
            missed = [t.batch_size for t in r.targets if not t.eligible]
            left.plot(missed, [top * 1.25] * len(missed), color=colours[r.name], marker="x", linestyle="none",
                      markersize=6)
            rt = r.target_at(r.batch_size)
            if rt is not None and rt.train_s is not None:
                _ring(left, rt.batch_size, rt.train_s.mean, colours[r.name])
        left.set_yscale("log")
        left.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        left.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if str(f"{v:g}")[0] in "25" else ""))
        left.set_ylabel("training time to target (s)")
        _log2_axis(left, batches)
        right = axes[0][1]
    else:
        right = axes[0][0]
    for r in usable:
        best = r.at(r.best_batch)
        if best is None:
            continue
        xs = [s.batch_size for s in r.sizes]
        ys = [100 * s.samples_per_s_mean / best.samples_per_s_mean for s in r.sizes]
        err = [100 * (s.samples_per_s_sd or 0.0) / best.samples_per_s_mean for s in r.sizes]
        right.errorbar(xs, ys, yerr=err, color=colours[r.name], marker="o", markersize=4, capsize=2, lw=1.2)
        if r.knee_batch in xs:
            right.plot([r.knee_batch], [ys[xs.index(r.knee_batch)]], marker="s", markersize=9,  # type: ignore[arg-type]
                       markerfacecolor="none", markeredgecolor=colours[r.name], linestyle="none")
    right.axhline(100 * share, color="grey", ls="--", lw=1)
    right.annotate(f"{share:.0%} of the best", (0.02, 100 * share), xycoords=("axes fraction", "data"),
                   xytext=(0, 3), textcoords="offset points", fontsize=7, color="grey")
    right.set_ylabel("throughput, % of the series' best")
    right.set_ylim(0, 118)
    _log2_axis(right, batches)
    handles = [Line2D([], [], color=c, marker="o", label=name) for name, c in colours.items()]
    handles.append(Line2D([], [], color="grey", marker="o", markersize=10, markerfacecolor="none",
                          linestyle="none", label="recommended"))
    if timed:
        handles.append(Line2D([], [], color="grey", marker="x", linestyle="none", label="missed / diverged"))
    handles.append(Line2D([], [], color="grey", marker="s", markersize=8, markerfacecolor="none",
                          linestyle="none", label="throughput knee"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=7.5, frameon=False)
    fig.tight_layout(rect=(0, 0.16 if len(handles) > 4 else 0.12, 1, 1))
    caption = (("Left: mean training time to the target accuracy over the repeats (± 1 sd, log scale; the target "
                "per series is in the table); the recommended size (ringed) is the lowest point; a cross at the top "
                "marks a size that missed the target in some repeat or diverged, never recommended. " if timed else
                "No size has a time to target (no accuracy measured, or none reached it). ")
               + f"{'Right' if timed else 'The figure'}: mean throughput as a share of each series' fastest size; the "
               f"knee (square) is the smallest size at or above the dashed {share:.0%} line: where larger batches stop "
               "buying speed, which says nothing about whether they learn.")
    return FigureResult(key="recommendation", title=title, caption=caption, figure=fig)


def save(result: FigureResult, directory: str | Path, stem: str) -> list[Path]:
    """Write a figure as PNG (for the PDF) and SVG (for reuse); returns the paths, closes the figure."""
    if result.figure is None:
        return []
    paths = []
    for ext, dpi in (("png", 200), ("svg", "figure")):  # the PDF places the PNG at 200 dpi
        path = Path(directory) / f"{stem}.{ext}"
        result.figure.savefig(path, format=ext, bbox_inches="tight", dpi=dpi)
        paths.append(path)
    plt.close(result.figure)
    return paths
