"""Build the report of one results directory: PDF, figures (PNG + SVG) and tables (CSV).

Everything is first written into a fresh temporary directory beside the target; only when the PDF is
complete are the files moved into place (figures and tables first, the PDF last, each with an atomic
rename), so an interrupted or failed build leaves the previous report untouched and never a partial
one. The inputs are the results store alone: no framework is imported and no GPU is needed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cells import ACCURACY, cells
from harness.diskfull import KEPT_AGAIN, says_disk_full
from harness.errors import StoreError
from harness.noise import format_estimate
from harness.store import TrialRecord
from harness.tmpnames import remove_stale, temporary_directory
from report.answer import critical_batch, findings, recommend, studies
from report.answer import thesis as compare
from report.answer.along import noise_along
from report.answer.studies import line_label
from report.document import context, curves, figures, tables
from report.document.along_figure import noise_along_figure
from report.document.drift import drift_figure
from report.document.pdf import PdfWriter, esc
from report.load import ReportInput, StoredExperiment, load

DEFAULT_SUBDIR = "report"
PDF_NAME = "report.pdf"
#: the kinds of file a build writes into figures/ and tables/ (older ones are removed on a rebuild)
STALE_SUFFIXES = (".png", ".svg", ".csv")


@dataclass
class BuildResult:
    """What a build wrote."""

    pdf: Path
    figures: list[Path] = field(default_factory=list)
    tables: list[Path] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)  # "experiment/figure: reason" for every figure not drawn


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text) or "experiment"


def default_output(source_dir: Path) -> Path:
    """Where the PDF goes when ``-o`` is not given."""
    return Path(source_dir) / DEFAULT_SUBDIR / PDF_NAME


def _accuracy_unusable(spec: dict[str, Any]) -> str | None:
    """Why this experiment's accuracy must not be shown (None when it means something)."""
    return recommend.accuracy_unusable(spec)


def _answer_page(pdf: PdfWriter, answered: list[tuple[StoredExperiment, list[recommend.Recommendation]]], tmp: Path,
                 result: BuildResult) -> None:
    """Page 1: the answer to the user's question, per experiment, before the measurements behind it."""
    if not answered:
        return
    began = pdf.mark_page()
    pdf.heading("The answer: which batch size to train with", 0)
    pdf.para(esc(recommend.RULE_TEXT) + " Rule and caveats: docs/recommend.md; "
             "the same answer in a terminal: <i>batchscope recommend DIR</i>.")
    for exp, recs in answered:
        slug = _slug(exp.name or "unnamed")
        if len(answered) > 1:
            pdf.heading(f"Experiment “{exp.name}”", 1)
        table = tables.recommendation(recs)
        if table is None:
            continue
        pdf.table(table, col_widths=[2.0 * 28.35, 2.3 * 28.35, 5.0 * 28.35, 2.0 * 28.35, 2.2 * 28.35, 1.5 * 28.35,
                                     None])  # type: ignore[list-item]
        path = tmp / "tables" / f"{slug}-recommendation.csv"
        table.write_csv(path)
        result.tables.append(path)
        fig = figures.recommendation_figure(exp, recs)
        if fig.figure is None:
            pdf.absent(fig.title, fig.absent_reason or "no data")
            result.absent.append(f"{exp.name}/{fig.key}: {fig.absent_reason}")
        else:
            paths = figures.save(fig, tmp / "figures", f"{slug}-00-{fig.key}")
            result.figures += paths
            pdf.figure(paths[0], fig.title, fig.caption)
        notes = [f"{r.name}: time to target per size: " + "; ".join(f"{t.batch_size}: {t.text()}" for t in r.targets)
                 for r in recs if r.targets]
        # the same words as `recommend`'s summary: one reading of "reached" with the critical-batch lines below
        found = critical_batch.studies(exp)
        notes += [f"{r.name}: critical batch size: {r.critical_text()}"
                  + ("; figure in the experiment's section" if r.critical is not None else "")
                  for r in recs if r.critical_text()]
        notes += [f"{r.name}: critical batch size, note: {note}" for r in recs
                  if (note := critical_batch.summary_note(r, found)) is not None]
        notes += [f"{r.name}: {format_estimate(r.noise)} (later half of each trial's training)"
                  for r in recs if r.noise is not None]
        notes += [line.strip() for st in found for line in critical_batch.study_lines(st)]
        notes += [f"{r.name}: {c}" for r in recs for c in r.caveats]
        # the same advice for several frameworks is one line naming them all (it spilled onto a page of its own)
        to_run: dict[str, list[str]] = {}
        for r in recs:
            for w in r.to_run:
                to_run.setdefault(w, []).append(r.name)
        notes += [f"{', '.join(names)}, to be sure: {w}" for w, names in to_run.items()]
        if notes:
            pdf.bullets(notes)
    pdf.new_page_unless_spilled(began)  # the measurements start on page 2, after whatever of the answer spilled there


