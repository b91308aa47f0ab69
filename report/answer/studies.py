"""The seed studies' questions, answered from the data: one verdict per framework, with its numbers.

An experiment file names its study (``study = "optimizer_batch"``...) and compares named variants
(:mod:`harness.config.experiment`). Here each study's claim is judged on the stored trials:

* ``optimizer_batch``: Adam holds accuracy to a larger batch than SGD;
* ``augmentation``: with augmentation the best batch is larger;
* ``lr_scaling``: a scaled learning rate (linear or sqrt) keeps accuracy flatter across batch sizes than a
  fixed one;
* ``batch_shapes``: batch 512 trains faster than 500 by more than the noise (Welch's 95 % interval of
  the difference over repeats), with the multiples of 8 against the other sizes beside it;
* ``oom_mitigations``: each variant lowers peak memory against the first (the plain run) at the same
  effective batch by more than the noise (the repeats' spread, at least 2 % of the peak); what it costs or
  gains in throughput and accuracy is reported beside the verdict.

A claim the data do not support is reported as not holding, with the numbers; one the data cannot
judge (a variant missing, no repeats to tell noise) says so. Cells are keyed by the *effective* batch
(micro-batch x accumulation steps): the samples per optimizer update, which is what accuracy depends on.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.cells import Series, Stat, group
from harness.store import TrialRecord
from report.answer.finding import StudyFinding, _difference, _t95, series_label  # noqa: F401 - their home was here
from report.answer.ramp_study import CLAIM as RAMP_CLAIM
from report.answer.ramp_study import batch_ramp

#: a memory saving smaller than this share of the baseline's peak is not called a saving
MEMORY_FLOOR = 0.02
#: accuracy within this many percentage points of a variant's best (plus the best cell's sd) "holds"
HOLD_TOLERANCE_PP = 1.0
STUDY_CLAIMS = {
    "optimizer_batch": "Adam holds accuracy to a larger batch than SGD",
    "augmentation": "augmentation makes the most accurate batch larger",
    "lr_scaling": "scaling the learning rate with the batch (linear or sqrt) keeps accuracy flatter than a fixed one",
    "batch_shapes": "batch 512 trains faster than 500 by more than the noise",
    "oom_mitigations": "the mitigation lowers peak memory at the same effective batch",
    "batch_ramp": RAMP_CLAIM,
}


def line_label(line: Series) -> str:
    """How a legend, a table cell or a sentence names one line (:attr:`harness.cells.Series.line`)."""
    return series_label(line.framework, line.variant)


def variant_names(trials: Iterable[Mapping[str, Any]], spec: dict[str, Any] | None = None) -> list[str]:
    """Variants in the experiment file's order (then any other found in the rows)."""
    rows = [TrialRecord.of(t) for t in trials]
    listed = [v["name"] for v in (spec or {}).get("variants", []) if isinstance(v, dict) and "name" in v]
    found = [t.settings.variant or "" for t in rows]
    return [v for v in listed if v in found] + sorted({v for v in found if v} - set(listed))


# ---------------------------------------------------------------- cells
def _stat(rows: Sequence[Mapping[str, Any]], column: str, scale: float = 1.0) -> Stat | None:
    return Stat.of([float(r[column]) * scale for r in rows if r.get(column) is not None])


def series_cells(trials: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict[int, list[TrialRecord]]]:
    """(framework, series label) -> effective batch -> the ok sweep trials there (:func:`harness.cells.group`).

    The label is the variant's name where only named variants differ (the usual study); where precision or
    denormals also differ it names them too, so two settings are never one cell.
    """
    ok = [t for t in map(TrialRecord.of, trials) if t.status == "ok" and t.settings.purpose in (None, "sweep")]
    groups = group(ok, batch="effective")
    named = Counter((g.framework, g.series.variant) for g in groups)
    out: dict[tuple[str, str], dict[int, list[TrialRecord]]] = {}
    for g in groups:
        key = g.series.variant if named[(g.framework, g.series.variant)] == 1 else g.label
        out[(g.framework, key)] = g.by_batch
    return out


def _acc(rows: Sequence[Mapping[str, Any]]) -> Stat | None:
    return _stat(rows, "accuracy", 100.0)


def variant_setting(spec: dict[str, Any], variant: str, key: str) -> Any:
    """A variant's value of ``key``: its own setting, else the experiment's (from the resolved spec)."""
    for v in spec.get("variants") or []:
        if isinstance(v, dict) and v.get("name") == variant and key in (v.get("settings") or {}):
            return v["settings"][key]
    return spec.get(key)


def _at_largest(by_batch: dict[int, list[TrialRecord]]) -> str:
    """", 80.3% at batch 256": the accuracy at the largest batch measured (where the variants part ways)."""
    accs = {b: s for b, rows in by_batch.items() if (s := _acc(rows)) is not None}
    if len(accs) < 2:
        return ""
    largest = max(accs)
    return f", {accs[largest].mean:.1f}% at batch {largest}"


