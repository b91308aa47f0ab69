"""Aggregation of a trial's samples per phase: a pure class, fed with samples, tested on replayed streams.

Conventions (docs/sampler.md explains why):

* **A sample stands for the interval that ends at it**, ``(t_prev, t]``: NVML's utilisation and power
  and the host probe's CPU % are averages over the past, so a reading describes what came before it.
  The first sample stands for one nominal interval before it.
* **Time-weighted statistics per window** (a phase, or the whole trial): each finite value weighs the
  part of its interval inside the window, so a phase shorter than the sampling interval still gets the
  value of the sample that spans it. A phase the worker enters more than once (training resumes after each
  evaluation point: ``timed``, ``eval``, ``timed``...) is one window over all its spans, so the timed
  phase's aggregates describe the timed steps only, never an evaluation between them. Mean, min, max and a
  time-weighted p95; NaN values (unsupported readings, gaps) weigh nothing, and ``covered_s`` says how much
  of the window had a value.
* **Energy from the cumulative counter** (mJ): each pair of consecutive samples gives the energy of
  its interval, spread evenly over it, so a window's energy is the counter interpolated at its edges.
  A counter that goes backwards wrapped (``counter_modulus``) unless the wrapped delta is not
  plausible (more than ``max_power_w``), which is a reset (driver reload): that interval, and any
  interval without counter readings, falls back to integrating the power reading, and the window's
  ``energy_method`` says so.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeGuard

from harness.monitor.fields import COUNTER_FIELDS, FIELDS, SERIES

ENERGY_FIELD = COUNTER_FIELDS[0]  # the cumulative energy counter, differenced rather than averaged
COUNTER_MODULUS = 2**64  # nvmlDeviceGetTotalEnergyConsumption is an unsigned 64-bit count of mJ
MAX_POWER_W = 5000.0  # above any single GPU's draw: a bigger counter step is a reset, not energy
BEFORE_FIRST_PHASE = "spawn"  # samples before the worker announced its first phase (interpreter start)
TRAINING_PHASES = ("warmup", "timed", "train")


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class SeriesStats:
    """Time-weighted statistics of one series over one window."""

    mean: float
    min: float
    max: float
    p95: float
    covered_s: float


@dataclass(frozen=True)
class WindowSummary:
    """One phase (or the whole trial): its bounds, samples, series statistics and energy."""

    name: str
    start_s: float
    end_s: float
    samples_n: int
    series: dict[str, SeriesStats] = field(default_factory=dict)
    energy_j: float | None = None
    energy_method: str | None = None  # "counter", "power integration", or a mix with seconds of each
    energy_covered_s: float = 0.0
    spans_n: int = 1  # how many times the phase ran (start_s is its first start, end_s its last end)
    active_s: float | None = None  # the summed length of its spans; None: one span, end_s - start_s

    @property
    def duration_s(self) -> float:
        """How long the phase ran (its spans together, without what ran between them)."""
        return self.active_s if self.active_s is not None else self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (stored in the trial's monitor_json)."""
        out = asdict(self)
        out["duration_s"] = self.duration_s
        return out


def weighted_p95(pairs: Sequence[tuple[float, float]]) -> float:
    """The value below which 95 % of the time was spent; ``pairs`` are (value, weight_s)."""
    total = sum(w for _, w in pairs)
    acc = 0.0
    ordered = sorted(pairs)
    for value, w in ordered:
        acc += w
        if acc >= 0.95 * total - 1e-12:
            return value
    return ordered[-1][0]


