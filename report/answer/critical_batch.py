"""The critical batch size as the field measures it (issue 33): each size at its best learning rate, the fit, the
regimes in words, and the gradient-noise prediction judged against the fit.

Pure: reads store rows (a :class:`report.load.StoredExperiment`) and the recommendations already computed from them.

* **A family** is the series of one framework that differ only by their variant, when the variants are a
  learning-rate grid (``learning_rates``: variants ``lr_<rate>``; ``lr_factors``: ``lr_x<factor>``), or one series
  trained to a target (``train_to_target``) without a grid.
* **A size's figure is its best rate's**: among the rates whose steps to the target are measured, every repeat
  reaching it without diverging (:attr:`report.answer.target.SizeTarget.steps_measured`: the same reading of "a size
  reached the target" as ``recommend``'s summary and the report), the one with the fewest mean steps to the target,
  ties broken by the least mean training time, then the lower rate. A rate that diverged or missed in a repeat is a
  result (shown as tried), never chosen. The rate shown is the one the trials ran with (the store's ``lr``).
* **The fit** S = S_min (1 + B_crit / B) (:func:`report.answer.critical.fit`) over every size's chosen steps; a size
  without a chosen rate is left out, named with why (``1 of 3 repeats reached``). The regimes' edges are B_crit / 4
  and 4 B_crit (:data:`report.answer.critical.REGIME_FACTOR`).
* **The prediction judged**: B_simple over the chosen trials' gradient-noise rows from the later half of their
  training (in train-to-target mode: the approach to the target) against the fitted B_crit; they *agree* when
  their ratio is within :data:`AGREE_FACTOR` either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.cells import Series
from harness.noise import NoiseEstimate
from harness.store import TrialRecord
from report.answer import critical
from report.answer.recommend import Recommendation, noise_estimate, sweep_groups
from report.answer.target import SizeTarget, seconds_fmt, series_target, size_targets
from report.load import StoredExperiment

#: B_simple and B_crit agree when neither is more than this factor above the other (McCandlish et al. 2018 claim
#: B_crit ≈ B_simple; a factor of 2 is well inside a fit's uncertainty over a handful of sizes)
AGREE_FACTOR = 2.0


@dataclass(frozen=True)
class RateTried:
    """One learning rate at one size: its time-to-target statistics."""

    lr: float | None  # what the trials ran with (the store's lr); None where the row had none
    variant: str
    target: SizeTarget

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return {"lr": self.lr, "variant": self.variant, **self.target.to_dict()}


@dataclass(frozen=True)
class SizeChoice:
    """One batch size's figure: its best rate's steps and time to the target, and every rate tried."""

    batch_size: int
    chosen: RateTried | None  # None: no rate reached the target in every repeat
    tried: tuple[RateTried, ...]

    def fit_gap(self) -> str:
        """Why the fit leaves this size out (:meth:`report.answer.target.SizeTarget.fit_gap`, per rate tried where
        there were several); "" where a rate was chosen."""
        if self.chosen is not None:
            return ""
        if len(self.tried) == 1:
            return self.tried[0].target.fit_gap()
        return "no rate reached it in every repeat: " + "; ".join(
            f"lr {r.lr:g}: {r.target.fit_gap()}" if r.lr is not None else r.target.fit_gap() for r in self.tried)

    @property
    def steps(self) -> float | None:
        """The chosen rate's mean steps to the target."""
        s = self.chosen.target.steps if self.chosen else None
        return None if s is None else s.mean

    @property
    def train_s(self) -> float | None:
        """The chosen rate's mean training seconds to the target."""
        s = self.chosen.target.train_s if self.chosen else None
        return None if s is None else s.mean

    def text(self) -> str:
        """E.g. ``412 steps, 31.2 s at lr 0.003`` or ``not reached in every repeat, left out of the fit (lr 0.001:
        not reached in 10 epochs; lr 0.01: 2 of 3 reached: 4.98 s)``."""
        if self.chosen is None or self.steps is None or self.train_s is None:
            tried = "; ".join(f"lr {r.lr:g}: {r.target.text()}" if r.lr is not None else r.target.text()
                              for r in self.tried)
            return f"not reached in every repeat, left out of the fit ({tried})"
        lr = "" if self.chosen.lr is None else f" at lr {self.chosen.lr:g}"
        return f"{self.steps:,.0f} steps, {self.train_s:{seconds_fmt(self.train_s)}} s{lr}"