def holds_to(by_batch: dict[int, list[TrialRecord]]) -> tuple[int, float, int] | None:
    """(largest batch within tolerance of the best accuracy, best accuracy %, batch of the best)."""
    accs = {b: s for b, rows in by_batch.items() if (s := _acc(rows)) is not None}
    if not accs:
        return None
    best_b = max(accs, key=lambda b: accs[b].mean)
    best = accs[best_b]
    floor = best.mean - HOLD_TOLERANCE_PP - (best.sd or 0.0)
    return max(b for b, s in accs.items() if s.mean >= floor), best.mean, best_b


# ---------------------------------------------------------------- the studies
def _per_framework(trials: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[int, list[TrialRecord]]]]:
    out: dict[str, dict[str, dict[int, list[TrialRecord]]]] = {}
    for (fw, variant), by_batch in series_cells(trials).items():
        out.setdefault(fw, {})[variant] = by_batch
    return out


def optimizer_batch(trials: Sequence[Mapping[str, Any]], spec: dict[str, Any]) -> list[StudyFinding]:
    """Per framework: the largest batch each optimizer holds accuracy to; Adam's against SGD's."""
    out = []
    claim = STUDY_CLAIMS["optimizer_batch"]
    for fw, variants in _per_framework(trials).items():
        held = {}
        for variant, by_batch in variants.items():
            h = holds_to(by_batch)
            if h is not None:
                held[variant] = (str(variant_setting(spec, variant, "optimizer")), *h)
        words = "; ".join(f"{v} ({opt}) best {acc:.1f}% at batch {bb}, within {HOLD_TOLERANCE_PP:g} pp up to "
                          f"batch {to}{_at_largest(variants[v])}" for v, (opt, to, acc, bb) in held.items())
        adam = [h for h in held.values() if h[0] == "adam"]
        sgd = [h for h in held.values() if h[0] == "sgd"]
        if not adam or not sgd:
            out.append(StudyFinding("optimizer_batch", fw, claim, None,
                                    f"needs an Adam and an SGD variant with accuracy; found {words or 'none'}"))
            continue
        out.append(StudyFinding("optimizer_batch", fw, claim, adam[0][1] > sgd[0][1], words + "."))
    return out


def augmentation(trials: Sequence[Mapping[str, Any]], spec: dict[str, Any]) -> list[StudyFinding]:
    """Per framework: the most accurate batch with and without augmentation."""
    out = []
    claim = STUDY_CLAIMS["augmentation"]
    for fw, variants in _per_framework(trials).items():
        best: dict[str, tuple[str, int, float, int]] = {}
        for variant, by_batch in variants.items():
            h = holds_to(by_batch)
            if h is not None:
                best[variant] = (str(variant_setting(spec, variant, "augment") or "none"), h[2], h[1], h[0])
        words = "; ".join(f"{v} (augment {a}) best {acc:.1f}% at batch {bb}, within {HOLD_TOLERANCE_PP:g} pp up to "
                          f"{to}{_at_largest(variants[v])}" for v, (a, bb, acc, to) in best.items())
        with_aug = [b for b in best.values() if b[0] != "none"]
        without = [b for b in best.values() if b[0] == "none"]
        if not with_aug or not without:
            out.append(StudyFinding("augmentation", fw, claim, None,
                                    f"needs a variant with and one without augmentation; found {words or 'none'}"))
            continue
        out.append(StudyFinding("augmentation", fw, claim, with_aug[0][1] > without[0][1], words + "."))
    return out


def lr_scaling(trials: Sequence[Mapping[str, Any]], spec: dict[str, Any]) -> list[StudyFinding]:
    """Per framework: the spread of accuracy across batch sizes under each learning-rate rule."""
    out = []
    claim = STUDY_CLAIMS["lr_scaling"]
    for fw, variants in _per_framework(trials).items():
        spread: dict[str, tuple[str, float, int]] = {}
        for variant, by_batch in variants.items():
            means = [s.mean for rows in by_batch.values() if (s := _acc(rows)) is not None]
            if len(means) >= 2:
                policy = str(variant_setting(spec, variant, "lr_policy") or "fixed")
                spread[variant] = (policy, max(means) - min(means), len(means))
        words = "; ".join(f"{v} ({p}) spans {s:.1f} pp over {n} batch sizes" for v, (p, s, n) in spread.items())
        fixed = [s for s in spread.values() if s[0] == "fixed"]
        scaled = [s for s in spread.values() if s[0] != "fixed"]
        if not fixed or not scaled:
            out.append(StudyFinding("lr_scaling", fw, claim, None, "needs a fixed and a scaled rule, each at two "
                                    f"batch sizes; found {words or 'none'}"))
            continue
        flattest = min(spread.items(), key=lambda kv: kv[1][1])[0]
        out.append(StudyFinding("lr_scaling", fw, claim, min(s[1] for s in scaled) < fixed[0][1],
                                f"{words}; flattest: {flattest}."))
    return out


