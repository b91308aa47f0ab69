"""Our run beside the published Ohio State figures (Yin 2020), and which of its findings hold here.

Public API (the report imports these):

* :func:`load_reference` — the thesis's figures, shipped as ``report/reference/osu_yin2020.csv``.
* :func:`side_by_side` — per framework, batch size and metric: our mean ± sd over repeats beside
  the thesis's value, with the difference.
* :func:`thesis_findings` — the thesis's qualitative findings, each re-computed from our trials:
  holds ``True``/``False``, or ``None`` when this run cannot measure it (e.g. no GPU).

Nothing here is canned: every verdict and every evidence sentence is computed from the trials.
``batchscope compare DIR`` prints both tables.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

from harness.cells import Stat
from harness.cells import group as series_groups
from harness.store import TrialRecord

REFERENCE_FILE = "osu_yin2020.csv"
#: the data set the thesis's accuracy was measured on; accuracy on any other is shown, not differenced
REFERENCE_DATASET = "cifar10"
REFERENCE_EPOCHS = 10
#: published metric name -> (our metric name, our unit). Memory "MB" is read as MiB (see reference/README.md).
_METRIC_MAP = {
    "gpu_util_pct": ("gpu_util_pct", "%"),
    "gpu_mem_mb": ("gpu_mem_mib", "MiB"),
    "accuracy_pct_10ep": ("accuracy_pct", "%"),
}
METRICS = ("gpu_util_pct", "gpu_mem_mib", "accuracy_pct")
UNITS = {"gpu_util_pct": "%", "gpu_mem_mib": "MiB", "accuracy_pct": "%"}
#: the thesis's "large batches": where its memory gap between frameworks opens (MXNet jumps at 128)
LARGE_BATCH = 128


def load_reference() -> list[dict[str, Any]]:
    """The thesis's figures, with our metric names.

    Returns:
        Rows with keys framework, batch_size (int), metric (``gpu_util_pct`` | ``gpu_mem_mib`` |
        ``accuracy_pct``), value (float), unit and source (the citation).
    """
    text = resources.files("report").joinpath("reference").joinpath(REFERENCE_FILE).read_text(encoding="utf-8")
    out = []
    for raw in csv.DictReader(io.StringIO(text)):
        metric, unit = _METRIC_MAP[raw["metric"]]
        out.append({"framework": raw["framework"], "batch_size": int(raw["batch_size"]), "metric": metric,
                    "value": float(raw["value"]), "unit": unit, "source": raw["source"]})
    return out


def _sweep_rows(trials: Iterable[Mapping[str, Any]]) -> list[TrialRecord]:
    """Trials of sweeps (max-batch probes measure something else and are left out), as records (a plain dict row
    read into one)."""
    return [t for t in map(TrialRecord.of, trials) if t.settings.purpose in (None, "sweep")]


def _our_value(trial: TrialRecord, metric: str) -> float | None:
    """One trial's figure for ``metric``, or None where it was not measured."""
    if trial.status != "ok":
        return None
    if metric == "gpu_util_pct":
        return _num(trial.sampler.get("gpu_util_pct"))
    if metric == "gpu_mem_mib":
        # the process's own GPU memory is what the framework costs; the device total is the fallback
        # (the thesis read the device total, on a card with nothing else running)
        own = _num(trial.sampler.get("proc_gpu_mem_peak_mib"))
        return own if own is not None else _num(trial.sampler.get("gpu_mem_used_peak_mib"))
    acc = _num(trial.metrics.accuracy)
    if acc is None or not accuracy_meaningful(trial.settings.dataset):
        return None
    return acc * 100.0


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def accuracy_meaningful(dataset: str | None) -> bool:
    """False for data sets whose accuracy says nothing (synthetic noise); unknown names count as real."""
    from harness.data.known import DATASETS

    info = DATASETS.get(dataset or "")
    return info.accuracy_meaningful if info is not None else True


