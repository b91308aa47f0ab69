"""One reading of "a batch size reached the target" for the critical batch size's fit (S = S_min (1 + B_crit / B)):
the recommendation's summary line, the critical-batch section and the report say the same fit over the same sizes.

A made-up train-to-target store, 3 repeats a size, where some sizes reach the target in only one repeat of three.
Before, the summary fitted every size *some* repeat reached (mean over those repeats) and the critical-batch section
only the sizes *every* repeat reached: the one store printed ``B_crit = 110 over 4 sizes`` beside ``no fit: 2 batch
size(s) reached the target``. Now a size enters the fit when its steps to the target are measured in every repeat
(report.answer.target.SizeTarget.steps_measured), and the ones left out are named with how many repeats reached.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from pypdf import PdfReader

from harness.cli import main
from harness.config.trial import OptimizerSpec
from harness.records import TrialOutcome, WorkerMetrics
from harness.store import Store
from report.answer.critical_batch import studies
from report.answer.recommend import recommend
from report.document.build import build_report
from report.load import load
from tests.helpers.recommend_rows import EXP, TRAIN_N, even_curve, experiment_spec, sweep_trial

B_CRIT, S_MIN, TARGET_PCT, REPEATS = 60.0, 20.0, 90.0, 3
SIZES = (4, 16, 64, 256)
#: which sizes reach the target in only one repeat of three, per case; the others reach it in every repeat
PARTLY = {"three sizes in every repeat": (256,), "two sizes in every repeat": (64, 256)}


def _accuracies(bs: int, reaches: bool, slower: float = 1.0) -> tuple[list[float], list[float]]:
    """16 evaluations over 2 epochs; a repeat that reaches crosses 90 % near S_MIN (1 + B_CRIT / bs) steps (times
    ``slower``), one that misses levels off at 85 %."""
    total = 2 * TRAIN_N // bs
    s_target = slower * S_MIN * (1 + B_CRIT / bs)
    points = [total * i / 16 for i in range(1, 17)]
    top = 0.98 if reaches else 0.85
    accs = [0.1 + (top - 0.1) * (1 - math.exp(-p / s_target * 2.3)) for p in points]
    return [p * (0.002 + bs * 0.0004) for p in points], accs


def _store(path: Path, partly: tuple[int, ...]) -> Path:
    with Store.open(path) as st:
        spec = experiment_spec(["alpha"], train_to_target=True, target_accuracy=TARGET_PCT)
        run = st.begin_run(EXP, spec, "made up", {})
        for bs in SIZES:
            for rep in range(REPEATS):
                times, accs = _accuracies(bs, reaches=bs not in partly or rep == 0)
                st.write_trial(TrialOutcome(trial=sweep_trial("alpha", bs, rep), status="ok", device={"device": "cpu"},
                                            curve=even_curve(bs, times, accs),
                                            metrics=WorkerMetrics(step_samples_per_s=bs / 0.01, accuracy=accs[-1])),
                               run, {})
    return path


def _fits(text: str) -> list[str]:
    """Every statement of the fit in ``text``: ``N`` for a fit over N sizes, ``none`` for no fit."""
    text = " ".join(text.split())
    return [m.group(1) or "none" for m in re.finditer(r"over (\d+) sizes|no fit", text)]


@pytest.fixture(params=sorted(PARTLY))
def case(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    return request.param, _store(tmp_path / "store", PARTLY[request.param])


def test_the_summary_and_the_critical_section_fit_the_same_sizes(case: tuple[str, Path]) -> None:
    name, store = case
    (exp,) = load(store).experiments
    (rec,) = recommend(exp)
    (study,) = studies(exp)
    assert (rec.critical is None) == (study.fit is None), (rec.critical_why, study.fit_why)
    full = [b for b in SIZES if b not in PARTLY[name]]
    if len(full) >= 3:
        assert rec.critical is not None and study.fit is not None
        assert [b for b, _ in rec.critical.points] == [b for b, _ in study.fit.points] == full
        assert rec.critical.b_crit == pytest.approx(study.fit.b_crit)
    else:
        assert rec.critical_why == study.fit_why
        assert "2 batch size(s) reached the target in every repeat" in rec.critical_why
    for b in PARTLY[name]:  # the sizes left out are named, with how many repeats reached
        assert f"batch {b} (1 of 3 repeats reached)" in rec.critical_text()


def test_recommend_s_text_says_one_fit(case: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    name, store = case
    assert main(["recommend", str(store)]) == 0
    out = capsys.readouterr().out
    summary = [line for line in out.splitlines() if "critical batch size" in line and "steps to" not in line]
    regimes = [line for line in out.splitlines() if line.strip().startswith("regimes:")]
    assert len(summary) == 1 and len(regimes) == 1, out
    assert _fits(summary[0]) == _fits(regimes[0]) == (["3"] if len(PARTLY[name]) == 1 else ["none"]), out
    assert "every repeat" in summary[0]  # which steps count is said
    assert "1 of 3 repeats reached" in summary[0] and "1 of 3 repeats reached" in regimes[0]


def test_recommend_s_json_says_one_fit(case: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, store = case
    assert main(["recommend", str(store), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["experiments"]
    (rec,) = entry["recommendations"]
    (study,) = entry["critical_studies"]
    got = [None if d is None else d["n"] for d in (rec["critical_batch"], study["critical_batch"])]
    assert got[0] == got[1], (rec["critical_why"], study["critical_why"])
    assert rec["critical_why"] == study["critical_why"]
    assert rec["critical_note"] is None  # nothing elsewhere in the run disagrees with the summary's fit


def test_the_report_says_one_fit(case: tuple[str, Path], tmp_path: Path) -> None:
    name, store = case
    result = build_report(store, tmp_path / "out" / "report.pdf")
    text = " ".join(" ".join(p.extract_text() or "" for p in PdfReader(result.pdf).pages).split())
    fits = _fits(text)  # page 1's summary and critical-batch lines, the steps figure's notes
    assert len(fits) >= 2 and set(fits) == ({"3"} if len(PARTLY[name]) == 1 else {"none"}), text


def test_a_rate_s_own_fit_says_where_the_best_rate_fit_differs(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """With a learning-rate grid each rate's summary fits its own trials and the critical-batch section each size at
    its best rate: where the two differ, the rate's line says so and gives the section's fit."""
    with Store.open(tmp_path) as st:
        spec = experiment_spec(["alpha"], train_to_target=True, target_accuracy=TARGET_PCT,
                               learning_rates=[0.001, 0.01])
        run = st.begin_run(EXP, spec, "made up", {})
        for lr, slower, missed in ((0.01, 1.0, ()), (0.001, 1.5, (256,))):
            for bs in SIZES:
                for rep in range(REPEATS):
                    times, accs = _accuracies(bs, reaches=bs not in missed or rep == 0, slower=slower)
                    trial = dataclasses.replace(sweep_trial("alpha", bs, rep, variant=f"lr_{lr!r}"),
                                                optimizer=OptimizerSpec(name="sgd", lr=lr))
                    st.write_trial(TrialOutcome(trial=trial, status="ok", device={"device": "cpu"},
                                                curve=even_curve(bs, times, accs),
                                                metrics=WorkerMetrics(step_samples_per_s=bs / 0.01,
                                                                      accuracy=accs[-1])), run, {})
    assert main(["recommend", str(tmp_path), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["experiments"]
    notes = {r["variant"]: r["critical_note"] for r in entry["recommendations"]}
    (study,) = entry["critical_studies"]
    assert study["critical_batch"]["n"] == 4  # lr 0.01 is the best rate at every size, and reached in every repeat
    assert notes["lr_0.01"] is None  # its own fit is the section's
    assert notes["lr_0.001"] is not None and "lr_0.001's trials alone" in notes["lr_0.001"]
    assert "each size at its best learning rate: B_crit ≈" in notes["lr_0.001"] and "over 4 sizes" in notes["lr_0.001"]
    assert main(["recommend", str(tmp_path)]) == 0
    assert "critical batch size, note: this line fits lr_0.001's trials alone" in capsys.readouterr().out
