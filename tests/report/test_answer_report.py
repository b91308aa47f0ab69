"""The answer in the PDF (no framework): page 1 names the recommended size of each series, and the experiment's
section draws the learning curves and the steps-to-target figure with B_crit, from a made-up store whose steps to
target follow S = S_min (1 + B_crit / B)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pypdf import PdfReader

from harness.records import TrialOutcome, WorkerMetrics
from harness.store import Store
from report.answer.recommend import recommend
from report.document.build import build_report
from report.load import load
from tests.helpers.recommend_rows import EXP, TRAIN_N, even_curve, experiment_spec, sweep_trial

B_CRIT, S_MIN = 60.0, 20.0


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    with Store.open(tmp_path) as st:
        run = st.begin_run(EXP, experiment_spec(["alpha"]), "made up", {})
        for bs in (4, 16, 64, 256):
            for rep in (0, 1):
                total = 2 * TRAIN_N // bs
                s_target = S_MIN * (1 + B_CRIT / bs)  # the steps to 90 % on this made-up curve
                step_s = 0.002 + bs * 0.0004
                points = [total * i / 4 for i in range(1, 5)]
                accs = [min(0.1 + 0.88 * (1 - math.exp(-p / s_target * 2.3)), 0.99) + 0.002 * rep for p in points]
                st.write_trial(TrialOutcome(trial=sweep_trial("alpha", bs, rep), status="ok", device={"device": "cpu"},
                                            curve=even_curve(bs, [p * step_s for p in points], accs),
                                            metrics=WorkerMetrics(step_samples_per_s=bs / step_s,
                                                                  accuracy=accs[-1])), run, {})
    return tmp_path


def test_page_one_and_the_answer_figures(store: Path, tmp_path: Path) -> None:
    (rec,) = recommend(load(store).experiments[0])
    assert rec.batch_size is not None and rec.critical is not None
    result = build_report(store, tmp_path / "out" / "report.pdf")
    pages = [p.extract_text() or "" for p in PdfReader(result.pdf).pages]
    page1 = " ".join(pages[0].split())
    assert f"alpha {rec.batch_size}" in page1 and "time to target per size" in page1
    assert f"B_crit ≈ {rec.critical.b_crit:,.0f}" in page1
    text = " ".join(" ".join(pages).split())
    assert "Learning curves: held-out accuracy against training time" in text
    assert "Steps to the target against batch size, and the critical batch size" in text
    keys = {p.stem.split("-", 2)[-1] for p in result.figures}
    assert {"recommendation", "learning_curves", "critical_batch"} <= keys
