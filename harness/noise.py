"""The gradient noise scale B_simple (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training"), a
*prediction* of the critical batch size from gradients, to set beside the B_crit fitted to steps-to-target.

For a loss whose per-example gradients have mean G and covariance Σ, the squared norm of a batch-B gradient
has expectation ``E|G_B|² = |G|² + tr(Σ)/B``. Measuring it at two batch sizes B_small < B_big gives unbiased
estimates of both terms (McCandlish et al., appendix A.1)::

    |G|²  ≈ (B_big·X_big − B_small·X_small) / (B_big − B_small)
    tr(Σ) ≈ (X_small − X_big) / (1/B_small − 1/B_big)

where X is a measured squared gradient norm. Each is averaged over many measurements *before* the ratio B_simple =
tr(Σ)/|G|² is taken (the ratio of averages, not the average of ratios, which a noisy |G|² near zero would wreck).
Nothing here imports a framework: the worker measures (:mod:`harness.run.worker.noise`), the store keeps one
``gradient_noise`` row per evaluation point, and the report reads them through :func:`estimate_from_rows`.

How the worker measures (what :data:`BIG_FACTOR` means): a big batch is :data:`BIG_FACTOR` small batches of the
trial's batch size (at most :data:`B_SMALL_MAX`), each drawn independently from the training set, and its gradient
is their mean, as in McCandlish et al.'s data-parallel measurement (B_small per device, B_big the all-reduced
batch). Every small gradient gives one X_small, every group one X_big; no batch is larger than the trial's own, so
the measurement never needs more memory than the training. Batches are drawn without replacement from the *finite*
training set, so what is estimated is the noise of the training's own batches: tr(Σ) is scaled by (n − B)/(n − 1),
which matters only where a batch is a large share of the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from harness.numbers import finite_or_none

#: a big batch is this many small batches, its gradient their mean
BIG_FACTOR = 4
#: the small batch is the trial's batch size up to this: the measurement's cost per point (BIG_FACTOR x
#: ``gradient_noise`` gradients of B_small samples) stays bounded at large batch sizes, and never needs more memory
#: than the training (docs/noise.md, "What it costs")
B_SMALL_MAX = 64


@dataclass(frozen=True)
class NoiseRecord:
    """One evaluation point's measurement: the worker's result item and the store's ``gradient_noise`` row.

    ``x_small_mean``: the mean squared norm of ``small_n`` gradients of ``b_small`` samples; ``x_big_mean``: of
    ``big_n`` gradients of ``b_big`` samples; ``noise_s``: what the measurement took (outside the training clock).
    """

    point: int
    step: int
    samples_seen: int
    b_small: int
    b_big: int
    x_small_mean: float | None  # None: not finite (a diverged training's gradient)
    x_big_mean: float | None
    small_n: int
    big_n: int
    noise_s: float
    #: each group's (mean of its BIG_FACTOR small squared norms, its big squared norm) (issue 52; None: not finite):
    #: the units the point's uncertainty is read from (:func:`pooled`); None in a store made before it. Stored as
    #: one JSON list in the ``gradient_noise`` column ``groups_json``, written and parsed by the store only
    groups: tuple[tuple[float | None, float | None], ...] | None = field(default=None,
                                                                        metadata={"column": "groups_json"})

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the protocol's ``result.gradient_noise`` items; the groups as a list of pairs)."""
        out = asdict(self)
        out["groups"] = None if self.groups is None else [list(g) for g in self.groups]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NoiseRecord:
        """From plain data (a protocol message's item; its groups as lists).

        Raises:
            ValueError: groups that are not pairs of numbers (:func:`groups_from_data`).
        """
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("groups") is not None:
            values["groups"] = groups_from_data(values["groups"])
        return cls(**values)


def groups_from_data(data: object) -> tuple[tuple[float | None, float | None], ...]:
    """A noise row's groups from plain data (a list of [small, big] pairs: the wire's, or a stored ``groups_json``
    parsed by the store); a figure that is not a finite number reads as None (a unit left out, :func:`pooled`).

    Raises:
        ValueError: data that is not a list of pairs.
    """
    if not isinstance(data, list | tuple):
        raise ValueError(f"a noise row's groups are a list, not {type(data).__name__}")
    out = []
    for pair in data:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError(f"a noise row's group is a [small, big] pair, not {pair!r}")
        out.append((finite_or_none(pair[0]), finite_or_none(pair[1])))
    return tuple(out)


@dataclass(frozen=True)
class NoiseScale:
    """The two estimated terms and their ratio; ``b_simple`` is None where |G|² is not positive (the noise of
    the measurement swamps the mean gradient: more batches, or a larger B_big, are needed)."""

    g2: float  # |G|², the squared norm of the true (full-data) gradient
    trace: float  # tr(Σ), the per-example gradient covariance's trace
    b_simple: float | None


