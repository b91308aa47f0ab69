"""The statistics of a cell: one framework at one batch size (and one variant), over its repeats.

One implementation, used by every consumer: the CLI's table after ``batchscope run``, ``batchscope
compare`` and every table, figure and finding of the report. So the same cell shows the same number
everywhere. The choice: a cell's value is the **mean over its ok trials**, its spread the sample
standard deviation (None with one trial), with the median and the range kept beside them. The mean,
not the median, because a cell has few repeats (often 1-3) and the mean of 2 is the median of 2; the
sd says how far the repeats disagree, which a reader needs to judge a difference between frameworks.
Each trial's own figure is already robust: its step throughput is over the median step (see
:mod:`harness.run.timing`). Trials that did not finish are counted in the cell's status, never averaged.

A *series* is what one line of a figure or one recommendation is about: a framework under one set of
settings (the experiment's named variant, precision, denormals and gradient accumulation). :func:`group` is
the one grouping every consumer uses (the CLI's table, the report's cells, figures, studies, the thesis
comparison and the recommendation), so no view averages two settings into one cell. Its cells are keyed by the
micro-batch (what a trial's ``batch_size`` is) or by the effective batch (micro-batch x accumulation steps: the
samples per optimizer update, what accuracy depends on). A plain sweep keeps one series per framework, and its
label is the framework's name alone.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from harness.monitor.fields import FIELDS, SHOWN_COLUMNS

# Series, device_of and VARIANT_COLUMNS live in harness.series (below the stored record, which names its series);
# they are imported from here as well, as they always were
from harness.series import VARIANT_COLUMNS as VARIANT_COLUMNS
from harness.series import Series as Series
from harness.series import device_of as device_of
from harness.store.trial_record import TrialRecord

BatchKind = Literal["micro", "effective"]


@dataclass(frozen=True)
class SeriesGroup:
    """One series' rows by batch size (micro or effective, as asked), with its printable label."""

    series: Series
    label: str  # the settings that tell it from the other series given ("" when it is the only one of its kind)
    by_batch: dict[int, list[TrialRecord]]

    @property
    def framework(self) -> str:
        """The series' framework."""
        return self.series.framework

    @property
    def name(self) -> str:
        """``framework`` or ``framework [label]``: how a table or a legend names it."""
        return f"{self.framework} [{self.label}]" if self.label else self.framework

    @property
    def rows(self) -> list[TrialRecord]:
        """Every row of the series, by batch then as given."""
        return [r for _, rows in sorted(self.by_batch.items()) for r in rows]


def batch_of(trial: TrialRecord, batch: BatchKind = "micro") -> int:
    """A trial's batch size: the micro-batch it stepped with, or the samples per optimizer update."""
    if batch == "effective" and trial.effective_batch_size:
        return int(trial.effective_batch_size)
    return int(trial.settings.batch_size)  # type: ignore[arg-type]  # a trial without a batch size is no cell's


def group(trials: Iterable[Mapping[str, Any]], frameworks: Sequence[str] = (), *,
          batch: BatchKind = "micro") -> list[SeriesGroup]:
    """The one grouping: rows by series (framework x variant x precision x math mode x denormals x accumulation),
    then batch.

    Each row is a :class:`~harness.store.trial_record.TrialRecord`: a store's records are kept as they are, a plain
    dict row (a test's, a script's) is read into one as the store reads a row (:meth:`TrialRecord.of`; a column it
    lacks is None). Ordered by framework (as given in ``frameworks``, then by name), then series. A series' label
    names only the settings that vary among the rows given, so a plain sweep's labels are empty.
    """
    rows = [TrialRecord.of(t) for t in trials]
    found: dict[Series, dict[int, list[TrialRecord]]] = {}
    for t in rows:
        found.setdefault(t.series, {}).setdefault(batch_of(t, batch), []).append(t)
    varying = [len({s.settings()[i] for s in found}) > 1 for i in range(len(VARIANT_COLUMNS))]
    order = {fw: i for i, fw in enumerate(frameworks)}
    out = []
    for series in sorted(found, key=lambda s: (order.get(s.framework, len(order)), s)):
        label = ", ".join(w for w, shown in zip(series.settings(), varying, strict=True) if shown and w)
        out.append(SeriesGroup(series=series, label=label, by_batch=dict(sorted(found[series].items()))))
    return out