def _experiment_section(pdf: PdfWriter, exp: StoredExperiment, tmp: Path, result: BuildResult,
                        reference: list[dict[str, Any]], recs: list[recommend.Recommendation]) -> None:
    """One experiment, in reading order: what ran, runs and environment, method, findings, figures, tables."""
    slug = _slug(exp.name or "unnamed")
    spec = exp.spec
    variants = studies.variant_names(exp.trials, spec)
    # one line, row and finding per framework x variant: the views below group by each cell's and trial's line
    # (harness.cells.Series.line) and name it (studies.line_label) only where they write text
    cell_list = cells(exp.trials, exp.frameworks)
    acc_why = _accuracy_unusable(spec)
    if acc_why:  # e.g. synthetic labels: an accuracy column or finding would invite a wrong reading
        cell_list = [dataclasses.replace(c, stats={k: v for k, v in c.stats.items() if k != ACCURACY})
                     for c in cell_list]
    _what_ran(pdf, exp)
    run_table = tables.runs(exp)
    if run_table.rows:
        pdf.table(run_table, col_widths=[1.2 * 28.35, 3.6 * 28.35, None])  # type: ignore[list-item]
    else:
        pdf.para("No run row was recorded for this experiment (its results came from another command).")
    pdf.heading("Environment", 1)
    pdf.kv(context.environment_rows(exp))
    pdf.heading("Method", 1)
    for para in context.method_paragraphs(exp, cell_list):
        pdf.para(para)
    # the thesis compared one setting per framework: with variants its side-by-side would mix them
    sweep = [] if variants else [t for t in exp.trials if t.settings.purpose in (None, "sweep")]
    _findings(pdf, exp, cell_list, variants, sweep)
    _figures(pdf, exp, recs, cell_list, reference, tmp / "figures", slug, result)
    _tables(pdf, exp, cell_list, None if variants else sweep, acc_why, tmp / "tables", slug, result)
    path = tmp / "tables" / f"{slug}-runs.csv"
    run_table.write_csv(path)
    result.tables.append(path)


def _what_ran(pdf: PdfWriter, exp: StoredExperiment) -> None:
    """The section's title, description, trial counts and banners, then the runs' heading."""
    title = f"Experiment “{exp.name}”" if exp.name else "Experiment (unnamed)"
    pdf.heading(title, 0)
    if exp.spec.get("description"):
        pdf.para(f"<i>{esc(exp.spec['description'])}</i>")
    counts: dict[str, int] = {}
    for t in exp.trials:
        counts[t.status or "?"] = counts.get(t.status or "?", 0) + 1
    pdf.para(f"{len(exp.trials)} trial(s) of {len(exp.frameworks)} framework(s) ({', '.join(exp.frameworks) or '-'}) "
             f"at batch sizes {', '.join(map(str, exp.batch_sizes)) or '-'}: "
             + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ".")
    banner = context.no_gpu_banner(exp)
    if banner:
        pdf.banner(banner)
    if exp.trials and not exp.ok_trials:
        what = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        pdf.banner(f"No trial of this experiment finished ({what}), "
                   "so there is nothing to plot or compare: the tables below list what happened to each "
                   "framework and batch size, with the reason.")
    pdf.heading("Runs and exact command lines", 1)


def _findings(pdf: PdfWriter, exp: StoredExperiment, cell_list: list[Any], variants: list[str],
              sweep: list[TrialRecord]) -> None:
    """The study's question and verdicts (with variants or a study), the findings, and the thesis's on this run."""
    study = studies.study_findings(exp.spec, exp.trials, exp.curves)
    if variants or study:
        pdf.heading("The study's question", 1)
        if variants:
            pdf.para(f"Variants (a line each, labelled framework · variant): {esc(', '.join(variants))}. "
                     "Batch sizes are micro-batches; with gradient accumulation an update sees "
                     "micro-batch x accumulate_steps samples, and the study's verdicts compare effective batches.")
        if study:
            pdf.bullets([f.text for f in study])
        elif exp.spec.get("study"):
            pdf.para("No verdict can be computed: no trial of this study finished.")
    pdf.heading("Findings", 1)
    computed = findings.compute(exp, cell_list)
    if computed:
        pdf.bullets([f.text for f in computed])
    else:
        pdf.para("No finding can be computed: no trial finished.")
    # with nothing finished every verdict would read "cannot be judged": the banner already says why
    verdicts = findings.thesis_verdicts(compare.thesis_findings(sweep)) if sweep and exp.ok_trials else []
    if verdicts:
        pdf.heading("The thesis's findings on this run", 2)
        pdf.bullets([f.text for f in verdicts])


