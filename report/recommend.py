"""The answer to the user's question: which batch size to train with, and the largest that fits.

Pure: reads only store rows (a :class:`report.load.Experiment`), imports no framework, and is used by
both the report's first page and ``batchscope recommend``. The rule (also in ``docs/recommend.md``):

1. Per framework and variant (precision), the sweep's finished trials are grouped by batch size.
   A size's throughput is the mean over its repeats, its spread the sample standard deviation.
2. The *best* size has the highest mean throughput. The **recommended size is the smallest batch size
   whose mean throughput is at least** :data:`SHARE_OF_BEST` **of the best mean** (the knee of the
   curve: past it, larger batches buy little speed and usually cost accuracy and memory).
3. The uncertainty is the same rule applied to mean − sd and mean + sd (against the best mean): the
   smallest size that clears the bar even at its low end, and the smallest that clears it at its high
   end. When the two differ, the spreads overlap and the range is reported, not one size.
4. The accuracy cost of each size is the best mean accuracy minus its mean accuracy, in points (when
   accuracy was measured); energy per sample is shown where there was a GPU; the largest size that fits
   (and the one recommended with its margin) comes from the ``maxbatch`` table when a search ran.

The recommendation is marked *supported* only when every size in the sweep that decides it has at
least two repeats and the range is a single size; otherwise the caveats say why and ``to_run`` what to
run to get one. The throughput column is read by name through :func:`throughput_of` only.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from report.load import Experiment

#: the share of the best mean throughput the recommended (smallest) size must reach
SHARE_OF_BEST = 0.90
#: the stored column the rule ranks by: the step throughput (batch / median time of forward, backward and update
#: over every post-warm-up step), the device work a batch size changes; batch preparation, which the end-to-end
#: figure adds, does not depend on the framework's batching (README, "What the numbers mean")
THROUGHPUT_COLUMN = "step_samples_per_s"
#: below this many repeats a size's spread is unknown, so the recommendation cannot be supported
MIN_REPEATS = 2


def throughput_of(row: dict[str, Any]) -> float | None:
    """The throughput (samples/s) of one stored trial row, or None where it was not measured."""
    return _number(row.get(THROUGHPUT_COLUMN))


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class SizeStats:
    """One batch size of one framework/variant: mean and spread over the repeats that finished."""

    batch_size: int
    repeats_n: int
    samples_per_s_mean: float
    samples_per_s_sd: float | None  # None with one repeat
    accuracy_mean: float | None = None  # fraction in [0, 1]
    accuracy_sd: float | None = None
    j_per_sample_mean: float | None = None

    @property
    def samples_per_s_lo(self) -> float:
        """Mean minus one sd (the mean itself with one repeat)."""
        return self.samples_per_s_mean - (self.samples_per_s_sd or 0.0)

    @property
    def samples_per_s_hi(self) -> float:
        """Mean plus one sd (the mean itself with one repeat)."""
        return self.samples_per_s_mean + (self.samples_per_s_sd or 0.0)


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
    """The answer for one framework (and variant), with its reasons and how sure it is."""

    framework: str
    variant: str  # the precision, e.g. "fp32"; one framework may have several
    batch_size: int | None  # None: nothing finished
    best_batch: int | None
    range_lo: int | None  # the smallest size the spread allows ...
    range_hi: int | None  # ... and the largest
    supported: bool
    why: str
    sizes: tuple[SizeStats, ...] = ()
    accuracy_cost_pts: tuple[tuple[int, float], ...] = ()  # (batch, best mean accuracy - its mean) in points
    max_fit: MaxFit | None = None
    caveats: tuple[str, ...] = ()
    to_run: tuple[str, ...] = ()
    share_of_best: float = SHARE_OF_BEST

    def at(self, batch_size: int | None) -> SizeStats | None:
        """The statistics of one size, or None."""
        return next((s for s in self.sizes if s.batch_size == batch_size), None)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (``batchscope recommend --json``)."""
        rec, best = self.at(self.batch_size), self.at(self.best_batch)
        return {
            "framework": self.framework, "variant": self.variant, "recommended_batch": self.batch_size,
            "best_throughput_batch": self.best_batch, "range": [self.range_lo, self.range_hi],
            "supported": self.supported, "why": self.why, "share_of_best": self.share_of_best,
            "throughput_column": THROUGHPUT_COLUMN,
            "at_recommended": None if rec is None else _size_dict(rec),
            "at_best": None if best is None else _size_dict(best),
            "sizes": [_size_dict(s) for s in self.sizes],
            "accuracy_cost_pts": {str(b): c for b, c in self.accuracy_cost_pts},
            "max_fit": None if self.max_fit is None else dataclasses.asdict(self.max_fit),
            "caveats": list(self.caveats), "to_run": list(self.to_run),
        }