@dataclass(frozen=True)
class Metric:
    """A trial column shown per cell, with its label and how to print it."""

    column: str
    label: str
    unit: str
    fmt: str = ".1f"
    scale: float = 1.0  # e.g. accuracy is stored as a fraction and shown in %

    def value(self, trial: Mapping[str, Any]) -> float | None:
        """This metric of one trial (scaled), or None where it was not measured."""
        v = trial.get(self.column)
        if v is None or isinstance(v, str) or (isinstance(v, float) and math.isnan(v)):
            return None
        return float(v) * self.scale


def _sampler(column: str) -> Metric:
    """A sampler column of the trial row, labelled from the one field table (harness/monitor/fields.py)."""
    f = next(f for f in FIELDS if f.trial_column == column)
    label = f"{f.label} peak" if f.statistic == "training-peak" else f.label
    return Metric(column, label, f.unit, f.fmt)


#: every per-cell figure, keyed by the name consumers use (the stored column, or a derived name): the worker's
#: figures, then every sampler column the field table marks as shown (harness/monitor/fields.py), with its label,
#: unit and format from there
METRICS: dict[str, Metric] = {m.column if m.scale == 1.0 else f"{m.column}_pct": m for m in (
    Metric("step_samples_per_s", "step throughput", "samples/s", ".0f"),
    Metric("e2e_samples_per_s", "end-to-end throughput", "samples/s", ".0f"),
    Metric("step_time_ms_median", "median step time", "ms", ".2f"),
    Metric("step_time_ms_iqr", "step time IQR", "ms", ".2f"),
    Metric("drift_change_pct", "step-time drift (late vs early)", "%", "+.0f"),
    Metric("achieved_gflop_per_s", "achieved compute", "GFLOP/s", ".1f"),
    Metric("mfu_pct", "model FLOPs utilisation", "%", ".1f"),
    Metric("framework_peak_mib", "framework allocator peak", "MiB", ".0f"),
    *(_sampler(column) for column in SHOWN_COLUMNS),
    Metric("j_per_sample", "energy per sample", "J", ".3g"),
    Metric("steady_j_per_sample", "energy per sample, steady phase", "J", ".3g"),
    Metric("accuracy", "accuracy", "%", ".1f", scale=100.0),
)}
ACCURACY = "accuracy_pct"


@dataclass(frozen=True)
class Stat:
    """Summary of one metric over a cell's ok trials."""

    n: int
    mean: float
    sd: float | None  # None with fewer than two values
    median: float
    lo: float
    hi: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat | None:
        """The summary of ``values``, or None when there are none."""
        if not values:
            return None
        return cls(n=len(values), mean=statistics.fmean(values),
                   sd=statistics.stdev(values) if len(values) > 1 else None,
                   median=statistics.median(values), lo=min(values), hi=max(values))

    def text(self, fmt: str) -> str:
        """``mean ± sd`` (or the single value) formatted with ``fmt``."""
        if self.sd is None:
            return format(self.mean, fmt)
        return f"{format(self.mean, fmt)} ± {format(self.sd, fmt.lstrip('+'))}"


class Arithmetic(NamedTuple):
    """What a trial computed in: the precision asked for and the math mode its framework read back (``"?"``: a
    trial stored before math modes were read back). Shown as ``fp32 ieee``, ``bf16 n/a``."""

    precision: str
    math_mode_seen: str

    def __str__(self) -> str:
        return f"{self.precision} {self.math_mode_seen}"

    @property
    def read_back(self) -> bool:
        """Whether the framework read back a math mode that applies (on a GPU): not ``n/a`` or unknown."""
        return self.math_mode_seen not in ("n/a", "?")