def terms(b_small: float, x_small: float, b_big: float, x_big: float) -> tuple[float, float]:
    """(|G|², tr(Σ)) from mean squared gradient norms at two batch sizes (each estimate unbiased)."""
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < b_small < b_big, got b_small={b_small}, b_big={b_big}")
    g2 = (b_big * x_big - b_small * x_small) / (b_big - b_small)
    trace = (x_small - x_big) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


def ratio(g2: float, trace: float) -> NoiseScale:
    """B_simple = tr(Σ)/|G|², None where |G|² <= 0 or either term is not finite."""
    ok = math.isfinite(g2) and math.isfinite(trace) and g2 > 0
    return NoiseScale(g2=g2, trace=trace, b_simple=trace / g2 if ok else None)


def noise_scale(b_small: float, x_small: float, b_big: float, x_big: float) -> NoiseScale:
    """B_simple from mean squared gradient norms at two batch sizes."""
    return ratio(*terms(b_small, x_small, b_big, x_big))


@dataclass(frozen=True)
class NoiseEstimate:
    """B_simple from a set of stored measurements (one series' trials, typically), with what it rests on."""

    b_simple: float | None  # None where the averaged |G|² is not positive
    g2: float
    trace: float
    points_n: int  # evaluation points (rows) averaged
    small_n: int  # small-batch gradients measured, over every row
    big_n: int
    trials_n: int
    step_min: int
    step_max: int
    samples_min: int  # training samples seen at the first and last point used
    samples_max: int
    b_small: tuple[int, ...]  # the small and big batch sizes the rows measured at
    b_big: tuple[int, ...]
    noise_s: float  # measurement seconds, summed

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``--json``)."""
        out = asdict(self)
        out["b_small"], out["b_big"] = list(self.b_small), list(self.b_big)
        return out


def estimate_from_rows(rows: Iterable[Mapping[str, Any]], min_samples_seen: int = 0) -> NoiseEstimate | None:
    """B_simple from stored ``gradient_noise`` rows (dicts with :class:`NoiseRecord`'s fields and ``trial_hash``).

    Each row gives unbiased estimates of |G|² and tr(Σ) (linear in its X means, whatever its batch sizes); they
    are averaged over the rows, weighted by the row's big-batch count, and only then divided. Rows whose X means
    are missing (NULL) are left out. Returns None when no row is usable.

    The noise scale grows as the loss falls (McCandlish et al., section 3; on mnist5k's first epoch it went from
    about 9 to 80, docs/noise.md), and early points, whose gradients are large, dominate both averaged terms. So
    the estimate describes the stretch of training its rows cover: ``min_samples_seen`` keeps the points taken
    after that many training samples (the same share of training for every batch size of a sweep), e.g. the
    later half; ``samples_min``..``samples_max`` say what was used.
    """
    usable = [r for r in rows if finite_or_none(r.get("x_small_mean")) is not None
              and finite_or_none(r.get("x_big_mean")) is not None
              and int(r.get("b_small") or 0) > 0 and int(r.get("b_big") or 0) > int(r.get("b_small") or 0)
              and int(r.get("samples_seen") or 0) >= min_samples_seen]
    if not usable:
        return None
    weight_sum = g2_sum = trace_sum = 0.0
    for r in usable:
        g2, trace = terms(int(r["b_small"]), float(r["x_small_mean"]), int(r["b_big"]), float(r["x_big_mean"]))
        weight = max(int(r.get("big_n") or 1), 1)
        weight_sum += weight
        g2_sum += weight * g2
        trace_sum += weight * trace
    scale = ratio(g2_sum / weight_sum, trace_sum / weight_sum)
    steps = [int(r.get("step") or 0) for r in usable]
    samples = [int(r.get("samples_seen") or 0) for r in usable]
    return NoiseEstimate(
        b_simple=scale.b_simple, g2=scale.g2, trace=scale.trace, points_n=len(usable),
        small_n=sum(int(r.get("small_n") or 0) for r in usable), big_n=sum(int(r.get("big_n") or 0) for r in usable),
        trials_n=len({r.get("trial_hash") for r in usable}), step_min=min(steps), step_max=max(steps),
        samples_min=min(samples), samples_max=max(samples),
        b_small=tuple(sorted({int(r["b_small"]) for r in usable})),
        b_big=tuple(sorted({int(r["b_big"]) for r in usable})),
        noise_s=sum(float(r.get("noise_s") or 0.0) for r in usable))


def estimates_by_group(rows: Iterable[Mapping[str, Any]], group_of: Callable[[str], str | None],
                       min_samples_seen: int = 0) -> dict[str, NoiseEstimate]:
    """One estimate per group of trials (a series, for the report's ``predicted`` B beside B_crit): ``group_of``
    maps a row's ``trial_hash`` to its group's name, or None to leave the row out. Groups without usable rows are
    absent."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        name = group_of(str(r.get("trial_hash")))
        if name is not None:
            grouped.setdefault(name, []).append(r)
    out = {}
    for name, mine in grouped.items():
        est = estimate_from_rows(mine, min_samples_seen)
        if est is not None:
            out[name] = est
    return out


def format_estimate(est: NoiseEstimate | None) -> str:
    """One line for ``recommend`` and the report: the prediction and what it rests on."""
    if est is None:
        return "gradient noise scale: not measured (set gradient_noise = N in the experiment, docs/noise.md)"
    sizes = f"B_small {_sizes(est.b_small)}, B_big {_sizes(est.b_big)}"
    basis = (f"{est.points_n} point(s) of {est.trials_n} trial(s), steps {est.step_min}-{est.step_max} "
             f"({est.samples_min:,}-{est.samples_max:,} samples seen), "
             f"{est.small_n} + {est.big_n} gradients, {sizes}")
    if est.b_simple is None:
        return (f"gradient noise scale: not estimable (|G|² came out {est.g2:.3g} <= 0: the measurement's noise "
                f"swamps the mean gradient; raise gradient_noise) [{basis}]")
    return f"gradient noise scale B_simple ≈ {est.b_simple:,.0f} (predicted critical batch) [{basis}]"


def _sizes(values: tuple[int, ...]) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


# ------------------------------------------------------------------------------------------- along the training
#: B_simple along the training (issue 52) is read at every :data:`ALONG_GRID` of the training (10 %, 20 %, ... of its
#: samples) and smoothed over the points within :data:`SMOOTH_WINDOW` of the training on either side: the estimate at
#: 40 % pools every point of the series from 30 % to 50 %, of every repeat and batch size, before its ratio is taken
#: (the sizes of a sweep evaluate at different sample counts, so a grid is where they meet)
SMOOTH_WINDOW = 0.1
ALONG_GRID = 0.1


@dataclass(frozen=True)
class AlongPoint:
    """B_simple at one place in the training (issue 52): ``fraction`` of the training's samples, pooled over the
    series' points within :data:`SMOOTH_WINDOW` of it. ``se``: its jackknife standard error over the measurement's
    units (each group of BIG_FACTOR gradients; a row where its groups were not stored), None where fewer than two
    units or a left-out unit leaves |G|² not positive."""

    fraction: float
    samples_seen: int  # the mean samples seen of the points pooled
    b_simple: float | None
    se: float | None
    points_n: int
    units_n: int

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``--json``)."""
        return asdict(self)


def _units(row: Mapping[str, Any]) -> list[tuple[float, float, float]]:
    """(weight, |G|², tr(Σ)) of each independent unit of a row: its groups where stored, else the row itself."""
    b_small, b_big = int(row["b_small"]), int(row["b_big"])
    groups = row.get("groups")  # parsed by the store (Store.gradient_noise), or a NoiseRecord's
    if groups:
        out = []
        for small, big in groups:
            if finite_or_none(small) is not None and finite_or_none(big) is not None:
                out.append((1.0, *terms(b_small, float(small), b_big, float(big))))
        if out:
            return out
    g2, trace = terms(b_small, float(row["x_small_mean"]), b_big, float(row["x_big_mean"]))
    return [(float(max(int(row.get("big_n") or 1), 1)), g2, trace)]


def pooled(units: list[tuple[float, float, float]]) -> tuple[float | None, float | None]:
    """B_simple over ``units`` (ratio of the weighted means) and its delete-one jackknife standard error."""
    w = sum(u[0] for u in units)
    g2 = sum(u[0] * u[1] for u in units)
    trace = sum(u[0] * u[2] for u in units)
    if w <= 0 or g2 <= 0:
        return None, None
    b = trace / g2
    if len(units) < 2:
        return b, None
    leave_out = []
    for uw, ug, ut in units:
        g_rest = g2 - uw * ug
        if g_rest <= 0:
            return b, None
        leave_out.append((trace - uw * ut) / g_rest)
    n = len(leave_out)
    mean = sum(leave_out) / n
    return b, math.sqrt((n - 1) / n * sum((x - mean) ** 2 for x in leave_out))


def along_training(rows: Iterable[Mapping[str, Any]], total_samples: Mapping[str, int],
                   window: float = SMOOTH_WINDOW, grid: float = ALONG_GRID) -> list[AlongPoint]:
    """B_simple at every ``grid`` share of the training (a share of each row's trial's ``total_samples``, by
    ``trial_hash``; rows of a trial without one are left out) with rows within ``window`` of it, each pooled over
    those rows, with its jackknife standard error (:func:`pooled`)."""
    usable = []
    for r in rows:
        total = total_samples.get(str(r.get("trial_hash")))
        if not total or finite_or_none(r.get("x_small_mean")) is None or finite_or_none(r.get("x_big_mean")) is None:
            continue
        if int(r.get("b_small") or 0) <= 0 or int(r.get("b_big") or 0) <= int(r.get("b_small") or 0):
            continue
        usable.append((int(r.get("samples_seen") or 0) / total, r))
    out = []
    for at in [round(i * grid, 4) for i in range(1, round(1 / grid) + 1)]:
        near = [(f, r) for f, r in usable if abs(f - at) <= window + 1e-9]
        if not near:
            continue
        units = [u for _, r in near for u in _units(r)]
        b, se = pooled(units)
        out.append(AlongPoint(fraction=at, samples_seen=round(sum(int(r["samples_seen"]) for _, r in near) / len(near)),
                              b_simple=b, se=se, points_n=len(near), units_n=len(units)))
    return out


#: the ramp moves to the next size where the smoothed B_simple passes this multiple of the current size
RAMP_FACTOR = 2.0


@dataclass(frozen=True)
class Ramp:
    """A recommended batch-size schedule and why: ``schedule`` as the ``batch_schedule`` key writes it."""

    schedule: tuple[tuple[float, int], ...]
    reasons: tuple[str, ...]
    capped_at: int | None = None  # the max-batch answer that stopped it, where it did

    @property
    def text(self) -> str:
        """``16 → 64 at 30 % → 256 at 60 %``."""
        return " → ".join([str(self.schedule[0][1])] + [f"{b} at {f * 100:g} %" for f, b in self.schedule[1:]])

    @property
    def toml(self) -> str:
        """The experiment key that trains it."""
        return "batch_schedule = [" + ", ".join(f"[{f:g}, {b}]" for f, b in self.schedule) + "]"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``--json``)."""
        return {"schedule": [list(e) for e in self.schedule], "text": self.text, "toml": self.toml,
                "reasons": list(self.reasons), "capped_at": self.capped_at, "factor": RAMP_FACTOR}


def ramp_from(points: Sequence[AlongPoint], sizes: Sequence[int], cap: int | None = None) -> tuple[Ramp | None, str]:
    """The ramp the smoothed B_simple ``points`` recommend over the measured ``sizes`` (module docstring), capped at
    ``cap``; (None, why) where none can be."""
    usable = [p for p in points if p.b_simple is not None]
    allowed = sorted(b for b in set(sizes) if cap is None or b <= cap)
    if not usable:
        return None, "B_simple was not estimable at any point (raise gradient_noise)"
    if len(allowed) < 2:
        return None, f"fewer than two measured sizes to ramp between ({', '.join(map(str, allowed)) or 'none'})"
    first = usable[0]
    assert first.b_simple is not None
    start = [b for b in allowed if RAMP_FACTOR * b <= first.b_simple]
    current = start[-1] if start else allowed[0]
    schedule: list[tuple[float, int]] = [(0.0, current)]
    reasons = [f"starts at {current}: B_simple {_b(first)} at {first.fraction:.0%} of the training"
               + (f" ≥ {RAMP_FACTOR:g} × {current}" if start else " (the smallest size measured)")]
    for p in usable[1:]:
        assert p.b_simple is not None
        nxt = current
        while any(b > nxt for b in allowed) and p.b_simple >= RAMP_FACTOR * nxt:
            nxt = min(b for b in allowed if b > nxt)
        if nxt != current and p.fraction < 1.0:
            reasons.append(f"{nxt} from {p.fraction:.0%}: B_simple {_b(p)} ≥ {RAMP_FACTOR:g} × {current}")
            schedule.append((round(p.fraction, 2), nxt))
            current = nxt
    capped = cap if cap is not None and any(b > cap for b in sizes) and current == allowed[-1] else None
    if capped is not None:
        reasons.append(f"capped at {cap}: the largest size that fits (max-batch search)")
    if len(schedule) == 1:
        return None, (f"B_simple never passed {RAMP_FACTOR:g} × the size the training was at ({current}); "
                      + "; ".join(reasons))
    return Ramp(schedule=tuple(schedule), reasons=tuple(reasons), capped_at=capped), ""


def _b(p: AlongPoint) -> str:
    assert p.b_simple is not None
    return f"{p.b_simple:,.0f}" + (f" ± {p.se:,.0f}" if p.se is not None else "")
