"""The critical batch size along the training, and a batch-size ramp recommended from it (issue 52).

Per series (framework and variant) of constant-size trials that measured the gradient noise (``gradient_noise``):
B_simple at each place of the training (a share of its samples), smoothed over the neighbouring points of every
repeat and size and given its jackknife standard error (:func:`harness.noise.along_training`, docs/noise.md).

The ramp (:func:`ramp_from`): start at the largest measured size B with :data:`RAMP_FACTOR` x B at most the first
B_simple (else the smallest measured size); then, along the training, wherever the smoothed B_simple passes
:data:`RAMP_FACTOR` x the current size, move to the next larger size the sweep measured (several at once where it
passed several), never above the largest size that fits where a max-batch search ran in the store. Each change is
printed with its reason ("B_simple 140 ± 20 at 60 % of the training > 2 x 64"). The factor: below B_simple a larger
batch still buys nearly proportionally fewer steps (perfect scaling, McCandlish et al. 2018); a margin of 2 keeps the
ramp on the safe side of the estimate's noise, and is the factor within which docs/critical_batch.md calls B_simple
and the fitted B_crit in agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.cells import SeriesGroup, group
from harness.config.schedule import schedule_text
from harness.noise import AlongPoint, along_training
from harness.store import TrialRecord
from report.load import StoredExperiment

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
        return schedule_text(self.schedule)

    @property
    def toml(self) -> str:
        """The experiment key that trains it."""
        return "batch_schedule = [" + ", ".join(f"[{f:g}, {b}]" for f, b in self.schedule) + "]"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``--json``)."""
        return {"schedule": [list(e) for e in self.schedule], "text": self.text, "toml": self.toml,
                "reasons": list(self.reasons), "capped_at": self.capped_at, "factor": RAMP_FACTOR}


@dataclass(frozen=True)
class NoiseAlong:
    """One series' B_simple along the training and the ramp recommended from it (None where none can be)."""

    framework: str
    variant: str
    points: tuple[AlongPoint, ...]
    sizes: tuple[int, ...]  # the constant sizes the series measured
    total_samples: int  # the samples of the series' training in full (its trials' epochs x the data set)
    ramp: Ramp | None
    why_no_ramp: str = ""

    @property
    def name(self) -> str:
        """How a line and a legend name the series."""
        return f"{self.framework} · {self.variant}" if self.variant else self.framework

    def lines(self) -> list[str]:
        """What ``recommend`` prints."""
        pts = "; ".join(_point_text(p) for p in self.points)
        out = [f"B_simple along the training, {self.name} (at each 10 % of its samples, smoothed over ±10 %, "
               f"± jackknife se): {pts}"]
        if self.ramp is not None:
            out.append(f"  ramp suggested by it (B_simple > {RAMP_FACTOR:g} × the size: the next size measured): "
                       f"{self.ramp.text} ({self.ramp.toml}): " + "; ".join(self.ramp.reasons))
            out.append("  not measured here: whether it reaches the target sooner is what study = \"batch_ramp\" "
                       "trains (experiments/batch_ramp.toml)")
        else:
            out.append(f"  no ramp: {self.why_no_ramp}")
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``--json``)."""
        return {"framework": self.framework, "variant": self.variant, "points": [p.to_dict() for p in self.points],
                "sizes": list(self.sizes), "ramp": self.ramp.to_dict() if self.ramp else None,
                "why_no_ramp": self.why_no_ramp}


def _point_text(p: AlongPoint) -> str:
    if p.b_simple is None:
        return f"{p.fraction:.0%}: not estimable"
    se = f" ± {p.se:,.0f}" if p.se is not None else ""
    return f"{p.fraction:.0%}: {p.b_simple:,.0f}{se}"


def is_scheduled(t: TrialRecord) -> bool:
    """Whether the trial trained with a batch-size schedule (its spec's ``batch_schedule``)."""
    spec = t.spec if isinstance(t.spec, dict) else {}
    return bool(spec.get("batch_schedule")) or bool(t.metrics.schedule_json)


def total_samples(exp: StoredExperiment, t: TrialRecord) -> int | None:
    """The samples ``t``'s training would see in full: its epochs over the data set's training samples."""
    n_train = (exp.spec.get("data") or {}).get("n_train")
    epochs = t.settings.epochs or (t.spec or {}).get("epochs")
    return int(epochs) * int(n_train) if epochs and n_train else None


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


def _cap(exp: StoredExperiment, framework: str) -> int | None:
    found = [r for r in exp.maxbatch if r.framework == framework and r.answer.max_batch]
    return int(found[-1].answer.max_batch) if found else None


def noise_along(exp: StoredExperiment) -> list[NoiseAlong]:
    """B_simple along the training and the ramp from it, per series of constant-size trials with noise rows."""
    constant = [t for t in exp.trials if t.settings.purpose in (None, "sweep") and not is_scheduled(t)]
    out = []
    for g in group(constant, exp.frameworks):
        found = _series(exp, g)
        if found is not None:
            out.append(found)
    return out


def _series(exp: StoredExperiment, g: SeriesGroup) -> NoiseAlong | None:
    rows: list[dict[str, Any]] = []
    totals: dict[str, int] = {}
    for t in g.rows:
        mine = exp.gradient_noise.get(t.trial_hash, ())
        total = total_samples(exp, t)
        if mine and t.status == "ok" and total:
            rows += mine
            totals[t.trial_hash] = total
    if not rows:
        return None
    points = along_training(rows, totals)
    sizes = tuple(sorted(g.by_batch))
    ramp, why = ramp_from(points, sizes, _cap(exp, g.framework))
    return NoiseAlong(framework=g.framework, variant=str(g.series.variant or ""), points=tuple(points), sizes=sizes,
                      total_samples=max(totals.values()), ramp=ramp, why_no_ramp=why)
