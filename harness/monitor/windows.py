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
  ``energy_method`` says so. The counter is preferred: on Ampere and newer GPUs (but GA100) NVML's power reading is
  a mean over the past second, so power x time over a short window counts the second before it (docs/sampler.md).
* **Readings only where they can be read**: NVML's utilisation is a mean over its last 1/6-1 s and (Ampere and
  newer) its power one over the last second, so a window shorter than that, or with too few samples, describes
  what came before it as much as itself. Such a window's GPU utilisation, power and energy are withheld (None)
  and its ``readings_note`` says why (:func:`readings_note`; :data:`MIN_WINDOW_S`, :data:`MIN_WINDOW_INTERVALS`,
  :data:`MIN_WINDOW_SAMPLES`).
* **Peaks before the first evaluation**: an evaluation at its own batch size leaves the framework's memory pool
  grown, so device and process memory read after it describe the evaluation too. With evaluation points, the
  training peaks are taken from the samples taken during training before the first evaluation began
  (:data:`PRE_EVAL`), and the evaluation's own peaks are kept apart.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harness.monitor.fields import COUNTER_FIELDS, FIELDS, SERIES
from harness.numbers import finite_or_none

ENERGY_FIELD = COUNTER_FIELDS[0]  # the cumulative energy counter, differenced rather than averaged
COUNTER_MODULUS = 2**64  # nvmlDeviceGetTotalEnergyConsumption is an unsigned 64-bit count of mJ
MAX_POWER_W = 5000.0  # above any single GPU's draw: a bigger counter step is a reset, not energy
BEFORE_FIRST_PHASE = "spawn"  # samples before the worker announced its first phase (interpreter start)
TRAINING_PHASES = ("warmup", "timed", "train")
EVAL_PHASE = "eval"
#: the short phase of training steps after the final evaluation, off the headline clock, that measures utilisation,
#: power and energy per sample at a steady state (harness/run/worker/steady.py)
STEADY_PHASE = "steady"
#: announced by the worker when the steady steps end, so that the steady window ends with them
FINISH_PHASE = "finish"
#: the training phases' spans before the first evaluation began (the window the training memory peaks come from)
PRE_EVAL = "training_before_eval"
#: a window whose GPU utilisation, power and energy are published is at least this long (NVML's utilisation is a
#: mean over its last 1/6-1 s; Ampere and newer GPUs' power a mean over the last second) ...
MIN_WINDOW_S = 1.0
#: ... and at least this many sampling intervals long ...
MIN_WINDOW_INTERVALS = 5
#: ... and holds at least this many samples
MIN_WINDOW_SAMPLES = 3
#: the readings the window rule withholds: NVML's averaged ones and the energy (instant readings, memory, are kept)
AVERAGED_NVML = ("gpu_util_pct", "gpu_mem_util_pct", "power_w")


def min_window_s(interval_s: float) -> float:
    """The shortest window whose NVML averages are published at sampling interval ``interval_s``."""
    return max(MIN_WINDOW_S, MIN_WINDOW_INTERVALS * interval_s)


def readings_note(duration_s: float, samples_n: int, interval_s: float) -> str | None:
    """Why a window of ``duration_s`` holding ``samples_n`` samples is too short for NVML's averaged readings
    (GPU utilisation, power, and the energy drawn from them), or None where it is long enough."""
    need_s = min_window_s(interval_s)
    if duration_s >= need_s and samples_n >= MIN_WINDOW_SAMPLES:
        return None
    return (f"{duration_s * 1000:.0f} ms with {samples_n} sample(s) at {interval_s * 1000:g} ms: shorter than NVML "
            f"can read (needs >= {need_s:g} s and >= {MIN_WINDOW_SAMPLES} samples; NVML averages utilisation over "
            "1/6-1 s and, on Ampere and newer, power over 1 s)")


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
    #: why its GPU utilisation, power and energy are not published (too short for NVML: :func:`readings_note`)
    readings_note: str | None = None

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
            if c0 is not None and c1 is not None and None not in (finite_or_none(c0), finite_or_none(c1)):
                delta = c1 - c0  # as stored: a counter near 2^64 (mJ) loses its low digits as a float
                if delta < 0:
                    delta += self.counter_modulus  # wrapped past the counter's top
                if delta <= self.max_power_w * 1000.0 * dt:  # else a reset: not energy, fall back
                    out.append((t0, t1, float(delta), "counter"))
                    continue
            power = self._rows[i].get("power_w")
            if (watts := finite_or_none(power)) is not None:
                out.append((t0, t1, watts * dt * 1000.0, "power"))
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
                    if (value := finite_or_none(row.get(key))) is not None:
                        pairs[key].append((value, w))
        series: dict[str, SeriesStats] = {}
        for key, found in pairs.items():
            if found:
                covered = sum(w for _, w in found)
                series[key] = SeriesStats(mean=sum(v * w for v, w in found) / covered,
                                          min=min(v for v, _ in found), max=max(v for v, _ in found),
                                          p95=weighted_p95(found), covered_s=covered)
        energy_j, method_text, covered_s = self._energy_over(spans)
        n = sum(1 for t in self._t if any(lo <= t < hi for lo, hi in spans) or t == include_at)
        duration_s = sum(hi - lo for lo, hi in spans)
        return WindowSummary(name=name, start_s=spans[0][0], end_s=spans[-1][1], samples_n=n, series=series,
                             energy_j=energy_j, energy_method=method_text, energy_covered_s=covered_s,
                             spans_n=len(spans), active_s=duration_s if len(spans) > 1 else None,
                             readings_note=readings_note(duration_s, n, self.interval_s))

    def instant_max(self, spans: Sequence[tuple[float, float]], key: str) -> float | None:
        """The highest ``key`` among the samples *taken* inside ``spans`` (each ``[start, end)``): for readings of
        a moment (memory in use), where a sample taken after a span ended describes what came after it."""
        values = [v for t, row in zip(self._t, self._rows, strict=True)
                  if any(lo <= t < hi for lo, hi in spans) and (v := finite_or_none(row.get(key))) is not None]
        return max(values) if values else None

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
        pre_eval = self._pre_eval(spans)
        if pre_eval is not None:
            out[PRE_EVAL] = pre_eval
        out["trial"] = self.window("trial", min([start, *(t for _, t in ordered)]), end, include_end=True)
        return out


    def _pre_eval(self, spans: Mapping[str, Sequence[tuple[float, float]]]) -> WindowSummary | None:
        """The training before the first evaluation (None without evaluation or training), its series' maxima
        taken over the samples taken inside it (:meth:`instant_max`) where there are any."""
        if EVAL_PHASE not in spans:
            return None
        first_eval = spans[EVAL_PHASE][0][0]
        clipped = sorted((lo, min(hi, first_eval)) for p in TRAINING_PHASES for lo, hi in spans.get(p, ())
                         if lo < first_eval)
        if not clipped:
            return None
        window = self.window_over(PRE_EVAL, clipped)
        series = dict(window.series)
        for key, stats in window.series.items():
            peak = self.instant_max(clipped, key)
            if peak is not None:
                series[key] = SeriesStats(mean=stats.mean, min=stats.min, max=peak, p95=stats.p95,
                                          covered_s=stats.covered_s)
        return replace(window, series=series)