def _mean_sd(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sd over repeats, by the one implementation every consumer uses (:class:`harness.cells.Stat`)."""
    stat = Stat.of(values)
    return (None, None) if stat is None else (stat.mean, stat.sd)


def side_by_side(trials: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per series (:func:`harness.cells.group`), batch size and metric: ours (mean over ok repeats) beside the thesis's.

    A series is a framework under one setting; a plain sweep's series are named by the framework alone, so its
    rows line up with the thesis's. Rows of another setting are named ``framework [setting]`` and never averaged in.

    Args:
        trials: rows of the store's ``trials`` table.

    Returns:
        Rows with keys framework, batch_size, metric, ours, ours_sd (None with fewer than two
        repeats), n (repeats that measured it), theirs (None where the thesis has no figure), diff
        (ours - theirs; None where either is missing, and for accuracy measured on another data set
        than the thesis's CIFAR-10), unit. Sorted by framework, batch size, metric.
    """
    ref = {(r["framework"], r["batch_size"], r["metric"]): r["value"] for r in load_reference()}
    groups = {(g.name, bs): rows for g in series_groups(_sweep_rows(trials)) for bs, rows in g.by_batch.items()}
    out = []
    for (fw, bs), group in sorted(groups.items()):
        same_data = all(t.settings.dataset == REFERENCE_DATASET for t in group)
        for metric in METRICS:
            values = [v for v in (_our_value(t, metric) for t in group) if v is not None]
            ours, sd = _mean_sd(values)
            theirs = ref.get((fw, bs, metric))
            comparable = metric != "accuracy_pct" or same_data
            diff = ours - theirs if ours is not None and theirs is not None and comparable else None
            out.append({"framework": fw, "batch_size": bs, "metric": metric, "ours": ours, "ours_sd": sd,
                        "n": len(values), "theirs": theirs, "diff": diff, "unit": UNITS[metric]})
    return out


# ---------------------------------------------------------------- findings
def _means(trials: Sequence[Mapping[str, Any]], metric: str) -> dict[str, dict[int, float]]:
    """framework -> batch size -> mean of ``metric`` over ok repeats (only where measured)."""
    out: dict[str, dict[int, float]] = {}
    for row in side_by_side(trials):
        if row["metric"] == metric and row["ours"] is not None:
            out.setdefault(row["framework"], {})[row["batch_size"]] = row["ours"]
    return out


def _spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Rank correlation (average ranks for ties); None when either side is constant."""
    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r

    if len(xs) < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    if len(set(rx)) < 2 or len(set(ry)) < 2:
        return None
    return statistics.correlation(rx, ry)


def _fmt_series(series: dict[int, float], unit: str) -> str:
    return ", ".join(f"{bs}: {v:.1f}{'' if unit == '%' else ' '}{unit}" for bs, v in sorted(series.items()))


def _no_gpu(trials: Sequence[Mapping[str, Any]]) -> str:
    devices = sorted({str(t.device) for t in _sweep_rows(trials) if t.device})
    where = f" (device: {', '.join(devices)})" if devices else ""
    return f"this run measured no GPU{where}, so this cannot be checked here"


def unreadable(trials: Sequence[Mapping[str, Any]], column: str, framework: str | None = None) -> list[TrialRecord]:
    """The ok sweep trials (of ``framework``, or all) whose ``column`` is NULL because the sampler could not read
    it (``readings_note``: a window shorter than NVML can read, harness/monitor/windows.py)."""
    return [t for t in _sweep_rows(trials) if t.status == "ok" and t.get(column) is None
            and t.sampler.get("readings_note") and (framework is None or t.settings.framework == framework)]


def _not_readable(trials: Sequence[Mapping[str, Any]], what: str) -> str:
    """The evidence of a verdict that cannot be given because ``trials`` (from :func:`unreadable`) have no reading."""
    cells_text = ", ".join(dict.fromkeys(f"{t.get('framework')} batch {t.get('batch_size')}" for t in trials))
    return (f"Not measurable: {what} could not be read in {len(trials)} trial(s) ({cells_text}); "
            f"{trials[0]['readings_note']}.")


def _finding_most_memory(trials: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    finding = f"MXNet uses the most GPU memory at large batch sizes (>= {LARGE_BATCH})"
    mem = _means(trials, "gpu_mem_mib")
    large = {fw: {bs: v for bs, v in s.items() if bs >= LARGE_BATCH} for fw, s in mem.items()}
    common = set.intersection(*(set(s) for s in large.values())) if large else set()
    if len(large) < 2 or not common:
        why = _no_gpu(trials) if not mem else (
            f"needs GPU memory of two or more frameworks at a common batch size >= {LARGE_BATCH}; "
            f"this run has {sorted(mem)}")
        return {"finding": finding, "holds": None, "evidence": f"Not measurable: {why}."}
    avg = {fw: statistics.fmean(s[bs] for bs in common) for fw, s in large.items()}
    top = max(avg, key=lambda fw: avg[fw])
    sizes = ", ".join(map(str, sorted(common)))
    detail = "; ".join(f"{fw} {v:.0f} MiB" for fw, v in sorted(avg.items(), key=lambda kv: -kv[1]))
    return {"finding": finding, "holds": top == "mxnet",
            "evidence": f"Mean GPU memory at batch sizes {sizes}: {detail}; {top} uses the most."}


def _sds(trials: Sequence[Mapping[str, Any]], metric: str) -> dict[tuple[str, int], float]:
    """(framework, batch size) -> sd over repeats of ``metric``, where there were two or more."""
    return {(r["framework"], r["batch_size"]): r["ours_sd"] for r in side_by_side(trials)
            if r["metric"] == metric and r["ours_sd"] is not None}


def _finding_accuracy_peak(trials: Sequence[Mapping[str, Any]], framework: str, series: dict[int, float],
                           dataset: str) -> dict[str, Any]:
    finding = (f"{framework}: accuracy after training peaks at a middle batch size, "
               "not the smallest or largest")
    if len(series) < 3:
        return {"finding": finding, "holds": None,
                "evidence": f"Not measurable: needs accuracy at 3 or more batch sizes; {framework} has "
                            f"{len(series)}."}
    best = max(series, key=lambda bs: series[bs])
    lo, hi = min(series), max(series)
    text = (f"Accuracy on {dataset} (%, mean over repeats) by batch size: {_fmt_series(series, '%')}; "
            f"best at batch {best} ({series[best]:.1f}%), {series[lo]:.1f}% at {lo} and "
            f"{series[hi]:.1f}% at {hi}")
    if not lo < best < hi:
        return {"finding": finding, "holds": False, "evidence": text + "."}
    # a peak smaller than the run-to-run spread is noise, not a peak
    sds = _sds(trials, "accuracy_pct")
    for end in (lo, hi):
        spread = max(sds.get((framework, best), 0.0), sds.get((framework, end), 0.0))
        if series[best] - series[end] <= spread:
            return {"finding": finding, "holds": False,
                    "evidence": f"{text}; the peak beats batch {end} by only "
                                f"{series[best] - series[end]:.2f} points, within the spread over repeats "
                                f"(sd {spread:.1f}), so it is no peak."}
    return {"finding": finding, "holds": True, "evidence": text + "."}


def _finding_util_trend(trials: Sequence[Mapping[str, Any]], framework: str, rising: bool) -> dict[str, Any]:
    util = _means(trials, "gpu_util_pct").get(framework, {})
    if rising:
        finding = f"{framework}: GPU usage rises with batch size"
    else:
        finding = f"{framework}: GPU usage peaks at a middle batch size, then falls"
    unread = unreadable(trials, "gpu_util_pct", framework)
    if unread:
        return {"finding": finding, "holds": None, "evidence": _not_readable(unread, "GPU usage")}
    if not _means(trials, "gpu_util_pct"):
        return {"finding": finding, "holds": None, "evidence": f"Not measurable: {_no_gpu(trials)}."}
    if len(util) < 3:
        return {"finding": finding, "holds": None,
                "evidence": f"Not measurable: needs GPU usage of {framework} at 3 or more batch sizes; "
                            f"this run has {len(util)}."}
    sizes = sorted(util)
    values = [util[bs] for bs in sizes]
    if rising:
        rho = _spearman([float(s) for s in sizes], values)
        holds = rho is not None and rho >= 0.7 and values[-1] > values[0]
        rho_text = "undefined (constant usage)" if rho is None else f"{rho:+.2f}"
        return {"finding": finding, "holds": holds,
                "evidence": f"GPU usage by batch size: {_fmt_series(util, '%')}; rank correlation with batch "
                            f"size {rho_text} (rises if >= +0.70 and the largest beats the smallest)."}
    best = max(util, key=lambda bs: util[bs])
    holds = sizes[0] < best < sizes[-1] and util[best] > util[sizes[-1]]
    return {"finding": finding, "holds": holds,
            "evidence": f"GPU usage by batch size: {_fmt_series(util, '%')}; highest at batch {best}."}


def _finding_pytorch_lowest(trials: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    finding = "PyTorch keeps the GPU least busy (lowest GPU usage) at most batch sizes"
    util = _means(trials, "gpu_util_pct")
    unread = unreadable(trials, "gpu_util_pct")
    if unread:  # the lowest among the trials that could be read is no answer
        return {"finding": finding, "holds": None, "evidence": _not_readable(unread, "GPU usage")}
    if not util:
        return {"finding": finding, "holds": None, "evidence": f"Not measurable: {_no_gpu(trials)}."}
    common = sorted(set.intersection(*(set(s) for s in util.values())))
    if "pytorch" not in util or len(util) < 2 or not common:
        return {"finding": finding, "holds": None,
                "evidence": "Not measurable: needs GPU usage of PyTorch and another framework at a common "
                            f"batch size; this run has {sorted(util)}."}
    lowest = [bs for bs in common if min(util, key=lambda fw: util[fw][bs]) == "pytorch"]
    return {"finding": finding, "holds": len(lowest) * 2 > len(common),
            "evidence": f"PyTorch has the lowest GPU usage at {len(lowest)} of {len(common)} common "
                        "batch sizes"
                        + (f" ({', '.join(map(str, lowest))})." if lowest else ".")}


def thesis_findings(trials: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The thesis's qualitative findings, each checked against ``trials``.

    Returns:
        Rows with keys finding (the claim), holds (True, False, or None when this run cannot
        measure it) and evidence (a sentence built from the measured figures).
    """
    rows = _sweep_rows(trials)
    devices = sorted({t.series.device for t in rows})
    if len(devices) > 1:  # allow_mixed_devices: judged on each device's trials apart, never across (issue 29)
        return [dict(f, finding=f"[{d or 'device unresolved'}] {f['finding']}")
                for d in devices for f in thesis_findings([t for t in rows if t.series.device == d])]
    out = [_finding_most_memory(rows), _finding_util_trend(rows, "mxnet", rising=True),
           _finding_util_trend(rows, "tensorflow", rising=False), _finding_pytorch_lowest(rows)]
    datasets = sorted({str(t.settings.dataset) for t in rows})
    acc = _means(rows, "accuracy_pct")
    if not acc:
        meaningless = [d for d in datasets if not accuracy_meaningful(d)]
        why = (f"the data set ({', '.join(meaningless)}) is random noise, so its accuracy means nothing"
               if meaningless else "no trial of this run measured accuracy (eval off, or no ok trial)")
        out.append({"finding": "accuracy after training peaks at a middle batch size", "holds": None,
                    "evidence": f"Not measurable: {why}."})
    for fw in sorted(acc):
        out.append(_finding_accuracy_peak(rows, fw, acc[fw], "/".join(datasets)))
    return out


