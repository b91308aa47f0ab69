"""Per framework × batch size statistics over repeats, and the small fits the findings use.

Every figure, table and finding of the report reads its numbers from here, so they agree with each
other: the value shown for a cell is the mean over the cell's *ok* trials, its spread the sample
standard deviation (shown only where there are two or more repeats), and the cell's status counts
say how many trials did not finish and why.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.monitor.fields import FIELDS


@dataclass(frozen=True)
class Metric:
    """A trial column the report shows, with its label and how to print it."""

    column: str
    label: str
    unit: str
    fmt: str = ".1f"
    scale: float = 1.0  # e.g. accuracy is stored as a fraction and shown in %

    def value(self, trial: dict[str, Any]) -> float | None:
        """This metric of one trial (scaled), or None where it was not measured."""
        v = trial.get(self.column)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        return float(v) * self.scale


def _sampler(column: str) -> Metric:
    """A sampler column of the trial row, labelled from the one field table (harness/monitor/fields.py)."""
    f = next(f for f in FIELDS if f.trial_column == column)
    label = f"{f.label} peak" if f.statistic == "training-peak" else f.label
    return Metric(column, label, f.unit, f.fmt)


#: every headline figure, keyed by the name the report uses (the stored column, or a derived name); the
#: sampler's columns take their labels, units and formats from the field table
METRICS: dict[str, Metric] = {m.column if m.scale == 1.0 else f"{m.column}_pct": m for m in (
    Metric("samples_per_s", "throughput", "samples/s", ".0f"),
    Metric("step_time_ms_median", "median step time", "ms", ".2f"),
    Metric("step_time_ms_iqr", "step time IQR", "ms", ".2f"),
    _sampler("gpu_util_pct"),
    _sampler("gpu_mem_util_pct"),
    Metric("framework_peak_mib", "framework allocator peak", "MiB", ".0f"),
    _sampler("proc_gpu_mem_mib"),
    _sampler("gpu_mem_used_mib"),
    _sampler("rss_peak_mib"),
    _sampler("cpu_util_pct"),
    _sampler("power_w"),
    Metric("j_per_sample", "energy per sample", "J", ".3g"),
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
        return f"{format(self.mean, fmt)} ± {format(self.sd, fmt)}"


@dataclass(frozen=True)
class Cell:
    """One framework at one batch size: its trials' outcome and the statistics of every metric."""

    framework: str
    batch_size: int
    statuses: dict[str, int]
    stats: dict[str, Stat] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()

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


def cells(trials: Iterable[dict[str, Any]], frameworks: Sequence[str] = ()) -> list[Cell]:
    """One :class:`Cell` per (framework, batch size), ordered by framework (as given) then batch size."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for t in trials:
        groups.setdefault((t["framework"], int(t["batch_size"])), []).append(t)
    order = {fw: i for i, fw in enumerate(frameworks)}
    out = []
    for (fw, bs), group in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], len(order)), kv[0])):
        ok = [t for t in group if t.get("status") == "ok"]
        stats = {}
        for key, metric in METRICS.items():
            stat = Stat.of([v for v in (metric.value(t) for t in ok) if v is not None])
            if stat is not None:
                stats[key] = stat
        reasons = tuple(dict.fromkeys(str(t.get("reason") or "") for t in group if t.get("status") != "ok"))
        out.append(Cell(framework=fw, batch_size=bs, statuses=dict(Counter(t.get("status") or "?" for t in group)),
                        stats=stats, reasons=tuple(r for r in reasons if r)))
    return out


def has_metric(cell_list: Iterable[Cell], metric: str) -> bool:
    """Whether any cell has a measured value of ``metric``."""
    return any(c.get(metric) is not None for c in cell_list)


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