@dataclass(frozen=True)
class Cell:
    """One framework at one batch size (one variant): its trials' outcome and every metric's statistic."""

    framework: str
    batch_size: int
    statuses: dict[str, int]
    stats: dict[str, Stat] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    variant: str = ""  # e.g. "fp32, flush" where trials of several settings are given together
    drift_flagged_n: int = 0  # ok trials whose step time drifted beyond its noise
    #: each flagged trial's change (%, + slower late), in repeat order
    drift_changes: tuple[float, ...] = ()
    cpu_denormals: tuple[str, ...] = ()  # what the CPU did with denormals, over the cell's ok trials
    #: why GPU readings of its ok trials are NULL (a window too short for NVML...): the trials' ``readings_note``
    readings_notes: tuple[str, ...] = ()
    #: the precision asked for and the math mode the framework read back (``fp32 ieee``, ``bf16 n/a``), over the
    #: cell's ok trials; "?" for a trial stored before math modes were read back
    arithmetic: tuple[Arithmetic, ...] = ()
    #: the series the cell's trials belong to (None for a cell made by hand)
    series: Series | None = None

    @property
    def line(self) -> Series:
        """The line the cell is drawn on (:attr:`Series.line`): its framework and named variant."""
        return self.series.line if self.series is not None else Series(framework=self.framework)

    @property
    def n(self) -> int:
        """Trials recorded for the cell (any status)."""
        return sum(self.statuses.values())

    @property
    def n_ok(self) -> int:
        """Trials that finished."""
        return self.statuses.get("ok", 0)

    @property
    def failed_status(self) -> str | None:
        """The most frequent non-ok status when *no* trial of the cell finished, else None."""
        if self.n_ok:
            return None
        bad = Counter({s: c for s, c in self.statuses.items() if s != "ok"})
        return bad.most_common(1)[0][0] if bad else None

    def status_text(self) -> str:
        """E.g. ``ok`` or ``1 ok, 1 oom``."""
        if set(self.statuses) == {"ok"}:
            return "ok"
        return ", ".join(f"{c} {s}" for s, c in sorted(self.statuses.items()))

    def get(self, metric: str) -> Stat | None:
        """The statistic of ``metric`` (a key of :data:`METRICS`), or None."""
        return self.stats.get(metric)

    def drift_text(self) -> str:
        """E.g. ``+85%``: the mean change of the flagged trials (an unflagged repeat's would dilute it), else empty."""
        if not self.drift_flagged_n:
            return ""
        if not self.drift_changes:
            return "yes"
        return format(sum(self.drift_changes) / len(self.drift_changes), "+.0f") + "%"

    @property
    def drift_reading(self) -> str:
        """What a drift flag most likely means, from its repeats (see :data:`DRIFT_READINGS`); "" if none.

        A change the workload makes (denormals reached after N steps, a cache outgrown) happens in every
        repeat, the same way. A change that shows in one repeat and not in another, or with opposite signs,
        came from outside the trial: other load on the machine, the CPU's clock, a noisy neighbour of a VM.
        """
        if not self.drift_flagged_n:
            return ""
        if self.n_ok < 2:
            return "single"
        if self.drift_flagged_n == self.n_ok and len({c > 0 for c in self.drift_changes}) == 1:
            return "every repeat"
        return "not repeated"


#: how :attr:`Cell.drift_reading` is worded for users
DRIFT_READINGS = {
    "every repeat": "in every repeat, the same way: the workload's own change",
    "not repeated": "not the same in every repeat: most likely the machine (other load, CPU clock), not the workload",
    "single": "one trial only: a repeat would tell the workload's change from the machine's",
}


def cells(trials: Iterable[Mapping[str, Any]], frameworks: Sequence[str] = (), *,
          batch: BatchKind = "micro") -> list[Cell]:
    """One :class:`Cell` per series and batch size (:func:`group`), ordered by framework (as given), series, batch."""
    out = []
    for g in group(trials, frameworks, batch=batch):
        for bs, rows in g.by_batch.items():
            out.append(_cell(g.series, bs, g.label, rows))
    return out


def _cell(series: Series, bs: int, variant: str, group_rows: Sequence[TrialRecord]) -> Cell:
    ok = [t for t in group_rows if t.status == "ok"]
    stats = {}
    for key, metric in METRICS.items():
        stat = Stat.of([v for v in (metric.value(t) for t in ok) if v is not None])
        if stat is not None:
            stats[key] = stat
    reasons = tuple(dict.fromkeys(str(t.reason or "") for t in group_rows if t.status != "ok"))
    return Cell(framework=series.framework, series=series, batch_size=bs,
                statuses=dict(Counter(t.status or "?" for t in group_rows)),
                stats=stats, reasons=tuple(r for r in reasons if r), variant=variant,
                drift_flagged_n=sum(1 for t in ok if t.metrics.drift_flagged),
                drift_changes=tuple(float(t.metrics.drift_change_pct)
                                    for t in sorted(ok, key=lambda t: t.settings.repeat or 0)
                                    if t.metrics.drift_flagged and t.metrics.drift_change_pct is not None),
                cpu_denormals=tuple(sorted({str(t.metrics.cpu_denormals) for t in ok if t.metrics.cpu_denormals})),
                readings_notes=tuple(dict.fromkeys(str(t.sampler["readings_note"]) for t in ok
                                                   if t.sampler.get("readings_note"))),
                arithmetic=tuple(sorted({Arithmetic(str(t.settings.precision or "?"),
                                                    str(t.metrics.math_mode_seen or "?")) for t in ok})))