#: two-sided 95 % critical values of Student's t by degrees of freedom (larger df: the next lower entry,
#: which is conservative); scipy is not a dependency of the report
def batch_shapes(trials: Sequence[Mapping[str, Any]]) -> list[StudyFinding]:
    """Per framework: throughput at 512 against 500, and multiples of 8 against the other sizes."""
    out = []
    claim = STUDY_CLAIMS["batch_shapes"]
    for fw, variants in _per_framework(trials).items():
        for variant, by_batch in variants.items():
            speed = {b: s for b, rows in by_batch.items() if (s := _stat(rows, "step_samples_per_s")) is not None}
            if 512 not in speed or 500 not in speed:
                out.append(StudyFinding("batch_shapes", fw, claim, None,
                                        f"needs finished trials at 500 and 512; measured at {sorted(speed)}", variant))
                continue
            diff, noise = _difference(speed[512], speed[500])
            text = (f"512: {speed[512].text('.1f')} samples/s, 500: {speed[500].text('.1f')} "
                    f"({diff / speed[500].mean:+.1%}")
            text += f", noise ±{noise:.1f} samples/s)" if noise is not None else "; one repeat: no noise estimate)"
            eights = [s.mean for b, s in speed.items() if b % 8 == 0]
            others = [s.mean for b, s in speed.items() if b % 8 != 0]
            if eights and others:
                text += (f"; multiples of 8 average {statistics.fmean(eights):.1f} samples/s, the other sizes "
                         f"{statistics.fmean(others):.1f}")
            out.append(StudyFinding("batch_shapes", fw, claim, None if noise is None else diff > noise, text + ".",
                                    variant))
    return out


def _memory(rows: Sequence[Mapping[str, Any]]) -> tuple[str, Stat] | None:
    for column in ("framework_peak_mib", "proc_gpu_mem_mib", "rss_peak_mib"):  # the device's view first
        s = _stat(rows, column)
        if s is not None:
            return column, s
    return None


def oom_mitigations(trials: Sequence[Mapping[str, Any]], variants_in_order: Sequence[str]) -> list[StudyFinding]:
    """Per framework and variant: memory saved and throughput lost against the first variant, at the
    largest effective batch both finished."""
    out = []
    claim = STUDY_CLAIMS["oom_mitigations"]
    for fw, variants in _per_framework(trials).items():
        order = [v for v in variants_in_order if v in variants] or sorted(variants)
        base_name, base = order[0], variants[order[0]]
        for name in order[1:]:
            mine = variants[name]
            common = sorted(set(base) & set(mine))
            if not common:
                out.append(StudyFinding("oom_mitigations", fw, claim, None,
                                        f"no effective batch finished in both {base_name} and {name}", name))
                continue
            b = common[-1]
            m_base, m_mine = _memory(base[b]), _memory(mine[b])
            s_base, s_mine = _stat(base[b], "step_samples_per_s"), _stat(mine[b], "step_samples_per_s")
            if m_base is None or m_mine is None or m_base[0] != m_mine[0] or s_base is None or s_mine is None:
                out.append(StudyFinding("oom_mitigations", fw, claim, None,
                                        f"memory or throughput not measured at batch {b}", name))
                continue
            saved = m_base[1].mean - m_mine[1].mean
            change = s_mine.mean / s_base.mean - 1.0
            text = (f"at effective batch {b}, {m_mine[0]} {m_mine[1].mean:.0f} MiB against {m_base[1].mean:.0f} "
                    f"({base_name}): " + (f"{saved:.0f} MiB saved" if saved >= 0 else f"{-saved:.0f} MiB more")
                    + f"; throughput {s_mine.mean:.1f} against {s_base.mean:.1f} samples/s ({change:+.1%}: "
                    + ("a cost" if change < 0 else "no cost here") + ")")
            a_base, a_mine = _acc(base[b]), _acc(mine[b])
            if a_base is not None and a_mine is not None:
                text += f"; accuracy {a_mine.mean:.1f}% against {a_base.mean:.1f}%"
            beyond = sorted(set(mine) - set(base))
            if beyond:
                text += f"; finished at effective batch {beyond} where {base_name} did not"
            # the repeats' spread where there is one; at least MEMORY_FLOOR of the baseline, so that one repeat's
            # allocator jitter is not read as a saving
            noise = max((m_base[1].sd or 0.0) + (m_mine[1].sd or 0.0), MEMORY_FLOOR * m_base[1].mean)
            out.append(StudyFinding("oom_mitigations", fw, claim, saved > noise, text + ".", name))
    return out


def study_findings(spec: dict[str, Any], trials: Sequence[Mapping[str, Any]],
                   curves: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> list[StudyFinding]:
    """The findings of the experiment's ``study`` (its resolved spec) on ``trials`` (and their learning ``curves`` by
    trial hash, which ``batch_ramp`` reads its times to target from); empty without a study."""
    study = spec.get("study") or ""
    if study == "batch_ramp":
        return batch_ramp(trials, curves or {}, spec)
    if study == "optimizer_batch":
        return optimizer_batch(trials, spec)
    if study == "augmentation":
        return augmentation(trials, spec)
    if study == "lr_scaling":
        return lr_scaling(trials, spec)
    if study == "batch_shapes":
        return batch_shapes(trials)
    if study == "oom_mitigations":
        return oom_mitigations(trials, variant_names(trials, spec))
    return []