def trial_aggregates(windows: Mapping[str, WindowSummary]) -> dict[str, Any]:
    """The trial row's sampler columns: timed-phase means and energy, training-phase peaks, the steady phase's.

    Peaks (device memory, worker-tree GPU memory, RSS) are taken over the training phases (warm-up, timed, rest
    of the epochs) before the first evaluation (:data:`PRE_EVAL`), the span the worker's own allocator peak
    covers, so evaluation at its own batch size does not mask the batch size under test (its own peaks are
    ``*_eval_peak_mib``); a trial that failed before a sample covered its training reports the peak over
    everything it did. The timed phase's GPU utilisation, power and energy are None where the window is too short
    for NVML (``readings_note`` says why). Its mean power is its counter energy over the time the counter covers,
    where it does (NVML's power reading lags by up to a second on recent GPUs; see the module doc).
    """
    timed = windows.get("timed")
    training = [windows[PRE_EVAL]] if PRE_EVAL in windows else [windows[p] for p in TRAINING_PHASES if p in windows]
    everything = [windows["trial"]] if "trial" in windows else []

    def peak(key: str, groups: Sequence[Sequence[WindowSummary]]) -> float | None:
        for group in groups:
            values = [w.series[key].max for w in group if key in w.series]
            if values:
                return max(values)
        return None

    out: dict[str, Any] = {}
    for f in FIELDS:  # the statistic of each field comes from the one field table
        if f.trial_column is None:
            continue
        if f.statistic == "timed-mean":
            out[f.trial_column] = window_mean(timed, f.name)
        elif f.statistic == "training-peak":
            out[f.trial_column] = peak(f.name, (training, everything))
        elif f.statistic == "timed-counter":
            out[f.trial_column] = window_energy(timed)
    out["power_w"] = window_power(timed)
    out["power_method"] = _power_method(timed)
    evaluation = [windows[EVAL_PHASE]] if EVAL_PHASE in windows else []
    out["gpu_mem_eval_peak_mib"] = peak("gpu_mem_used_mib", (evaluation,))
    out["proc_gpu_mem_eval_peak_mib"] = peak("proc_gpu_mem_mib", (evaluation,))
    out["timed_samples_n"] = timed.samples_n if timed else None
    steady = windows.get(STEADY_PHASE)
    out.update(steady_gpu_util_pct=window_mean(steady, "gpu_util_pct"), steady_power_w=window_power(steady),
               steady_energy_j=window_energy(steady), steady_window_s=steady.duration_s if steady else None)
    notes = [f"{w.name} phase: {w.readings_note}" for w in (timed, steady) if w is not None and _withheld(w)]
    out["readings_note"] = "; ".join(notes) or None
    return out


def _withheld(window: WindowSummary) -> bool:
    """Whether the window rule withholds a GPU reading this window has (a window without any is not noted)."""
    return window.readings_note is not None and (window.energy_j is not None
                                                 or any(k in window.series for k in AVERAGED_NVML))


def window_mean(window: WindowSummary | None, key: str) -> float | None:
    """The window's mean of ``key``; None where it has none, or where it is one of NVML's averaged readings and the
    window is too short for them (:func:`readings_note`)."""
    stats = window.series.get(key) if window else None
    if stats is None or window is None or (key in AVERAGED_NVML and window.readings_note):
        return None
    return stats.mean


def window_energy(window: WindowSummary | None) -> float | None:
    """The window's energy in J; None where unmeasured or the window is too short for NVML."""
    if window is None or window.readings_note:
        return None
    return window.energy_j


def window_power(window: WindowSummary | None) -> float | None:
    """The window's mean power in W: its counter energy over the seconds the counter covers where the counter
    alone measured it, else the mean of NVML's power readings; None where the window is too short for NVML."""
    if window is None or window.readings_note:
        return None
    if window.energy_method == "counter" and window.energy_j is not None and window.energy_covered_s > 0:
        return window.energy_j / window.energy_covered_s
    return window_mean(window, "power_w")


def _power_method(window: WindowSummary | None) -> str | None:
    if window_power(window) is None:
        return None
    assert window is not None
    return ("energy counter / time" if window.energy_method == "counter" and window.energy_j is not None
            else "mean of NVML power readings")