def has_metric(cell_list: Iterable[Cell], metric: str) -> bool:
    """Whether any cell has a measured value of ``metric``."""
    return any(c.get(metric) is not None for c in cell_list)


#: the cell figures the command line shows (``batchscope run``'s table and ``batchscope compare``), in order
SUMMARY_METRICS = ("step_samples_per_s", "e2e_samples_per_s", "step_time_ms_median", "framework_peak_mib",
                   "rss_peak_mib", "gpu_util_pct", "accuracy_pct")
#: (key, header, format) of :func:`summary_rows`' columns, for :func:`harness.cli.table.print_table`
SUMMARY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("framework", "framework", ""), ("batch_size", "batch", "d"), ("status", "status", ""),
    ("step_samples_per_s", "step samples/s", ""), ("e2e_samples_per_s", "e2e samples/s", ""),
    ("step_time_ms_median", "step ms", ""), ("drift", "drift", ""), ("arithmetic", "precision math", ""),
    ("denormals", "denormals", ""),
    ("framework_peak_mib", "fw peak MiB", ""), ("rss_peak_mib", "RSS MiB", ""), ("gpu_util_pct", "GPU %", ""),
    ("accuracy_pct", "accuracy %", ""))
SUMMARY_NOTE = ("mean ± sd over ok repeats. step: batch / median time of forward+backward+update over every "
                "post-warm-up step; e2e: those steps' samples / their wall time incl. batch preparation; drift: "
                "late vs early median step time where it exceeds the noise, (k/n): k of n repeats flagged; a change "
                "not in every repeat is most likely the machine's, not the workload's (README, 'What the numbers "
                "mean').")


def queued_windows(trials: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Per framework, the largest window of queued steps its ok trials were timed over (issue 40:
    ``step_clock_window`` > 1, an adapter with ``queued_steps``); frameworks timed after every step are left out."""
    windows: dict[str, int] = {}
    for t in trials:
        window = t.get("step_clock_window")
        if t.get("status") == "ok" and window is not None and int(window) > 1:
            fw = str(t.get("framework"))
            windows[fw] = max(windows.get(fw, 1), int(window))
    return windows


def summary_note(trials: Iterable[Mapping[str, Any]]) -> str:
    """:data:`SUMMARY_NOTE`, and which frameworks' step times are means over windows of queued steps where any
    trial's are (:func:`queued_windows`)."""
    windows = queued_windows(trials)
    if not windows:
        return SUMMARY_NOTE
    which = ", ".join(f"{fw} (up to {w})" for fw, w in sorted(windows.items()))
    return (SUMMARY_NOTE + f" Steps queued and timed in windows: {which}; each step is given its window's mean, "
            "so that step time is a median of window means (docs/adapters.md, 'Queued steps').")


def summary_rows(trials: Iterable[Mapping[str, Any]], frameworks: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One printable row per cell: each figure as its statistic's text (``mean ± sd``, or the single value).

    ``drift`` is the mean change of a cell's flagged trials (empty otherwise), with how many of its
    repeats were flagged when it has several (``+36% (1/2)``: not repeated, most likely the machine);
    ``denormals`` what the CPU did with denormal floats in its ok trials; ``arithmetic`` the precision and the math
    mode the framework read back (``fp32 ieee``; ``fp32 n/a`` on the CPU).
    """
    out = []
    for cell in cells(trials, frameworks):
        line: dict[str, Any] = {"framework": cell.framework + (f" [{cell.variant}]" if cell.variant else ""),
                                "framework_name": cell.framework,  # the label above is for printing
                                "batch_size": cell.batch_size, "status": cell.status_text(), "n": cell.n,
                                "drift": cell.drift_text() + (f" ({cell.drift_flagged_n}/{cell.n_ok})"
                                                              if cell.drift_flagged_n and cell.n_ok > 1 else ""),
                                "denormals": "/".join(cell.cpu_denormals),
                                "arithmetic": "/".join(map(str, cell.arithmetic))}
        for key in SUMMARY_METRICS:
            stat = cell.get(key)
            line[key] = stat.text(METRICS[key].fmt) if stat is not None else None
        out.append(line)
    return out