def _size_dict(s: SizeStats) -> dict[str, Any]:
    return {"batch_size": s.batch_size, "repeats_n": s.repeats_n, "samples_per_s_mean": s.samples_per_s_mean,
            "samples_per_s_sd": s.samples_per_s_sd, "accuracy_mean": s.accuracy_mean,
            "accuracy_sd": s.accuracy_sd, "j_per_sample_mean": s.j_per_sample_mean}


def _variant(row: dict[str, Any]) -> str:
    """What else was varied per framework: the precision (a trial setting, so failed rows carry it too)."""
    return str(row.get("precision") or "fp32")


def _mean_sd(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def size_stats(rows: Iterable[dict[str, Any]]) -> list[SizeStats]:
    """Per batch size, ascending: throughput (and accuracy, energy) over the ok rows with a throughput."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("status") == "ok" and throughput_of(r) is not None:
            groups.setdefault(int(r["batch_size"]), []).append(r)
    out = []
    for bs, group in sorted(groups.items()):
        tput = [v for v in (throughput_of(r) for r in group) if v is not None]
        acc = [v for v in (_number(r.get("accuracy")) for r in group) if v is not None]
        energy = [v for v in (_number(r.get("j_per_sample")) for r in group) if v is not None]
        t_mean, t_sd = _mean_sd(tput)
        a_mean, a_sd = _mean_sd(acc)
        assert t_mean is not None
        out.append(SizeStats(batch_size=bs, repeats_n=len(tput), samples_per_s_mean=t_mean, samples_per_s_sd=t_sd,
                             accuracy_mean=a_mean, accuracy_sd=a_sd, j_per_sample_mean=_mean_sd(energy)[0]))
    return out


def knee(sizes: Sequence[SizeStats], share: float = SHARE_OF_BEST) -> tuple[int, int, int, int]:
    """(recommended, best, range_lo, range_hi) batch sizes by the rule of this module's docstring.

    ``sizes`` must be non-empty and ascending. The bar is ``share`` × the best mean throughput.
    """
    best = max(sizes, key=lambda s: s.samples_per_s_mean)
    bar = share * best.samples_per_s_mean
    rec = next(s.batch_size for s in sizes if s.samples_per_s_mean >= bar)
    lo = next(s.batch_size for s in sizes if s.samples_per_s_hi >= bar)
    hi = next(s.batch_size for s in sizes if s.samples_per_s_lo >= bar or s is best)
    return rec, best.batch_size, lo, max(hi, rec)


def _max_fit(rows: Sequence[dict[str, Any]], framework: str) -> MaxFit | None:
    found = [r for r in rows if r.get("framework") == framework]
    if not found:
        return None
    # the latest plain search: a "what helps" run stores one row per setting (accumulation, precision, adapter
    # options), whose max_batch is a micro-batch under that setting, not the size this experiment's trials ran
    plain = [r for r in found if r.get("setting") in (None, "", "plain")]
    r = (plain or found)[-1]
    return MaxFit(max_batch=r.get("max_batch"), recommended_batch=r.get("recommended_batch"),
                  margin_mib=float(r.get("margin_mib") or 0.0), budget_mib=_number(r.get("budget_mib")),
                  budget_kind=str(r.get("budget_kind") or ""))


def _caveats(sizes: Sequence[SizeStats], rec: int, best: int, lo: int, hi: int, had_accuracy: bool,
             max_fit: MaxFit | None, largest_tried: int, exp_name: str) -> tuple[list[str], list[str]]:
    """(caveats, commands to run) for one recommendation."""
    caveats: list[str] = []
    to_run: list[str] = []
    one = [s.batch_size for s in sizes if s.repeats_n < MIN_REPEATS and s.batch_size <= max(hi, best)]
    if one:
        caveats.append(f"only one repeat at batch {', '.join(map(str, one))}: the spread is unknown, so the "
                       "knee cannot be told apart from timing noise")
        to_run.append(f"batchscope run EXPERIMENT --out DIR --repeats 3 --resume  (experiment {exp_name!r})")
    if lo != hi:
        caveats.append(f"the spreads overlap: anything from batch {lo} to {hi} reaches the bar within one "
                       "standard deviation")
        if not one:
            to_run.append("more repeats narrow the spread: --repeats 5 --resume")
    if best == largest_tried and len(sizes) > 1:
        caveats.append(f"throughput was still rising at the largest size tried ({best}): a larger size "
                       "may be faster")
        to_run.append("add larger sizes: --batch-sizes with sizes above " + str(best))
    if not had_accuracy:
        caveats.append("no accuracy was measured (epochs = 0, synthetic labels or eval off), so the accuracy "
                       "cost of larger batches is unknown")
        to_run.append("set epochs >= 1 and eval = true on a real data set")
    if max_fit is None:
        to_run.append("set max_batch = true (or run `batchscope maxbatch`) for the largest size that fits")
    elif max_fit.max_batch is not None and rec > max_fit.max_batch:
        caveats.append(f"the recommended size is above the largest that fits the max-batch budget "
                       f"({max_fit.max_batch}): use at most {max_fit.recommended_batch}")
    return caveats, to_run


def recommend_group(framework: str, variant: str, rows: Sequence[dict[str, Any]],
                    maxbatch_rows: Sequence[dict[str, Any]] = (), exp_name: str = "",
                    share: float = SHARE_OF_BEST) -> Recommendation:
    """The recommendation for one framework/variant from its sweep rows (any status)."""
    sizes = size_stats(rows)
    max_fit = _max_fit(maxbatch_rows, framework)
    if not sizes:
        statuses = sorted({str(r.get("status")) for r in rows})
        return Recommendation(framework=framework, variant=variant, batch_size=None, best_batch=None,
                              range_lo=None, range_hi=None, supported=False, max_fit=max_fit, share_of_best=share,
                              why=f"no trial finished ({', '.join(statuses) or 'none'}): nothing to recommend",
                              to_run=("see `batchscope report DIR` for why each trial failed",))
    rec, best, lo, hi = knee(sizes, share)
    accs = [(s.batch_size, s.accuracy_mean) for s in sizes if s.accuracy_mean is not None]
    top_acc = max((a for _, a in accs), default=None)
    cost = tuple((b, (top_acc - a) * 100.0) for b, a in accs) if top_acc is not None else ()
    caveats, to_run = _caveats(sizes, rec, best, lo, hi, bool(accs), max_fit,
                               max(int(r["batch_size"]) for r in rows), exp_name)
    r_stats, b_stats = next(s for s in sizes if s.batch_size == rec), next(s for s in sizes if s.batch_size == best)
    if rec == best:
        why = f"batch {rec} is the fastest ({r_stats.samples_per_s_mean:,.0f} samples/s) and no smaller size " \
              f"reaches {share:.0%} of it"
    else:
        why = (f"the smallest batch within {share:.0%} of the best throughput: {r_stats.samples_per_s_mean:,.0f} "
               f"samples/s = {r_stats.samples_per_s_mean / b_stats.samples_per_s_mean:.0%} of batch {best}'s "
               f"{b_stats.samples_per_s_mean:,.0f}")
    rec_cost = dict(cost).get(rec)
    if rec_cost is not None:
        why += f"; accuracy {rec_cost:.1f} points below the best" if rec_cost > 0.05 else "; the best accuracy"
    if r_stats.j_per_sample_mean is not None and b_stats.j_per_sample_mean is not None:
        why += (f"; energy {r_stats.j_per_sample_mean:.3g} J/sample (batch {best}: "
                f"{b_stats.j_per_sample_mean:.3g})" if rec != best else
                f"; energy {r_stats.j_per_sample_mean:.3g} J/sample")
    one_repeat = any(s.repeats_n < MIN_REPEATS for s in sizes if s.batch_size <= max(hi, best))
    return Recommendation(framework=framework, variant=variant, batch_size=rec, best_batch=best, range_lo=lo,
                          range_hi=hi, supported=not one_repeat and lo == hi, why=why, sizes=tuple(sizes),
                          accuracy_cost_pts=cost, max_fit=max_fit, caveats=tuple(caveats), to_run=tuple(to_run),
                          share_of_best=share)


def accuracy_unusable(spec: dict[str, Any]) -> str | None:
    """Why this experiment's stored accuracy must not be used (None when it means something)."""
    data = spec.get("data") or {}
    if not spec.get("epochs"):
        return "it trained no full epochs (epochs = 0)"
    if data and not data.get("accuracy_meaningful", True):
        return f"its data set ({data.get('name')}) is synthetic with random labels"
    return None


def recommend(exp: Experiment, share: float = SHARE_OF_BEST) -> list[Recommendation]:
    """One recommendation per framework and variant of ``exp``, in the experiment's framework order.

    Only sweep trials count (max-batch probes time too few steps to rank by). Frameworks with only a
    max-batch result get a recommendation that says no sweep ran. An accuracy that means nothing
    (:func:`accuracy_unusable`) is dropped, so no accuracy cost is computed from it.
    """
    sweep = [t for t in exp.trials if t.get("purpose") in (None, "sweep")]
    if accuracy_unusable(exp.spec):
        sweep = [t | {"accuracy": None} for t in sweep]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in sweep:
        groups.setdefault((t["framework"], _variant(t)), []).append(t)
    order = {fw: i for i, fw in enumerate(exp.frameworks)}
    out = [recommend_group(fw, variant, rows, exp.maxbatch, exp.name, share)
           for (fw, variant), rows in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0]))]
    for fw in dict.fromkeys(r["framework"] for r in exp.maxbatch):
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