class Aggregator:
    """Collects samples (in time order) and summarises them per phase and over the whole trial.

    Args:
        interval_s: The nominal sampling interval (how far back the first sample reaches).
        series: Which sample fields to summarise.
        counter_modulus: Where the energy counter wraps.
        max_power_w: The largest believable mean power between two samples (see module doc).
    """

    def __init__(self, interval_s: float, series: Sequence[str] = SERIES,
                 counter_modulus: int = COUNTER_MODULUS, max_power_w: float = MAX_POWER_W) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = interval_s
        self.series = tuple(series)
        self.counter_modulus = counter_modulus
        self.max_power_w = max_power_w
        self._t: list[float] = []
        self._rows: list[Mapping[str, Any]] = []
        self._energy_cache: list[tuple[float, float, float, str]] | None = None

    def add(self, t_s: float, values: Mapping[str, Any]) -> None:
        """One sample taken at ``t_s`` (any clock, as long as phases use the same one)."""
        if self._t and t_s < self._t[-1]:
            raise ValueError(f"samples must come in time order: {t_s} after {self._t[-1]}")
        self._t.append(float(t_s))
        self._rows.append(values)
        self._energy_cache = None  # a new sample changes the intervals

    def extend(self, samples: Iterable[tuple[float, Mapping[str, Any]]]) -> None:
        """Several samples, in time order."""
        for t, values in samples:
            self.add(t, values)

    def __len__(self) -> int:
        return len(self._t)

    # -------------------------------------------------------------- intervals
    def _spans(self) -> list[tuple[float, float]]:
        """The interval each sample stands for."""
        spans = []
        prev = self._t[0] - self.interval_s if self._t else 0.0
        for t in self._t:
            spans.append((prev, t))
            prev = t
        return spans

    def _energy_intervals(self) -> list[tuple[float, float, float, str]]:
        """(start, end, energy_mj, method) of each interval between two samples whose energy is known."""
        out = []
        for i in range(1, len(self._t)):
            t0, t1 = self._t[i - 1], self._t[i]
            dt = t1 - t0
            if dt <= 0:
                continue
            c0, c1 = self._rows[i - 1].get(ENERGY_FIELD), self._rows[i].get(ENERGY_FIELD)
            if _finite(c0) and _finite(c1):
                delta = c1 - c0
                if delta < 0:
                    delta += self.counter_modulus  # wrapped past the counter's top
                if delta <= self.max_power_w * 1000.0 * dt:  # else a reset: not energy, fall back
                    out.append((t0, t1, float(delta), "counter"))
                    continue
            power = self._rows[i].get("power_w")
            if _finite(power):
                out.append((t0, t1, float(power) * dt * 1000.0, "power"))
        return out

    # -------------------------------------------------------------- windows
    def window(self, name: str, start_s: float, end_s: float, include_end: bool = False) -> WindowSummary:
        """Statistics and energy over ``[start_s, end_s)``; ``include_end`` counts a sample taken at
        ``end_s`` as inside (for the last window of a trial, which ends at its last sample)."""
        return self.window_over(name, [(start_s, end_s)], end_s if include_end else None)

    def window_over(self, name: str, spans: Sequence[tuple[float, float]],
                    include_at: float | None = None) -> WindowSummary:
        """Statistics and energy over the union of the disjoint ``spans`` (each ``[start, end)``, in time order):
        a phase that ran more than once. A sample taken exactly at ``include_at`` counts as inside."""
        if not spans:
            raise ValueError(f"window {name!r} has no span")
        intervals = self._spans()
        pairs: dict[str, list[tuple[float, float]]] = {key: [] for key in self.series}
        for start_s, end_s in spans:
            # only samples whose interval (t_prev, t] can overlap the span: t > start and t_prev < end
            first = bisect.bisect_right(self._t, start_s)
            last = min(bisect.bisect_left(self._t, end_s) + 1, len(self._t))
            for (lo, hi), row in zip(intervals[first:last], self._rows[first:last], strict=True):
                w = min(hi, end_s) - max(lo, start_s)
                if w <= 0:
                    continue
                for key in self.series:
                    value = row.get(key)
                    if _finite(value):
                        pairs[key].append((float(value), w))
        series: dict[str, SeriesStats] = {}
        for key, found in pairs.items():
            if found:
                covered = sum(w for _, w in found)
                series[key] = SeriesStats(mean=sum(v * w for v, w in found) / covered,
                                          min=min(v for v, _ in found), max=max(v for v, _ in found),
                                          p95=weighted_p95(found), covered_s=covered)
        energy_j, method_text, covered_s = self._energy_over(spans)
        n = sum(1 for t in self._t if any(lo <= t < hi for lo, hi in spans) or t == include_at)
        return WindowSummary(name=name, start_s=spans[0][0], end_s=spans[-1][1], samples_n=n, series=series,
                             energy_j=energy_j, energy_method=method_text, energy_covered_s=covered_s,
                             spans_n=len(spans),
                             active_s=sum(hi - lo for lo, hi in spans) if len(spans) > 1 else None)

    def _energy_over(self, spans: Sequence[tuple[float, float]]) -> tuple[float | None, str | None, float]:
        """(energy in J or None, how it was measured, seconds it covers) over the spans."""
        energy_mj = 0.0
        seconds = {"counter": 0.0, "power": 0.0}
        if self._energy_cache is None:
            self._energy_cache = self._energy_intervals()
        for lo, hi, e_mj, method in self._energy_cache:
            for start_s, end_s in spans:
                overlap = min(hi, end_s) - max(lo, start_s)
                if overlap > 0:
                    energy_mj += e_mj * overlap / (hi - lo)  # constant power within an interval
                    seconds[method] += overlap
        covered_s = seconds["counter"] + seconds["power"]
        if covered_s <= 0:
            return None, None, covered_s
        if seconds["power"] == 0:
            method_text = "counter"
        elif seconds["counter"] == 0:
            method_text = "power integration"
        else:
            method_text = (f"counter ({seconds['counter']:.3g} s) + "
                           f"power integration ({seconds['power']:.3g} s)")
        return energy_mj / 1000.0, method_text, covered_s

    def summarise(self, phases: Sequence[tuple[str, float]],
                  end_s: float | None = None) -> dict[str, WindowSummary]:
        """One summary per phase (a phase runs until the next starts; the last until ``end_s``, by
        default the last sample; a phase announced more than once is one window over all its spans), one for
        samples before the first phase, and one named ``trial``."""
        if not self._t:
            return {}
        end = max([end_s if end_s is not None else self._t[-1], *(t for _, t in phases)])
        start = self._t[0] - self.interval_s
        out: dict[str, WindowSummary] = {}
        ordered = sorted(phases, key=lambda p: p[1])
        if not ordered or ordered[0][1] > start:
            first = ordered[0][1] if ordered else end
            if first > start and any(t < first for t in self._t):
                out[BEFORE_FIRST_PHASE] = self.window(BEFORE_FIRST_PHASE, start, first)
        spans: dict[str, list[tuple[float, float]]] = {}
        for i, (name, t0) in enumerate(ordered):
            t1 = ordered[i + 1][1] if i + 1 < len(ordered) else end
            spans.setdefault(name, []).append((t0, t1))
        for name, phase_spans in spans.items():
            out[name] = self.window_over(name, phase_spans, end if phase_spans[-1][1] == end else None)
        out["trial"] = self.window("trial", min([start, *(t for _, t in ordered)]), end, include_end=True)
        return out


