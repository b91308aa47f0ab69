"""The batch-size recommendation (report/recommend.py): the rule on hand-made sizes, and recomputed from a store.

The store test writes rows through the real :meth:`Store.write_trial` (numbers chosen by the test, so
each case of the rule is hit on purpose), then recomputes every recommended size with plain SQL and the
rule as docs/recommend.md states it, independently of the module, and compares with ``--json``.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from pathlib import Path

import pytest

from adapters.base import OptimizerSpec
from harness.cli import main
from harness.config.trial import TrialSpec
from harness.records import TrialOutcome, WorkerMetrics
from harness.store import Store
from report.load import load
from report.recommend import SHARE_OF_BEST, THROUGHPUT_COLUMN, SizeStats, knee, recommend, throughput_of

EXP = "rule_test"


def _size(bs: int, mean: float, sd: float | None = None, n: int = 2) -> SizeStats:
    return SizeStats(batch_size=bs, repeats_n=n, samples_per_s_mean=mean, samples_per_s_sd=sd)


def test_knee_is_the_smallest_size_within_the_share_of_the_best() -> None:
    sizes = [_size(4, 100, 2), _size(16, 300, 3), _size(64, 950, 5), _size(256, 1000, 5)]
    assert knee(sizes) == (64, 256, 64, 64)  # 950 >= 0.9 * 1000; 300 is far below


def test_knee_reports_a_range_when_the_spreads_overlap_the_bar() -> None:
    # 860 ± 60 straddles the bar of 900: the data allow 16 (high end) or 64 (low end clears it)
    sizes = [_size(4, 100, 2), _size(16, 860, 60), _size(64, 980, 10), _size(256, 1000, 5)]
    rec, best, lo, hi = knee(sizes)
    assert (rec, best, lo, hi) == (64, 256, 16, 64)


def test_knee_when_the_best_is_the_smallest() -> None:
    assert knee([_size(4, 500, 5), _size(16, 300, 5)]) == (4, 4, 4, 4)


def test_throughput_is_read_from_the_named_column_only() -> None:
    assert throughput_of({THROUGHPUT_COLUMN: 12.5, "e2e_samples_per_s": 99.0}) == 12.5
    assert throughput_of({THROUGHPUT_COLUMN: None}) is None
    assert throughput_of({THROUGHPUT_COLUMN: float("nan")}) is None


def _trial(fw: str, bs: int, repeat: int) -> TrialSpec:
    return TrialSpec(experiment=EXP, framework=fw, model="tiny_cnn", dataset="digits", batch_size=bs,
                     repeat=repeat, seed=repeat, epochs=1, warmup_steps=1, timed_steps=3,
                     optimizer=OptimizerSpec(lr=0.01), device="cpu", threads=1, timeout_s=60.0, eval=True,
                     eval_batch_size=32)


#: (framework, batch) -> per-repeat (samples/s, accuracy); chosen so the three frameworks hit three cases
CASES: dict[tuple[str, int], list[tuple[float, float]]] = {
    # clear knee at 64: two repeats everywhere, tight spreads
    ("alpha", 8): [(100.0, 0.95), (104.0, 0.96)], ("alpha", 64): [(930.0, 0.93), (940.0, 0.94)],
    ("alpha", 256): [(1000.0, 0.90), (1010.0, 0.89)],
    # overlapping spreads at 64 (range 64..256)
    ("beta", 8): [(100.0, 0.95), (110.0, 0.95)], ("beta", 64): [(810.0, 0.94), (1000.0, 0.94)],
    ("beta", 256): [(1000.0, 0.91), (1005.0, 0.90)],
    # one repeat: a recommendation, never "supported"; fastest at 256, and 1024 ran out of memory
    ("gamma", 8): [(50.0, 0.9)], ("gamma", 64): [(400.0, 0.9)], ("gamma", 256): [(800.0, 0.8)],
}


@pytest.fixture()
def rule_store(tmp_path: Path) -> Path:
    env = {"cpu_count": 2, "note": "rule test rows, written by tests/report/test_recommend.py"}
    with Store.open(tmp_path) as store:
        run_id = store.begin_run(EXP, {"name": EXP, "frameworks": ["alpha", "beta", "gamma"], "epochs": 1,
                                       "data": {"name": "digits"}}, "pytest (rule test rows)", env)
        for (fw, bs), reps in CASES.items():
            for repeat, (tput, acc) in enumerate(reps):
                metrics = WorkerMetrics(step_samples_per_s=tput, accuracy=acc)
                store.write_trial(TrialOutcome(trial=_trial(fw, bs, repeat), status="ok", device={"device": "cpu"},
                                               metrics=metrics), run_id, env)
        store.write_trial(TrialOutcome(trial=_trial("gamma", 1024, 0), status="oom", reason="made up"), run_id, env)
        store.write_maxbatch({"experiment": EXP, "framework": "alpha", "max_batch": 700, "recommended_batch": 512,
                              "margin_mib": 256.0, "budget_mib": 4096.0, "budget_kind": "os-rlimit"})
    return tmp_path


def recompute(store_dir: Path, share: float = SHARE_OF_BEST) -> dict[str, int]:
    """The documented rule, independently: per framework, the smallest batch whose mean throughput over
    ok sweep trials is >= share x the best mean."""
    conn = sqlite3.connect(store_dir / "results.sqlite")
    rows = conn.execute(f"SELECT framework, batch_size, {THROUGHPUT_COLUMN} FROM trials WHERE status = 'ok' "
                        f"AND {THROUGHPUT_COLUMN} IS NOT NULL AND (purpose IS NULL OR purpose = 'sweep')").fetchall()
    conn.close()
    means: dict[str, dict[int, list[float]]] = {}
    for fw, bs, v in rows:
        means.setdefault(fw, {}).setdefault(bs, []).append(v)
    out = {}
    for fw, by_bs in means.items():
        avg = {bs: statistics.fmean(v) for bs, v in by_bs.items()}
        bar = share * max(avg.values())
        out[fw] = min(bs for bs, m in avg.items() if m >= bar)
    return out


def test_every_recommended_size_is_recomputed_from_the_stored_rows(rule_store: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", str(rule_store), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    recs = {r["framework"]: r for r in printed["experiments"][0]["recommendations"]}
    assert {fw: r["recommended_batch"] for fw, r in recs.items()} == recompute(rule_store) \
        == {"alpha": 64, "beta": 64, "gamma": 256}
    assert recs["alpha"]["supported"] and recs["alpha"]["range"] == [64, 64]
    assert not recs["beta"]["supported"] and recs["beta"]["range"] == [64, 256]
    assert not recs["gamma"]["supported"]
    assert any("one repeat" in c for c in recs["gamma"]["caveats"])
    assert any("still rising" in c for c in recs["alpha"]["caveats"])  # 256 was its largest size
    assert not any("still rising" in c for c in recs["gamma"]["caveats"])  # 1024 above it ran out of memory
    assert recs["alpha"]["max_fit"]["max_batch"] == 700 and recs["alpha"]["max_fit"]["recommended_batch"] == 512
    # accuracy cost against the best mean accuracy (alpha: 0.955 at 8; 0.895 at 256 -> 6.0 points)
    assert recs["alpha"]["accuracy_cost_pts"]["256"] == pytest.approx(6.0)
    assert recs["alpha"]["accuracy_cost_pts"]["8"] == pytest.approx(0.0)


def test_the_terminal_table_and_the_rule_are_printed(rule_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", str(rule_store)]) == 0
    out = capsys.readouterr().out
    assert "alpha: 64: the smallest batch within 90% of the best throughput" in out
    assert "64 (range 64–256), tentative" in out
    assert "700 (512 with a 256 MiB margin)" in out
    assert "rule: Recommended: the smallest batch size" in out


def test_no_accuracy_is_said_plainly(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        run_id = store.begin_run(EXP, {"name": EXP}, "pytest", {})
        for bs, tput in ((8, 10.0), (64, 50.0)):
            for rep in (0, 1):
                store.write_trial(TrialOutcome(trial=_trial("alpha", bs, rep), status="ok",
                                               metrics=WorkerMetrics(step_samples_per_s=tput + rep)), run_id, {})
    (rec,) = recommend(load(tmp_path).experiments[0])
    assert rec.batch_size == 64
    assert any("no accuracy" in c for c in rec.caveats)
    assert any("epochs >= 1" in t for t in rec.to_run)


def test_nothing_finished_gives_no_size_and_says_why(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        run_id = store.begin_run(EXP, {"name": EXP}, "pytest", {})
        store.write_trial(TrialOutcome(trial=_trial("alpha", 8, 0), status="oom", reason="made up"), run_id, {})
    (rec,) = recommend(load(tmp_path).experiments[0])
    assert rec.batch_size is None and not rec.supported and "no trial finished (oom)" in rec.why


def test_recommend_without_a_store_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", str(tmp_path)]) == 2
    assert "no results store" in capsys.readouterr().err
