"""The report's tables, each in two forms: formatted text for the PDF and raw numbers for its CSV.

Both forms come from the same cells (see :mod:`harness.cells`), so the CSV beside the PDF is the
table the reader sees, with full precision and the spread and count of every value.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cells import METRICS, Cell, has_metric
from harness.monitor.fields import shown_in
from harness.records import MaxBatchResult
from harness.store.maxbatch_row import maxbatch_row
from report.answer.recommend import Recommendation
from report.answer.recommend_table import TABLE_COLUMNS as RECOMMEND_COLUMNS
from report.answer.recommend_table import show_variants, table_rows
from report.answer.studies import line_label
from report.load import StoredExperiment

#: the headline table is printed in two parts so it fits a portrait page
#: the headline tables' columns: the worker's figures, and the sampler columns the field table shows there
SPEED_COLUMNS = ("step_samples_per_s", "e2e_samples_per_s", "step_time_ms_median", "step_time_ms_iqr",
                 "drift_change_pct", "achieved_gflop_per_s", "mfu_pct", *shown_in("speed table"), "j_per_sample")
MEMORY_COLUMNS = ("framework_peak_mib", *shown_in("memory table"), "accuracy_pct")


@dataclass(frozen=True)
class Table:
    """One table: what the PDF prints and what the CSV holds."""

    key: str
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    csv_headers: tuple[str, ...]
    csv_rows: tuple[tuple[Any, ...], ...]
    note: str = ""

    def write_csv(self, path: Path) -> None:
        """Write the raw table (header + rows) to ``path``."""
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(self.csv_headers)
            writer.writerows(("" if v is None else v for v in row) for row in self.csv_rows)


def _header(key: str) -> str:
    m = METRICS[key]
    return f"{m.label} ({m.unit})"


def headline_csv(cell_list: Sequence[Cell]) -> tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]:
    """Every metric of every cell: mean, sd and count, plus the status counts. The cell's series as data, one column
    each (``framework``, the named ``variant``, the ``device`` it was told to use where resolved), and ``settings``:
    the words that tell it from the other cells at its size (the printed table's ``[...]``), never one label to
    split."""
    headers = ["framework", "variant", "device", "settings", "batch_size", "status", "trials_n", "ok_n",
               "drift_flagged_n", "cpu_denormals", "precision_math"]
    for key in METRICS:
        headers += [f"{key}_mean", f"{key}_sd", f"{key}_n"]
    rows = []
    for c in cell_list:
        series = c.series if c.series is not None else c.line
        row: list[Any] = [series.framework, series.variant, series.device, c.variant, c.batch_size, c.status_text(),
                          c.n, c.n_ok, c.drift_flagged_n, "/".join(c.cpu_denormals), "/".join(map(str, c.arithmetic))]
        for key in METRICS:
            s = c.get(key)
            row += [s.mean, s.sd, s.n] if s else [None, None, 0]
        rows.append(tuple(row))
    return tuple(headers), tuple(rows)


def headline(cell_list: Sequence[Cell], columns: Sequence[str], key: str, title: str) -> Table | None:
    """A part of the per framework × batch table (only the columns with data); None when none has any."""
    present = [k for k in columns if has_metric(cell_list, k)]
    if not present:
        return None
    rows = []
    for c in cell_list:
        values = [c.get(k).text(METRICS[k].fmt) if c.get(k) else "-" for k in present]  # type: ignore[union-attr]
        name = line_label(c.line) + (f" [{c.variant}]" if c.variant else "")
        rows.append((name, str(c.batch_size), c.status_text(), *values))
    csv_headers, csv_rows = headline_csv(cell_list)
    return Table(key=key, title=title, headers=("framework", "batch", "status", *map(_header, present)),
                 rows=tuple(rows), csv_headers=csv_headers, csv_rows=csv_rows,
                 note="mean ± sd over the repeats that finished; a single value where only one did. Step "
                      "throughput: batch / median step (forward, backward, update) over every post-warm-up step; "
                      "end-to-end: their samples / their wall time incl. batch preparation. Drift: late vs early "
                      "median step time, shown where a trial measured it (flagged trials are named in the "
                      "findings).")


MAXBATCH_CSV_COLUMNS = (
    "framework", "model", "device", "precision", "strategy", "budget_mib", "budget_kind", "margin_mib",
    "max_batch", "first_fail_batch", "first_fail_status", "recommended_batch", "recommended_pow2",
    "recommended_mult8", "formula_batch", "formula_error_pct", "probes_n", "wall_s", "param_count",
    "per_sample_activation_mib", "fit_a_mib", "fit_b_mib_per_sample", "first_fail_reason", "finished_at",
    "confirm_steps", "margin_jitter_mib", "margin_growth_mib", "margin_heap_mib", "margin_total_mib", "train_env_json",
    "verify_steps", "verify_status", "verify_reason", "setting", "accumulate_steps", "effective_batch",
    "answer_peak_mib", "answer_samples_per_s", "resolution", "cuda_context_mib",
    # issue 41: the boundary predicted from the framework's own estimate, beside the formula's and the measured one
    "estimate_batch", "estimate_error_pct", "estimate_mib_per_sample", "estimate_step_fixed_mib",
    "estimate_fixed_cost_mib", "estimate_note", "fit_source")


def _g(value: Any, fmt: str = "") -> str:
    if value is None or value == "":
        return "-"
    try:
        return format(float(value), fmt) if fmt else str(value)
    except (TypeError, ValueError):
        return str(value)


def maxbatch(rows: Sequence[MaxBatchResult]) -> Table | None:
    """The max-batch finder's results with the seed formula's estimate beside them."""
    if not rows:
        return None
    from harness.maxbatch.advice import answer_headroom_mib, jitter_advice, train_advice  # framework-free

    text_rows, advice = [], []
    for r in rows:
        spare = answer_headroom_mib(r)
        if (line := jitter_advice(r)) is not None:
            advice.append(f"{r.framework or '-'}: {line}.")
        if (line := train_advice(r)) is not None:
            advice.append(f"{r.framework or '-'}: {line}.")
        answer, recommended = r.answer, r.recommendation
        fail = (f"{_g(answer.fail_batch)} ({answer.fail_status or '-'})" if answer.fail_batch is not None
                else "none up to the cap" if answer.capped else "-")  # capped: max batch is the cap, not a boundary
        rec = (f"{_g(recommended.batch)} (pow2 {_g(recommended.pow2)}, "
               f"×8 {_g(recommended.mult8)})")
        formula = _g(r.formula.batch)
        if r.formula.error_pct is not None:
            formula += f" ({float(r.formula.error_pct):+.0f}%)"
        predicted = _g(r.estimate.batch)  # issue 41: "-" where the framework offers no estimate (TF, MXNet)
        if r.estimate.error_pct is not None:
            predicted += f" ({float(r.estimate.error_pct):+.1f}%)"
        setting = r.setting  # a "what helps" run's searches: the setting beside the framework
        who = str(r.framework or "-") + (f" · {setting}" if setting and setting != "plain" else "")
        text_rows.append((who, str(r.model or "-"),
                          f"{_g(r.budget_mib, '.0f')} MiB {r.budget_kind or ''}".strip(),
                          _g(answer.max_batch) + (f" (×{k} = {_g(answer.effective_batch)})"
                                                  if (k := r.accumulate_steps or 1) > 1 else ""),
                          "-" if spare is None else f"{spare:.1f} MiB", fail, rec,
                          predicted, formula,
                          f"{_g(r.probes.n)} / {_g(r.probes.wall_s, '.0f')} s",
                          str(r.strategy or "-") + (f", {answer.resolution}" if answer.resolution else "")))
    # the CSV keeps the store's column names: the store flattens the record to them
    csv_rows = tuple(tuple(maxbatch_row(r)[c] for c in MAXBATCH_CSV_COLUMNS) for r in rows)
    return Table(key="maxbatch", title="Largest batch that fits",
                 headers=("framework", "model", "budget", "max batch", "unused at max", "first failing",
                          "recommended", "predicted (error)",
                          "formula (error)", "probes / wall", "strategy, resolution"),
                 rows=tuple(text_rows), csv_headers=MAXBATCH_CSV_COLUMNS, csv_rows=csv_rows,
                 note="Measured with a full train step and an eval step in a fresh worker per probe (with "
                      "accumulation, max batch is the micro-batch, × steps = the effective batch); the "
                      "formula is the seed documents' (memory − model) / per-sample size, its error relative "
                      "to the measured maximum. Predicted: the boundary from the framework's own estimate of a "
                      "step's memory (PyTorch, JAX; none for TensorFlow and MXNet) and the fixed cost the first "
                      "probe measured, before any probe near it; its error relative to the measured maximum. "
                      "Unused at max: the budget minus the largest peak measured at the maximum. "
                      "Resolution: where the search stopped (exact: adjacent sizes; N%: the bracket "
                      "within N % of the answer; K: on multiples of K; docs/maxbatch.md)."
                      + "".join(f" {a}" for a in advice))


COMPARE_COLUMNS = ("framework", "batch_size", "metric", "ours", "ours_sd", "n", "theirs", "diff", "unit")
COMPARE_LABELS = {"gpu_util_pct": "GPU util.", "gpu_mem_mib": "GPU memory", "accuracy_pct": "accuracy"}


def comparison(rows: Sequence[dict[str, Any]]) -> Table | None:
    """Our figures beside the published ones (rows from :func:`report.answer.thesis.side_by_side`)."""
    if not rows:
        return None
    text_rows = []
    for r in rows:
        if r.get("ours") is None:
            continue  # printed only where this run measured the figure; the CSV keeps every row
        ours = _g(r.get("ours"), ".1f")
        if r.get("ours_sd") is not None:
            ours += f" ± {float(r['ours_sd']):.1f}"
        diff = "-" if r.get("diff") is None else f"{float(r['diff']):+.1f}"
        text_rows.append((str(r.get("framework")), str(r.get("batch_size")),
                          COMPARE_LABELS.get(str(r.get("metric")), str(r.get("metric"))), ours,
                          _g(r.get("n")), _g(r.get("theirs"), ".1f"), diff, str(r.get("unit") or "")))
    return Table(key="comparison", title="Side by side with the published figures",
                 headers=("framework", "batch", "metric", "this run", "n", "Yin 2020", "difference", "unit"),
                 rows=tuple(text_rows), csv_headers=COMPARE_COLUMNS,
                 csv_rows=tuple(tuple(r.get(c) for c in COMPARE_COLUMNS) for r in rows),
                 note="Yin 2020 measured on a GTX 1060 with the thesis's own model; differences in hardware "
                      "and model make these a sanity check, not a replication test.")


def runs(exp: StoredExperiment) -> Table:
    """The invocations that produced the experiment's results, with their exact command lines."""
    rows = tuple((str(r.run_id), str(r.started_at or "-"), str(r.command or "(not recorded)")) for r in exp.runs)
    return Table(key="runs", title="Runs", headers=("run", "started (UTC)", "command line"), rows=rows,
                 csv_headers=("run_id", "experiment", "started_at", "command", "spec_json"),
                 csv_rows=tuple((r.run_id, r.experiment, r.started_at, r.command,
                                 r["spec_json"]) for r in exp.runs))  # the CSV keeps the stored JSON text


def recommendation(recs: Sequence[Recommendation]) -> Table | None:
    """The report's first table: per series, the recommended batch size, why, its time to target, the throughput
    knee, the largest that fits, and accuracy at the recommendation vs the best (text shared with the CLI)."""
    if not recs:
        return None
    text = table_rows(recs, show_variants(recs))
    csv_headers = ("framework", "series", "variant", "recommended_batch", "range_lo", "range_hi", "supported",
                   "target_accuracy", "train_s_to_target_at_recommended", "steps_to_target_at_recommended",
                   "knee_batch", "best_throughput_batch", "samples_per_s_at_recommended", "samples_per_s_at_best",
                   "accuracy_at_recommended", "best_mean_accuracy", "b_crit", "b_crit_sizes", "max_batch_fits", "why")
    csv_rows = []
    for r in recs:
        rec, best, t = r.at(r.batch_size), r.at(r.best_batch), r.target_at(r.batch_size)
        csv_rows.append((r.framework, r.name, r.variant, r.batch_size, r.range_lo, r.range_hi, r.supported,
                         r.target and r.target.accuracy, t and t.train_s and t.train_s.mean,
                         t and t.steps and t.steps.mean, r.knee_batch, r.best_batch,
                         rec and rec.samples_per_s_mean, best and best.samples_per_s_mean,
                         rec and rec.accuracy_mean, r.target and r.target.best_mean,
                         r.critical and r.critical.b_crit, r.critical and r.critical.n,  # sizes every repeat reached
                         r.max_fit.max_batch if r.max_fit else None, r.why))
    return Table(key="recommendation", title="Which batch size to train with",
                 headers=tuple(h for _, h in RECOMMEND_COLUMNS),
                 rows=tuple(tuple(row[k] for k, _ in RECOMMEND_COLUMNS) for row in text),
                 csv_headers=csv_headers, csv_rows=tuple(csv_rows),
                 note="time to target and accuracy: mean ± sd over the repeats; the knee: the smallest size within "
                      "90% of the best throughput; tentative: the data cannot support one size (see the caveats)")