def trial_aggregates(windows: Mapping[str, WindowSummary]) -> dict[str, Any]:
    """The trial row's sampler columns: timed-phase means and energy, training-phase peaks.

    Peaks (device memory, worker-tree GPU memory, RSS) are taken over the training phases (warm-up,
    timed, rest of the epochs), the span the worker's own allocator peak covers, so evaluation at its
    own batch size does not mask the batch size under test; a trial that failed before a sample covered
    its training reports the peak over everything it did.
    """
    timed = windows.get("timed")
    training = [windows[p] for p in TRAINING_PHASES if p in windows]
    everything = [windows["trial"]] if "trial" in windows else []

    def mean(key: str) -> float | None:
        stats = timed.series.get(key) if timed else None
        return stats.mean if stats else None

    def peak(key: str) -> float | None:
        for group in (training, everything):
            values = [w.series[key].max for w in group if key in w.series]
            if values:
                return max(values)
        return None

    out: dict[str, Any] = {}
    for f in FIELDS:  # the statistic of each field comes from the one field table
        if f.trial_column is None:
            continue
        if f.statistic == "timed-mean":
            out[f.trial_column] = mean(f.name)
        elif f.statistic == "training-peak":
            out[f.trial_column] = peak(f.name)
        elif f.statistic == "timed-counter":
            out[f.trial_column] = timed.energy_j if timed else None
    out["timed_samples_n"] = timed.samples_n if timed else None
    return out
