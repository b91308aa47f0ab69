"""The answer to the user's question: which batch size to train with, and the largest that fits.

Pure: reads only store rows (a :class:`report.load.StoredExperiment`), imports no framework, and is used by the
report's first page, ``batchscope recommend`` (and ``--json``) and the end of ``make quick``. The rule (also in
``docs/recommend.md``):

1. Trials are grouped by series (:func:`harness.cells.group`: framework x variant x precision x math mode x
   denormals x accumulation) and then by batch size; every series gets its own answer, never an average of two settings.
2. **The target** (:mod:`report.answer.target`): the experiment's ``target_accuracy`` in percent, or by default the
   series' best mean final accuracy minus 1 point. Each trial's time to target is interpolated on its learning curve.
3. A size is *eligible* when every finished repeat reached the target, none diverged, and its mean final accuracy
   is still at the target. **The recommended size is
   the eligible size with the least mean training time to the target.** Sizes that missed it or diverged are never
   recommended; where none is eligible there is no answer, and what to run is said (more epochs, an ``lr_policy``);
   where the best accuracy is within 5 points of chance nothing was learned, and there is no answer either.
4. The range: every eligible size whose mean - sd of the time to target is at most the recommended size's
   mean + sd. The recommendation is *supported* only when every eligible size in the range has at least two
   repeats and the range is that one size; otherwise the caveats say why and ``to_run`` what to run.
5. Beside it, the throughput knee (:mod:`report.answer.knee`: the smallest size within 90 % of the best throughput),
   the accuracy cost of each size (points below the best mean), energy per sample where there was a GPU, the
   critical batch size (:mod:`report.answer.critical`: fitted over the sizes every repeat brought to the target, the
   others named as left out) and the largest size that fits (the ``maxbatch`` table).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.cells import Series, SeriesGroup, batch_of, group
from harness.noise import NoiseEstimate, estimate_from_rows
from harness.numbers import finite_or_none
from harness.records import MaxBatchResult
from harness.store import TrialRecord
from report.answer import critical
from report.answer.knee import SHARE_OF_BEST, THROUGHPUT_COLUMN, SizeStats, knee, size_stats
from report.answer.target import CHANCE_MARGIN_PTS, SizeTarget, Target, seconds_fmt, series_target, size_targets
from report.load import StoredExperiment

__all__ = ["MIN_REPEATS", "RULE_TEXT", "MaxFit", "Recommendation", "Summary", "accuracy_unusable", "recommend",
           "recommend_group"]

#: below this many repeats a size's spread is unknown, so the recommendation cannot be supported
MIN_REPEATS = 2


@dataclass(frozen=True)
class MaxFit:
    """What the max-batch search found for this framework (the latest stored search)."""

    max_batch: int | None
    recommended_batch: int | None
    margin_mib: float
    budget_mib: float | None
    budget_kind: str


@dataclass(frozen=True)
class Recommendation:
    """The answer for one series (a framework under one setting), with its reasons and how sure it is."""

    framework: str
    variant: str  # the experiment's named variant ("" without variants)
    batch_size: int | None  # None: no size reached the target (or nothing finished, or no accuracy)
    best_batch: int | None  # the fastest size (mean throughput)
    range_lo: int | None  # the smallest size the spread of the time to target allows ...
    range_hi: int | None  # ... and the largest
    supported: bool
    why: str
    sizes: tuple[SizeStats, ...] = ()
    accuracy_cost_pts: tuple[tuple[int, float], ...] = ()  # (batch, best mean accuracy - its mean) in points
    max_fit: MaxFit | None = None
    caveats: tuple[str, ...] = ()
    to_run: tuple[str, ...] = ()
    share_of_best: float = SHARE_OF_BEST
    series: Series | None = None
    label: str = ""  # the settings that tell this series from the others of the experiment ("" if none)
    knee_batch: int | None = None  # the throughput knee (second column)
    knee_range: tuple[int | None, int | None] = (None, None)
    target: Target | None = None
    targets: tuple[SizeTarget, ...] = ()
    critical: critical.CriticalFit | None = None
    critical_why: str = ""
    #: the gradient noise scale B_simple over the later half of the series' trials (None: not measured)
    noise: NoiseEstimate | None = None
    #: the math modes the frameworks read back in the series' ok trials (ieee | tf32 | n/a ...; docs/precision.md)
    math_modes_seen: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``framework`` or ``framework [label]``."""
        return f"{self.framework} [{self.label}]" if self.label else self.framework

    def at(self, batch_size: int | None) -> SizeStats | None:
        """The throughput statistics of one size, or None."""
        return next((s for s in self.sizes if s.batch_size == batch_size), None)

    def target_at(self, batch_size: int | None) -> SizeTarget | None:
        """The time to target of one size, or None."""
        return next((s for s in self.targets if s.batch_size == batch_size), None)

    def critical_text(self) -> str:
        """The critical batch size's fit in words (:func:`report.answer.critical.fit_text`), or "" where there is
        nothing to fit: no size reached the target in any repeat."""
        if self.critical is None and not any(t.reached_n for t in self.targets):
            return ""
        return critical.fit_text(self.critical, self.critical_why)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (``batchscope recommend --json``)."""
        rec, best = self.at(self.batch_size), self.at(self.best_batch)
        tt = {s.batch_size: s for s in self.targets}
        batches = sorted({s.batch_size for s in self.sizes} | set(tt))
        series = dataclasses.asdict(self.series) if self.series is not None else None
        return {
            "framework": self.framework, "variant": self.variant, "series": series, "label": self.label,
            "math_modes_seen": list(self.math_modes_seen),
            "recommended_batch": self.batch_size, "range": [self.range_lo, self.range_hi],
            "supported": self.supported, "why": self.why,
            "target_accuracy": None if self.target is None else self.target.accuracy,
            "target_how": None if self.target is None else self.target.how,
            "best_mean_accuracy": None if self.target is None else self.target.best_mean,
            "knee_batch": self.knee_batch, "knee_range": list(self.knee_range),
            "best_throughput_batch": self.best_batch, "share_of_best": self.share_of_best,
            "throughput_column": THROUGHPUT_COLUMN,
            "at_recommended": None if rec is None else _size_dict(rec, tt.get(rec.batch_size)),
            "at_best": None if best is None else _size_dict(best, tt.get(best.batch_size)),
            "sizes": [_size_dict(self.at(b), tt.get(b), b) for b in batches],
            "accuracy_cost_pts": {str(b): c for b, c in self.accuracy_cost_pts},
            "critical_batch": None if self.critical is None else self.critical.to_dict(),
            "critical_why": self.critical_why,
            "gradient_noise": None if self.noise is None else self.noise.to_dict(),
            "max_fit": None if self.max_fit is None else dataclasses.asdict(self.max_fit),
            "caveats": list(self.caveats), "to_run": list(self.to_run),
        }


def _size_dict(s: SizeStats | None, t: SizeTarget | None, batch: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"batch_size": s.batch_size if s is not None else batch}
    if s is not None:
        out |= {"repeats_n": s.repeats_n, "samples_per_s_mean": s.samples_per_s_mean,
                "samples_per_s_sd": s.samples_per_s_sd, "accuracy_mean": s.accuracy_mean,
                "accuracy_sd": s.accuracy_sd, "j_per_sample_mean": s.j_per_sample_mean}
    out["time_to_target"] = None if t is None else t.to_dict()
    return out


def _max_fit(rows: Sequence[MaxBatchResult], framework: str) -> MaxFit | None:
    found = [r for r in rows if r.framework == framework]
    if not found:
        return None
    # the latest plain search: a "what helps" run stores one row per setting (accumulation, precision, adapter
    # options), whose max_batch is a micro-batch under that setting, not the size this experiment's trials ran
    plain = [r for r in found if r.setting in (None, "", "plain")]
    r = (plain or found)[-1]
    return MaxFit(max_batch=r.answer.max_batch, recommended_batch=r.recommendation.batch,
                  margin_mib=float(r.margin.user_mib or 0.0), budget_mib=finite_or_none(r.budget_mib),
                  budget_kind=str(r.budget_kind or ""))


def _time_range(targets: Sequence[SizeTarget], rec: SizeTarget) -> tuple[int, int, list[SizeTarget]]:
    """(lo, hi, the eligible sizes whose time to target overlaps the recommended size's within one sd)."""
    assert rec.train_s is not None
    bar = rec.train_s.mean + (rec.train_s.sd or 0.0)
    close = [t for t in targets if t.eligible and t.train_s is not None
             and t.train_s.mean - (t.train_s.sd or 0.0) <= bar]
    return min(t.batch_size for t in close), max(t.batch_size for t in close), close


def _epochs_text(targets: Sequence[SizeTarget], spec_epochs: Any) -> str:
    epochs = max((t.epochs for t in targets if t.epochs), default=None) or finite_or_none(spec_epochs)
    return f"{epochs:g} epoch(s)" if epochs else "the epochs trained"


def _caveats(sizes: Sequence[SizeStats], targets: Sequence[SizeTarget], rec: int | None, lo: int | None,
             hi: int | None, close: Sequence[SizeTarget], max_fit: MaxFit | None, largest_tried: int,
             exp_name: str) -> tuple[list[str], list[str]]:
    """(caveats, commands to run) for one recommendation."""
    caveats: list[str] = []
    to_run: list[str] = []
    one = [t.batch_size for t in close if t.reached_n < MIN_REPEATS]
    if one:
        caveats.append(f"only one repeat at batch {', '.join(map(str, one))}: the spread of the time to target is "
                       "unknown, so the fastest size cannot be told apart from timing noise")
        to_run.append(f"batchscope run EXPERIMENT --out DIR --repeats 3 --resume  (experiment {exp_name!r})")
    if lo is not None and lo != hi:
        caveats.append(f"the spreads overlap: batch sizes {lo} to {hi} reach the target within one standard "
                       "deviation of the recommended size's time")
        if not one:
            to_run.append("more repeats narrow the spread: --repeats 5 --resume")
    r = next((t for t in targets if t.batch_size == rec), None)
    if r is not None and r.first_point_n:
        caveats.append(f"batch {rec} reached the target by its first evaluation in {r.first_point_n} repeat(s): "
                       "its time is that evaluation's (an upper bound), not interpolated")
        to_run.append("more evaluation points resolve it: eval_points = 8 (or more) in the experiment file")
    if rec is not None and rec == largest_tried and len(targets) > 1:
        caveats.append(f"the largest size tried ({rec}) reached the target soonest: a larger size may be sooner")
        to_run.append(f"add larger sizes: --batch-sizes with sizes above {rec}")
    missed = [t.batch_size for t in targets if not t.eligible]
    if rec is not None and missed:
        caveats.append("not eligible (missed the target in some repeat, diverged, or fell back by the end): batch "
                       + ", ".join(f"{t.batch_size} ({t.text()})" for t in targets if not t.eligible))
    if max_fit is None:
        to_run.append("set max_batch = true (or run `batchscope maxbatch`) for the largest size that fits")
    elif rec is not None and max_fit.max_batch is not None and rec > max_fit.max_batch:
        caveats.append(f"the recommended size is above the largest that fits the max-batch budget "
                       f"({max_fit.max_batch}): use at most {max_fit.recommended_batch}")
    if sizes and not any(s.accuracy_mean is not None for s in sizes):
        to_run.append("set epochs >= 1 and eval = true on a real data set")
    return caveats, to_run


def recommend_group(g: SeriesGroup, exp: StoredExperiment | None = None, *, target_accuracy: float | None = None,
                    share: float = SHARE_OF_BEST, accuracy_why: str | None = None) -> Recommendation:
    """The recommendation for one series (its sweep rows, any status) of ``exp``.

    ``target_accuracy`` (percent; 0 the default target) overrides the experiment's; ``accuracy_why`` says why the
    stored accuracy means nothing (then no target and no answer, only the throughput knee). Built in steps, each
    adding what it learned to the record: what ran, the knee, the target and each size's time to it, the answer.
    """
    exp = exp if exp is not None else StoredExperiment(name="", runs=(), trials=())
    spec, rows = exp.spec, g.rows
    sizes = size_stats(g.by_batch)
    rec = Recommendation(
        framework=g.framework, variant=g.series.variant, batch_size=None, best_batch=None, range_lo=None,
        range_hi=None, supported=False, why="", series=g.series, label=g.label, share_of_best=share,
        max_fit=_max_fit(exp.maxbatch, g.framework), sizes=tuple(sizes), noise=noise_estimate(rows, exp),
        math_modes_seen=tuple(sorted({str(r.metrics.math_mode_seen) for r in rows
                                      if r.status == "ok" and r.metrics.math_mode_seen})))
    untrained = _nothing_trained(rec, rows)
    if untrained is not None:
        return untrained
    if sizes:
        k_rec, k_best, k_lo, k_hi = knee(sizes, share)
        rec = dataclasses.replace(rec, knee_batch=k_rec, knee_range=(k_lo, k_hi), best_batch=k_best)
    pct = float(spec.get("target_accuracy") or 0.0) if target_accuracy is None else float(target_accuracy)
    classes = (spec.get("data") or {}).get("classes")
    target = series_target(g.by_batch, pct, int(classes) if classes else None) if not accuracy_why else \
        Target(None, "", None, None, None)
    targets = size_targets(g.by_batch, exp.curves, target.accuracy)
    accs = [(s.batch_size, s.accuracy_mean) for s in sizes if s.accuracy_mean is not None]
    best_mean = target.best_mean
    cost = tuple((b, (best_mean - a) * 100.0) for b, a in accs) if best_mean is not None else ()
    # the fit takes the sizes whose steps every repeat measured (SizeTarget.steps_measured, the critical-batch
    # study's reading too); a size some repeat missed is left out and named, with how many repeats reached
    fit, fit_why = critical.fit_sizes(targets)
    rec = dataclasses.replace(rec, target=target, targets=tuple(targets), accuracy_cost_pts=cost, critical=fit,
                              critical_why=fit_why)
    no_answer = _no_answer(rec, target, targets, spec, accuracy_why)
    return no_answer if no_answer is not None else _answer(rec, g, exp, target, targets)


def _nothing_trained(rec: Recommendation, rows: Sequence[TrialRecord]) -> Recommendation | None:
    """The record saying why there is nothing to recommend when no trial trained to its end, else None."""
    counted = [r for r in rows if r.status in ("ok", "diverged")]
    if not counted:
        statuses = sorted({str(r.status) for r in rows})
        return dataclasses.replace(rec, why=f"no trial finished ({', '.join(statuses) or 'none'}): nothing to "
                                            "recommend",
                                   to_run=("see `batchscope report DIR` for why each trial failed",))
    if not any(r.status == "ok" for r in counted):
        sizes_text = ", ".join(str(b) for b in sorted({batch_of(r) for r in counted}))
        return dataclasses.replace(
            rec, why=f"every trial that trained diverged (batch {sizes_text}): nothing to recommend",
            to_run=("lower the learning_rate (a non-finite loss or weights ended each trial)",))
    return None


def _knee_text(rec: Recommendation) -> str:
    """``; the throughput knee is batch N (E J/sample)``, or "" without a knee."""
    if rec.knee_batch is None:
        return ""
    text = f"; the throughput knee is batch {rec.knee_batch}"
    k_stats = next((s for s in rec.sizes if s.batch_size == rec.knee_batch), None)
    if k_stats is not None and k_stats.j_per_sample_mean is not None:
        text += f" ({k_stats.j_per_sample_mean:.3g} J/sample)"
    return text


def _no_answer(rec: Recommendation, target: Target, targets: Sequence[SizeTarget], spec: Mapping[str, Any],
               accuracy_why: str | None) -> Recommendation | None:
    """The record saying why no size can be recommended (no accuracy, nothing learned, no curve, no size reached
    the target), else None."""
    knee_text = _knee_text(rec)
    if target.accuracy is None:
        why = f"no accuracy to reach ({accuracy_why or 'none was measured'}), so no time to target{knee_text}"
        return dataclasses.replace(rec, why=why,
                                   caveats=("without a measured accuracy the answer cannot be judged on learning; "
                                            "the knee says only where larger batches stop buying speed",),
                                   to_run=("set epochs >= 1 and eval = true on a real data set",))
    if target.near_chance and target.best_mean is not None and target.chance is not None:
        why = (f"the best mean accuracy ({target.best_mean * 100:.1f}%) is within {CHANCE_MARGIN_PTS:g} points "
               f"of chance ({target.chance * 100:.1f}%): nothing was learned, so no size is recommended")
        return dataclasses.replace(rec, why=why, to_run=("train longer (epochs), or lower the learning_rate",))
    if targets and all(t.no_curve_n == t.trials_n for t in targets):
        why = ("the store holds no learning curve (eval_points = 0, or a store made before curves were recorded), "
               f"so there is no time to target{knee_text}")
        return dataclasses.replace(rec, why=why, to_run=("run the experiment with eval_points >= 1 (the default is "
                                                         "8) into a new --out directory",))
    if not any(t.eligible and t.train_s is not None for t in targets):
        epochs = _epochs_text(targets, spec.get("epochs"))
        why = (f"no batch size reached the target {target.text()} in every repeat and held it to the end, within "
               f"{epochs}: " + "; ".join(f"batch {t.batch_size}: {t.text()}" for t in targets))
        longer = 2 * int(finite_or_none(spec.get("epochs")) or 1)
        to_run = [f"train longer: epochs = {longer}, into a new --out directory "
                  "(epochs changes how a trial runs, so --resume refuses it)"]
        if (spec.get("lr_policy") or "fixed") == "fixed":
            to_run.append('scale the learning rate with the batch: lr_policy = "sqrt" (or "linear") with '
                          "lr_base_batch = the smallest size")
        return dataclasses.replace(rec, why=why, to_run=tuple(to_run))
    return None


def _startup_caveat(rec_batch: int, train_s: float, g: SeriesGroup, exp: StoredExperiment, target: Target,
                    to_run: list[str]) -> str | None:
    """The caveat naming start-up where it is a fifth or more of the answer's time to the target (None: less)."""
    startup = startup_s(g.by_batch.get(rec_batch, ()), exp.curves)
    if startup is None or train_s <= 0 or startup < STARTUP_SHARE * train_s:
        return None
    compiled = compile_s(g.by_batch.get(rec_batch, ()))
    if compiled is None:
        said = (f"{startup:{seconds_fmt(startup)}} s of batch {rec_batch}'s {train_s:{seconds_fmt(train_s)}} s to the "
                "target is start-up beyond its steady pace (the steps before the first evaluation: a framework's "
                "compilation, e.g. JAX's jit, and warm-up), counted as the user's training would pay it")
    else:  # compiled outside the training clock (issue 31): start-up is its own figure, cache or no cache
        said = (f"start-up: {startup:{seconds_fmt(startup)}} s before batch {rec_batch}'s "
                f"{train_s:{seconds_fmt(train_s)}} s to the target, {compiled:{seconds_fmt(compiled)}} s of it "
                "compiling as a fresh process pays it without a compilation cache (the time to target leaves "
                "compilation out, so a warm cache changes neither figure)")
    if target.how != "absolute":  # a longer training raises the default target; a fixed one's time stays put
        said += ("; in a longer training (a higher target) it weighs less, so a size that starts slower may "
                 "come out ahead there")
        to_run.append(f"a longer training weighs start-up less: epochs = "
                      f"{2 * int(finite_or_none(exp.spec.get('epochs')) or 1)}, into a new --out directory")
    return said


def _answer(rec: Recommendation, g: SeriesGroup, exp: StoredExperiment, target: Target,
            targets: Sequence[SizeTarget]) -> Recommendation:
    """The size that reached the target soonest among the eligible ones, with its range, caveats and reasons."""
    eligible = [(t, t.train_s, t.steps) for t in targets if t.eligible and t.train_s is not None
                and t.steps is not None]
    rec_t, train_s, steps = min(eligible, key=lambda e: (e[1].mean, e[0].batch_size))
    batch = rec_t.batch_size
    lo, hi, close = _time_range(list(targets), rec_t)
    largest = max(batch_of(r) for r in g.rows)
    caveats, to_run = _caveats(list(rec.sizes), list(targets), batch, lo, hi, close, rec.max_fit, largest, exp.name)
    said = _startup_caveat(batch, train_s.mean, g, exp, target, to_run)
    if said is not None:
        caveats.append(said)
    why = (f"reaches the target {target.text()} soonest: {train_s.text(seconds_fmt(train_s.mean))} s of training, "
           f"{steps.mean:,.0f} steps")
    others = [e for e in eligible if e[0] is not rec_t]
    if others:
        runner = min(others, key=lambda e: e[1].mean)[0]
        why += f" (next: batch {runner.batch_size}, {runner.text()})"
    rec_cost = dict(rec.accuracy_cost_pts).get(batch)
    if rec_cost is not None:
        why += f"; final accuracy {rec_cost:.1f} points below the best" if rec_cost > 0.05 else \
            "; the best final accuracy"
    r_stats = next((s for s in rec.sizes if s.batch_size == batch), None)
    if r_stats is not None and r_stats.j_per_sample_mean is not None:
        why += f"; energy {r_stats.j_per_sample_mean:.3g} J/sample"
    supported = lo == hi and all(t.reached_n >= MIN_REPEATS for t in close)
    return dataclasses.replace(rec, batch_size=batch, range_lo=lo, range_hi=hi, supported=supported, why=why,
                               caveats=tuple(caveats), to_run=tuple(to_run))


#: the share of the recommended size's time to target that start-up must reach before a caveat names it
STARTUP_SHARE = 0.2


def compile_s(rows: Sequence[TrialRecord]) -> float | None:
    """Mean seconds ``rows``' ok trials compiled before their first timed step, as a fresh process without a
    compilation cache pays it (``compile_cold_s``; ``compile_s`` where that is not stored): the same figure whether
    a trial's cache was cold or warm. None where no trial stored one (an old store, a framework that compiles
    nothing up front)."""
    found = []
    for r in rows:
        value = finite_or_none(r.metrics.compile_cold_s)
        value = finite_or_none(r.metrics.compile_s) if value is None else value
        if r.status == "ok" and value is not None:
            found.append(value)
    return sum(found) / len(found) if found else None


def startup_s(rows: Sequence[TrialRecord], curves: Mapping[str, Sequence[Mapping[str, Any]]]) -> float | None:
    """Mean seconds of start-up of ``rows``' ok trials: the compilation stored apart (:func:`compile_s`, outside the
    training clock) plus what the first steps took beyond the steady pace, read from each learning curve (the pace
    is the seconds per step between the first evaluation and the last, the start-up what the steps before the first
    evaluation took beyond it; in an old store the compilation is in there). None where neither can be read."""
    found = []
    for r in rows:
        if r.status != "ok":
            continue
        compiled = compile_s([r])
        pts = sorted((p for p in curves.get(r.trial_hash, ())
                      if finite_or_none(p.get("train_s")) is not None and finite_or_none(p.get("step"))),
                     key=lambda p: int(p["step"]))
        if len(pts) < 2 or int(pts[-1]["step"]) <= int(pts[0]["step"]):
            if compiled is not None:
                found.append(compiled)
            continue
        first, last = pts[0], pts[-1]
        pace = (float(last["train_s"]) - float(first["train_s"])) / (int(last["step"]) - int(first["step"]))
        found.append(max(0.0, float(first["train_s"]) - int(first["step"]) * pace) + (compiled or 0.0))
    return sum(found) / len(found) if found else None


def noise_estimate(rows: Sequence[TrialRecord], exp: StoredExperiment) -> NoiseEstimate | None:
    """B_simple (:func:`harness.noise.estimate_from_rows`) over the series' trials' gradient-noise rows, each
    trial's from the later half of its training: the noise scale grows as the loss falls (docs/noise.md), and
    the critical batch it predicts is the one near the target, late in training. None without rows."""
    later: list[dict[str, Any]] = []
    for t in rows:
        mine = exp.gradient_noise.get(t.trial_hash, ())
        if mine and t.status == "ok":
            half = max(int(r.get("samples_seen") or 0) for r in mine) / 2
            later += [r for r in mine if int(r.get("samples_seen") or 0) >= half]
    return estimate_from_rows(later)


def accuracy_unusable(spec: dict[str, Any]) -> str | None:
    """Why this experiment's stored accuracy must not be used (None when it means something)."""
    data = spec.get("data") or {}
    if not spec.get("epochs"):
        return "it trained no full epochs (epochs = 0)"
    if data and not data.get("accuracy_meaningful", True):
        return f"its data set ({data.get('name')}) is synthetic with random labels"
    return None


def sweep_groups(exp: StoredExperiment) -> list[SeriesGroup]:
    """The experiment's sweep trials by series and batch size (max-batch probes time too few steps to rank by); a
    trial with a batch-size schedule is no constant size's (its study judges it: report.answer.ramp_study)."""
    return group([t for t in exp.trials if t.settings.purpose in (None, "sweep")
                  and not (isinstance(t.spec, dict) and t.spec.get("batch_schedule"))], exp.frameworks)


def recommend(exp: StoredExperiment, share: float = SHARE_OF_BEST, target_accuracy: float | None = None,
              ) -> list[Recommendation]:
    """One recommendation per series of ``exp`` (:func:`harness.cells.group`), in the experiment's framework order.

    ``target_accuracy`` (percent, 0: the default target) overrides the experiment's key. Frameworks with only a
    max-batch result get a recommendation that says no sweep ran. An accuracy that means nothing
    (:func:`accuracy_unusable`) gives no target, so no answer but the throughput knee.
    """
    why = accuracy_unusable(exp.spec)
    out = [recommend_group(g, exp, target_accuracy=target_accuracy, share=share, accuracy_why=why)
           for g in sweep_groups(exp)]
    for fw in dict.fromkeys(r.framework for r in exp.maxbatch):
        if not any(r.framework == fw for r in out):
            out.append(Recommendation(framework=fw, variant="", batch_size=None, best_batch=None, range_lo=None,
                                      range_hi=None, supported=False, max_fit=_max_fit(exp.maxbatch, fw),
                                      why="no sweep ran, so only the largest size that fits is known",
                                      to_run=("batchscope run EXPERIMENT (a sweep over batch sizes)",)))
    return out


@dataclass(frozen=True)
class Summary:
    """All recommendations of one store, per experiment (what ``--json`` prints)."""

    experiments: tuple[tuple[str, tuple[Recommendation, ...]], ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return {"rule": RULE_TEXT, "share_of_best": SHARE_OF_BEST, "throughput_column": THROUGHPUT_COLUMN,
                "experiments": [{"experiment": name, "recommendations": [r.to_dict() for r in recs]}
                                for name, recs in self.experiments]}


RULE_TEXT = ("Recommended: the batch size that reaches the target accuracy in the least mean training time over its "
             "repeats, among the sizes every repeat brought to the target without diverging and whose mean final "
             "accuracy stayed there. The target is the "
             "experiment's target_accuracy, or by default the best mean final accuracy of any size minus 1 point; "
             "each trial's time is interpolated linearly between the two evaluations around the crossing. Its range: "
             "the sizes whose time is within one sd; supported only with two or more repeats there and a range of "
             f"one size. Beside it, the throughput knee (the smallest size within {SHARE_OF_BEST:.0%} of the best "
             "throughput) and the largest size that fits (max-batch search).")