@dataclass(frozen=True)
class NoiseVerdict:
    """B_simple (the gradient noise scale's prediction) against the fitted B_crit."""

    b_simple: float
    b_crit: float

    @property
    def ratio(self) -> float:
        """B_crit / B_simple."""
        return self.b_crit / self.b_simple

    @property
    def agrees(self) -> bool:
        """Whether they are within :data:`AGREE_FACTOR` of each other."""
        return 1.0 / AGREE_FACTOR <= self.ratio <= AGREE_FACTOR

    def text(self) -> str:
        """E.g. ``B_simple ≈ 18 vs B_crit ≈ 93: B_crit/B_simple = 5.2, does not agree within a factor of 2``."""
        verdict = "agrees" if self.agrees else "does not agree"
        return (f"B_simple ≈ {self.b_simple:,.0f} vs fitted B_crit ≈ {self.b_crit:,.0f}: B_crit / B_simple = "
                f"{self.ratio:.2g}, the prediction {verdict} within a factor of {AGREE_FACTOR:g}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return {"b_simple": self.b_simple, "b_crit": self.b_crit, "ratio": self.ratio, "agrees": self.agrees,
                "factor": AGREE_FACTOR, "text": self.text()}


@dataclass(frozen=True)
class CriticalStudy:
    """One family's critical-batch study: the sizes at their best rates, the fit, the regimes, the verdict."""

    framework: str
    series: Series  # the family's settings, variant left out
    target: float | None  # fraction
    sizes: tuple[SizeChoice, ...]
    fit: critical.CriticalFit | None
    fit_why: str
    noise: NoiseEstimate | None = None

    @property
    def verdict(self) -> NoiseVerdict | None:
        """B_simple judged against the fit, where both exist."""
        if self.fit is None or self.noise is None or not self.noise.b_simple or self.noise.b_simple <= 0:
            return None
        return NoiseVerdict(b_simple=float(self.noise.b_simple), b_crit=self.fit.b_crit)

    @property
    def fastest(self) -> tuple[int, RateTried] | None:
        """The time-to-target answer: the (size, rate) that reached the target in the least mean training time, over
        every rate tried (the recommendation's rule, across the grid), or None."""
        ranked = [(t.train_s.mean, b, i, j) for i, size in enumerate(self.sizes) for j, r in enumerate(size.tried)
                  if (t := r.target).eligible and t.train_s is not None and (b := size.batch_size)]
        if not ranked:
            return None
        _, b, i, j = min(ranked)
        return b, self.sizes[i].tried[j]

    def regimes_text(self) -> str:
        """The regimes in words, e.g. ``perfect scaling up to ~23, no further gain beyond ~372 (B_crit ≈ 93)``."""
        fit = self.fit
        if fit is None:
            return f"no fit: {self.fit_why}"
        lo, hi = fit.b_crit / critical.REGIME_FACTOR, fit.b_crit * critical.REGIME_FACTOR
        measured = [s.batch_size for s in self.sizes]
        where = {name: [b for b in measured if fit.regime(b) == name]
                 for name in ("perfect scaling", "diminishing returns", "no further gain")}
        sizes = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in where.items() if v)
        return (f"perfect scaling up to ~{lo:,.0f}, diminishing returns to ~{hi:,.0f}, no further gain beyond "
                f"~{hi:,.0f} (B_crit ≈ {fit.b_crit:,.0f}, S_min ≈ {fit.s_min:,.0f} steps, {fit.sizes_text()}; "
                f"measured sizes by regime: {sizes})")

    def best_rate_recommendation(self, like: Recommendation) -> Recommendation:
        """A recommendation-shaped record of the best rates (for :func:`report.document.curves.critical_figure`)."""
        return dataclasses.replace(like, variant="", label="best learning rate per size",
                                   targets=tuple(s.chosen.target for s in self.sizes if s.chosen is not None),
                                   critical=self.fit, critical_why=self.fit_why, noise=self.noise)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (``recommend --json``'s ``critical_studies``)."""
        fastest = self.fastest
        return {
            "framework": self.framework, "series": dataclasses.asdict(self.series), "target_accuracy": self.target,
            "sizes": [{"batch_size": s.batch_size, "chosen_lr": None if s.chosen is None else s.chosen.lr,
                       "steps": s.steps, "train_s": s.train_s, "text": s.text(),
                       "tried": [r.to_dict() for r in s.tried]} for s in self.sizes],
            "critical_batch": None if self.fit is None else self.fit.to_dict(), "critical_why": self.fit_why,
            "regimes": self.regimes_text(),
            "fastest": None if fastest is None else {"batch_size": fastest[0], "lr": fastest[1].lr,
                                                     "text": _reach_text(fastest[1])},
            "gradient_noise": None if self.noise is None else self.noise.to_dict(),
            "verdict": None if self.verdict is None else self.verdict.to_dict(),
        }


def choose(tried: Sequence[RateTried]) -> RateTried | None:
    """The best rate at one size: fewest mean steps to the target among those whose steps every repeat measured
    (:attr:`report.answer.target.SizeTarget.steps_measured`), ties by time, then rate."""
    ranked = [((r.target.steps.mean, r.target.train_s.mean, r.lr if r.lr is not None else 0.0), i)
              for i, r in enumerate(tried)
              if r.target.steps_measured and r.target.steps is not None and r.target.train_s is not None]
    return tried[min(ranked)[1]] if ranked else None


def is_study(exp: StoredExperiment) -> bool:
    """Whether ``exp`` is a critical-batch study: trained to a target, or a learning-rate grid."""
    spec = exp.spec
    return bool(spec.get("train_to_target") or spec.get("learning_rates") or spec.get("lr_factors"))


def studies(exp: StoredExperiment, target_accuracy: float | None = None) -> list[CriticalStudy]:
    """One :class:`CriticalStudy` per family of ``exp`` (empty unless :func:`is_study`)."""
    if not is_study(exp):
        return []
    # a learning-rate grid's variants are its rates (the experiment allows no named variant beside a grid), each
    # trial's rate stored in its ``lr``; without a grid, a named variant is compared by its own recommendation
    grid = bool(exp.spec.get("learning_rates") or exp.spec.get("lr_factors"))
    families: dict[Series, list[Any]] = {}
    for g in sweep_groups(exp):
        if g.series.variant and not grid:
            continue
        families.setdefault(dataclasses.replace(g.series, variant=""), []).append(g)
    pct = float(exp.spec.get("target_accuracy") or 0.0) if target_accuracy is None else float(target_accuracy)
    classes = (exp.spec.get("data") or {}).get("classes")
    out = []
    for series, groups in families.items():
        pooled: dict[int, list[TrialRecord]] = {}
        for g in groups:
            for b, rows in g.by_batch.items():
                pooled.setdefault(b, []).extend(rows)
        target = series_target(pooled, pct, int(classes) if classes else None).accuracy
        by_size: dict[int, list[RateTried]] = {}
        for g in groups:
            for t in size_targets(g.by_batch, exp.curves, target):
                lr = next((float(r.lr) for r in g.by_batch[t.batch_size] if r.lr is not None), None)
                by_size.setdefault(t.batch_size, []).append(RateTried(lr=lr, variant=g.series.variant, target=t))
        sizes = tuple(SizeChoice(b, choose(tried), tuple(sorted(tried, key=lambda r: r.lr or 0.0)))
                      for b, tried in sorted(by_size.items()))
        fit, why = critical.fit([(s.batch_size, s.steps) for s in sizes if s.steps is not None],
                                [(s.batch_size, s.fit_gap()) for s in sizes if s.steps is None])
        chosen_rows = [r for g in groups for s in sizes if s.chosen is not None and s.chosen.variant == g.series.variant
                       for r in g.by_batch.get(s.batch_size, ())]
        out.append(CriticalStudy(framework=series.framework, series=series, target=target, sizes=sizes, fit=fit,
                                 fit_why=why, noise=noise_estimate(chosen_rows, exp)))
    return out


def summary_note(rec: Recommendation, found: Sequence[CriticalStudy]) -> str | None:
    """What the run's critical-batch section says where it fits another B_crit than ``rec``'s summary line for the
    same framework and settings, and why; None where they agree or no study covers ``rec``.

    With a learning-rate grid they differ by design (the summary fits one rate's trials, the section each size at
    its best rate, each to its own target); without one they are the same fit by construction (one reading of
    "reached", :attr:`report.answer.target.SizeTarget.steps_measured`), and a difference is said all the same."""
    if rec.series is None:
        return None
    study = next((s for s in found if s.series == dataclasses.replace(rec.series, variant="")), None)
    if study is None or _same_fit(rec.critical, study.fit):
        return None
    section = critical.fit_text(study.fit, study.fit_why)
    if rec.variant:
        return (f"this line fits {rec.variant}'s trials alone; the critical-batch section below fits each size at "
                f"its best learning rate: {section}")
    return f"the critical-batch section below fits otherwise: {section}"


def _same_fit(a: critical.CriticalFit | None, b: critical.CriticalFit | None) -> bool:
    """Whether two fits are the same statement: both absent, or through the same points."""
    return (a is None and b is None) or (a is not None and b is not None and a.points == b.points)


def study_lines(study: CriticalStudy) -> list[str]:
    """The study in a few lines of text (``recommend``, the report's notes)."""
    target = "" if study.target is None else f" to {study.target * 100:.1f}%"
    lines = [f"critical batch size, {study.framework}: steps{target} at each size's best learning rate"]
    lines += [f"  batch {s.batch_size}: {s.text()}" for s in study.sizes]
    lines.append(f"  regimes: {study.regimes_text()}")
    fastest = study.fastest
    if fastest is not None:
        lines.append(f"  time to target: batch {fastest[0]} reaches it soonest ({_reach_text(fastest[1])})")
    if study.verdict is not None and study.noise is not None:
        n = study.noise
        sizes = ", ".join(str(s.batch_size) for s in study.sizes if s.chosen is not None) or "none"
        lines.append(f"  prediction: {study.verdict.text()}")
        # which trials this B_simple rests on: those of the sizes chosen here, not every trial of the series, so it
        # may differ from the summary's B_simple, whose line says it rests on all of them
        lines.append(f"    (B_simple here over the {n.trials_n} trial(s) of batch {sizes} at their chosen rates, the "
                     f"later half of each: {n.points_n} point(s), {n.samples_min:,}-{n.samples_max:,} samples seen)")
    elif study.noise is not None:
        lines.append("  prediction: B_simple measured, but there is no fit to judge it against")
    return lines


def _reach_text(r: RateTried) -> str:
    """E.g. ``114 steps, 13.4 s at lr 0.01``."""
    steps, train_s = r.target.steps, r.target.train_s
    lr = "" if r.lr is None else f" at lr {r.lr:g}"
    if steps is None or train_s is None:
        return r.target.text() + lr
    return f"{steps.mean:,.0f} steps, {train_s.mean:{seconds_fmt(train_s.mean)}} s{lr}"