def _figures(pdf: PdfWriter, exp: StoredExperiment, recs: list[recommend.Recommendation], cell_list: list[Any],
             reference: list[dict[str, Any]], directory: Path, slug: str,
             result: BuildResult) -> None:
    """Every figure of the section, saved under ``directory``; one that cannot be drawn is said, with why."""
    pdf.heading("Figures", 1)
    # the gradient noise scale (measured where the experiment set gradient_noise) drawn beside the fit's B_crit
    # a critical-batch study (issue 33): one more panel per framework, each size at its best learning rate
    best = [st.best_rate_recommendation(like) for st in critical_batch.studies(exp)
            for like in [r for r in recs if r.framework == st.framework][:1] if any(s.chosen for s in st.sizes)]
    drawn = [*recs, *best]
    predicted = {r.name: r.noise.b_simple for r in drawn if r.noise is not None and r.noise.b_simple is not None}
    answer_figures = [curves.learning_curve_figure(exp, recs),
                      curves.critical_figure(exp, drawn, predicted=predicted or None)]
    along = noise_along(exp)  # issue 52: B_simple along the training, where the noise was measured
    if along:
        answer_figures.append(noise_along_figure(exp, along))
    for i, fig in enumerate([*figures.build_figures(exp, cell_list, reference), *answer_figures,
                             drift_figure(exp, cell_list)], 1):
        stem = f"{slug}-{i:02d}-{fig.key}"
        if fig.figure is None:
            pdf.absent(fig.title, fig.absent_reason or "no data")
            result.absent.append(f"{exp.name}/{fig.key}: {fig.absent_reason}")
            continue
        paths = figures.save(fig, directory, stem)
        result.figures += paths
        pdf.figure(paths[0], fig.title, fig.caption, fig.notes)


def _tables(pdf: PdfWriter, exp: StoredExperiment, cell_list: list[Any], sweep: list[TrialRecord] | None,
            acc_why: str | None, directory: Path, slug: str, result: BuildResult) -> None:
    """The section's tables, each also written as CSV under ``directory`` (``sweep`` None: no comparison with the
    published figures, as with variants)."""
    pdf.heading("Tables", 1)
    parts = [tables.headline(cell_list, tables.SPEED_COLUMNS, "headline_speed",
                             "Per framework and batch size: speed, utilisation, energy"),
             tables.headline(cell_list, tables.MEMORY_COLUMNS, "headline_memory",
                             "Per framework and batch size: memory and accuracy"),
             tables.maxbatch(exp.maxbatch),
             None if sweep is None else tables.comparison(compare.side_by_side(sweep) if sweep else [])]
    if parts[1] is not None and acc_why:
        parts[1] = dataclasses.replace(parts[1], note=f"{parts[1].note} No accuracy column: {acc_why}.")
    wrote_headline = False
    for table in parts:
        if table is None:
            continue
        pdf.heading(table.title, 2)
        if table.key == "comparison" and not table.rows:
            pdf.para("Nothing to set beside the published figures: this run measured none of them (GPU "
                     "utilisation, GPU memory, accuracy after training). The CSV lists the published values.")
        else:
            pdf.table(table)
        stem = "headline" if table.key.startswith("headline") else table.key
        if stem == "headline" and wrote_headline:
            continue
        wrote_headline |= stem == "headline"
        path = directory / f"{slug}-{stem}.csv"
        table.write_csv(path)
        result.tables.append(path)
    if not exp.ok_trials:
        status_rows = [(line_label(c.line), str(c.batch_size), c.status_text(), "; ".join(c.reasons)[:300] or "-")
                       for c in cell_list]
        status = tables.Table(key="status", title="What happened to each trial",
                              headers=("framework", "batch", "status", "reason"), rows=tuple(status_rows),
                              csv_headers=("framework", "batch_size", "status", "reason"),
                              csv_rows=tuple(status_rows))
        pdf.heading(status.title, 2)
        pdf.table(status, col_widths=[2.2 * 28.35, 1.3 * 28.35, 2.2 * 28.35, None])  # type: ignore[list-item]


