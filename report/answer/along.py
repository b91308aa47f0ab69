"""The critical batch size along the training, and a batch-size ramp recommended from it (issue 52).

Per series (framework and variant) of constant-size trials that measured the gradient noise (``gradient_noise``):
B_simple at each place of the training (a share of its samples), smoothed over the neighbouring points of every
repeat and size and given its jackknife standard error (:func:`harness.noise.along_training`, docs/noise.md).

The ramp (:func:`harness.noise.ramp_from`): start at the largest measured size B with ``RAMP_FACTOR`` x B at most
the first B_simple (else the smallest measured size); then, along the training, wherever the smoothed B_simple
passes ``RAMP_FACTOR`` (2) x the current size, move to the next larger size the sweep measured (several at once where
it passed several), never above the largest size that fits where a max-batch search ran in the store. Each change is
printed with its reason ("B_simple 140 ± 20 at 60 % of the training > 2 x 64"). The factor: below B_simple a larger
batch still buys nearly proportionally fewer steps (perfect scaling, McCandlish et al. 2018); a margin of 2 keeps the
ramp on the safe side of the estimate's noise, and is the factor within which docs/critical_batch.md calls B_simple
and the fitted B_crit in agreement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.cells import SeriesGroup, group
from harness.noise import RAMP_FACTOR, AlongPoint, Ramp, along_training, ramp_from
from harness.store import TrialRecord
from report.load import StoredExperiment


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

    def lines(self, verdict: str = "") -> list[str]:
        """What ``recommend`` prints; ``verdict``: the batch_ramp study's on this store, where it trained the ramp
        (without one the ramp is printed as suggested, not measured)."""
        pts = "; ".join(_point_text(p) for p in self.points)
        out = [f"B_simple along the training, {self.name} (at each 10 % of its samples, smoothed over ±10 %, "
               f"± jackknife se): {pts}"]
        if self.ramp is not None:
            out.append(f"  ramp suggested by it (B_simple > {RAMP_FACTOR:g} × the size: the next size measured): "
                       f"{self.ramp.text} ({self.ramp.toml}): " + "; ".join(self.ramp.reasons))
            out.append(f"  measured (study batch_ramp): {verdict}" if verdict else
                       "  not measured here: whether it reaches the target sooner is what study = \"batch_ramp\" "
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
    return bool(spec.get("batch_schedule")) or bool(t.metrics.schedule)


def total_samples(exp: StoredExperiment, t: TrialRecord) -> int | None:
    """The samples ``t``'s training would see in full: its epochs over the data set's training samples."""
    n_train = (exp.spec.get("data") or {}).get("n_train")
    epochs = t.settings.epochs or (t.spec or {}).get("epochs")
    return int(epochs) * int(n_train) if epochs and n_train else None


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
