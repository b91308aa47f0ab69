"""A study's lines are keyed by their series (framework x named variant), never by a label written over the trial's
framework (issue 39): the frameworks stay frameworks, and a line's label is made only where text is drawn."""

from __future__ import annotations

from pathlib import Path

import pytest
from pypdf import PdfReader

from harness.cells import Series, cells
from harness.records import TrialOutcome, WorkerMetrics
from harness.store import Store
from report.document.build import build_report
from report.load import load
from tests.helpers.recommend_rows import EXP, even_curve, experiment_spec, sweep_trial


@pytest.fixture()
def study(tmp_path: Path) -> Path:
    """An optimizer study of two frameworks, listed beta first, with an out-of-memory trial in alpha's sgd line."""
    with Store.open(tmp_path) as store:
        variants = [{"name": opt, "settings": {"optimizer": opt}} for opt in ("sgd", "adam")]
        run_id = store.begin_run(EXP, experiment_spec(["beta", "alpha"], variants=variants, study="optimizer_batch"),
                                 "pytest", {})
        for fw in ("alpha", "beta"):
            for opt in ("sgd", "adam"):
                for bs in (8, 64):
                    for rep in (0, 1):
                        accs = [0.5, 0.7, 0.85, 0.9 - 0.01 * rep]
                        metrics = WorkerMetrics(step_samples_per_s=10.0 * bs + rep, accuracy=accs[-1])
                        store.write_trial(TrialOutcome(trial=sweep_trial(fw, bs, rep, opt, opt), status="ok",
                                                       device={"device": "cpu"}, metrics=metrics,
                                                       curve=even_curve(bs, [1, 2, 3, 4], accs)), run_id, {})
        store.write_trial(TrialOutcome(trial=sweep_trial("alpha", 1024, 0, "sgd", "sgd"), status="oom",
                                       reason="made up"), run_id, {})
    return tmp_path


def test_the_lines_are_series_in_the_experiments_framework_order(study: Path) -> None:
    (exp,) = load(study).experiments
    assert exp.frameworks == ("beta", "alpha")
    assert exp.line_series == (Series("beta", "adam"), Series("beta", "sgd"), Series("alpha", "adam"),
                               Series("alpha", "sgd"))
    cell_list = cells(exp.trials, exp.frameworks)
    assert {c.framework for c in cell_list} == {"alpha", "beta"}  # never "alpha · sgd"
    assert {c.line for c in cell_list} == set(exp.line_series)
    (oom,) = [c for c in cell_list if c.failed_status]
    assert oom.series is not None and oom.series.variant == "sgd" and oom.line == Series("alpha", "sgd")


def test_the_report_counts_frameworks_and_names_each_line(study: Path, tmp_path: Path) -> None:
    built = build_report(study, tmp_path / "out" / "report.pdf")
    text = " ".join(" ".join(p.extract_text() or "" for p in PdfReader(built.pdf).pages).split())
    # before issue 39 this read "17 trial(s) of 4 framework(s) (alpha · adam, alpha · sgd, beta · adam, beta · sgd)"
    assert "17 trial(s) of 2 framework(s) (beta, alpha) at batch sizes 8, 64, 1024" in text
    # each line keeps its label where a sentence or a table names it, in the experiment's framework order
    said = [text.index(f"{line}'s step throughput was highest") for line in
            ("beta · adam", "beta · sgd", "alpha · adam", "alpha · sgd")]
    assert said == sorted(said)
    assert "alpha · sgd: 1 trial(s) did not finish, first at batch 1024 (1 oom) (made up)" in text
    assert "alpha · sgd [sgd] 1024 1 oom" in text