RULE_TEXT = (f"Recommended: the smallest batch size whose mean throughput over the repeats is at least "
             f"{SHARE_OF_BEST:.0%} of the best mean throughput (the knee of the curve). Its range applies the "
             "same bar to mean - sd and mean + sd; it is supported only with two or more repeats at every "
             "size up to the best and a range of one size. Accuracy cost = best mean accuracy - the size's "
             "mean accuracy (points). The largest size that fits comes from the max-batch search.")


#: the columns of the recommendation table, as (key, header), shared by the PDF and the terminal
TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("framework", "framework"), ("recommended", "recommended batch"), ("why", "why"),
    ("max_fit", "max that fits"), ("throughput", "samples/s: recommended vs best"),
    ("accuracy", "accuracy %: recommended vs best"),
)


def _tput_text(s: SizeStats | None) -> str:
    if s is None:
        return "-"
    sd = f" ± {s.samples_per_s_sd:,.0f}" if s.samples_per_s_sd is not None else ""
    return f"{s.samples_per_s_mean:,.0f}{sd} (bs {s.batch_size})"


def _acc_text(s: SizeStats | None) -> str:
    if s is None or s.accuracy_mean is None:
        return "-"
    sd = f" ± {s.accuracy_sd * 100:.1f}" if s.accuracy_sd is not None else ""
    return f"{s.accuracy_mean * 100:.1f}{sd}"