def _appendix(pdf: PdfWriter, data: ReportInput) -> None:
    pdf.page_break()
    pdf.heading("Appendix: resolved experiment specifications", 0)
    pdf.para("The experiment as it was run (file values after command-line overrides), from the runs table.")
    for exp in data.experiments:
        pdf.heading(exp.name or "(unnamed)", 1)
        pdf.mono("\n".join(f"{k} = {json.dumps(v, default=str)}" for k, v in sorted(context.spec_summary(exp).items())))


def _install(tmp: Path, pdf_tmp: Path, target_pdf: Path, result: BuildResult) -> BuildResult:
    """Move the built files beside ``target_pdf``, the PDF last; returns the final paths."""
    out_dir = target_pdf.parent
    final = BuildResult(pdf=target_pdf, absent=result.absent)
    for kind, paths, bucket in (("figures", result.figures, final.figures), ("tables", result.tables, final.tables)):
        folder = out_dir / kind
        if paths:
            folder.mkdir(parents=True, exist_ok=True)
        for p in paths:
            dest = folder / p.name
            os.replace(p, dest)
            bucket.append(dest)
        _remove_stale(folder, {p.name for p in paths})
    os.replace(pdf_tmp, target_pdf)
    return final


def _remove_stale(folder: Path, keep: set[str]) -> None:
    """Delete figures/tables an earlier build left in ``folder`` that this build did not write.

    Without this, a figure that is absent this time (or an experiment no longer in the store) would
    sit beside the new PDF looking current. Only the kinds of file the report writes are touched.
    """
    if not folder.is_dir():
        return
    for p in folder.iterdir():
        if p.is_file() and p.suffix in STALE_SUFFIXES and p.name not in keep:
            p.unlink()


def build_report(source_dir: str | Path, output: str | Path | None = None,
                 target_accuracy: float | None = None) -> BuildResult:
    """Build the report of the store in ``source_dir`` into ``output`` (default DIR/report/report.pdf).

    ``target_accuracy`` (percent; 0: the default target) overrides each experiment's ``target_accuracy``.

    Raises:
        StoreError: no store, an empty store, another schema (see :func:`report.load.load`).
    """
    source_dir = Path(source_dir)
    data = load(source_dir)
    target = Path(output) if output else default_output(source_dir)
    if target.suffix.lower() != ".pdf":
        raise StoreError(f"{target}: the report is a PDF; give -o a path ending in .pdf")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"{target.parent}: cannot create the report directory ({e.strerror})") from e
    reference = compare.load_reference()
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = [e.name or "(unnamed)" for e in data.experiments]
    pdf = PdfWriter(title=f"batchscope report: {', '.join(names)}",
                    footer=f"batchscope report · {data.store_path} · {now}")
    remove_stale(target.parent)  # the build directory of a report killed outright (SIGKILL)
    # a full disk while drawing, saving or moving: the build directory goes, the report before it stays (issue 32)
    with says_disk_full(target, "the report (its figures, tables and PDF)", kept=KEPT_AGAIN), \
            temporary_directory("report", target.parent) as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "figures").mkdir()
        (tmp / "tables").mkdir()
        pdf.title_block("batchscope report", [
            f"Experiment(s): <b>{esc(', '.join(names))}</b>",
            f"Results store: {esc(data.store_path.resolve())}",
            f"Built {now}, from the results store alone (no framework imported).",
        ])
        result = BuildResult(pdf=target)
        answered = [(exp, recommend.recommend(exp, target_accuracy=target_accuracy))
                    for exp in data.experiments if exp.trials]
        _answer_page(pdf, answered, tmp, result)
        for exp, recs in answered:
            _experiment_section(pdf, exp, tmp, result, reference, recs)
        for exp in data.experiments:
            if not exp.trials and exp.maxbatch:
                pdf.heading(f"Max-batch results “{exp.name}”", 0)
                table = tables.maxbatch(exp.maxbatch)
                assert table is not None
                pdf.table(table)
                path = tmp / "tables" / f"{_slug(exp.name)}-maxbatch.csv"
                table.write_csv(path)
                result.tables.append(path)
        _appendix(pdf, data)
        pdf_tmp = tmp / PDF_NAME
        pdf.save(pdf_tmp)
        return _install(tmp, pdf_tmp, target, result)