def table_rows(recs: Sequence[Recommendation], show_variant: bool = False) -> list[dict[str, str]]:
    """The recommendation table as text cells (keys of :data:`TABLE_COLUMNS`)."""
    rows = []
    for r in recs:
        name = f"{r.framework} ({r.variant})" if show_variant and r.variant else r.framework
        if r.batch_size is None:
            size = "none"
        else:
            size = str(r.batch_size) + ("" if r.range_lo == r.range_hi else f" (range {r.range_lo}–{r.range_hi})")
            size += "" if r.supported else ", tentative"
        fit = "-" if r.max_fit is None or r.max_fit.max_batch is None else str(r.max_fit.max_batch)
        if r.max_fit is not None and r.max_fit.max_batch is not None and r.max_fit.margin_mib:
            fit += f" ({r.max_fit.recommended_batch} with a {r.max_fit.margin_mib:g} MiB margin)"
        best = r.at(r.best_batch)
        rows.append({"framework": name, "recommended": size, "why": r.why, "max_fit": fit,
                     "throughput": f"{_tput_text(r.at(r.batch_size))} vs {_tput_text(best)}",
                     "accuracy": f"{_acc_text(r.at(r.batch_size))} vs {_acc_text(best)}"})
    return rows


def show_variants(recs: Sequence[Recommendation]) -> bool:
    """Whether some framework has more than one variant (then the variant is printed with its name)."""
    names = [r.framework for r in recs]
    return len(names) != len(set(names))
