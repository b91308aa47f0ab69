"""The batch-size recommendation (report/recommend.py): time to target, recomputed from a store with plain SQL.

The store tests write rows and learning curves through the real :meth:`Store.write_trial` (numbers chosen by the
test, so each case of the rule is hit on purpose), then recompute every time to target and recommended size with
plain SQL on the store file and the rule as docs/recommend.md states it, independently of the module, and compare
with ``recommend --json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.cli import main
from harness.noise import NoiseRecord
from harness.records import CurvePoint, TrialOutcome, WorkerMetrics
from harness.store import Store
from harness.store.maxbatch_row import maxbatch_record
from report.answer.knee import THROUGHPUT_COLUMN, SizeStats, knee, throughput_of
from report.answer.recommend import recommend
from report.load import load
from tests.helpers.recommend_rows import EXP, even_curve, experiment_spec, recompute, sweep_trial


def _size(bs: int, mean: float, sd: float | None = None, n: int = 2) -> SizeStats:
    return SizeStats(batch_size=bs, repeats_n=n, samples_per_s_mean=mean, samples_per_s_sd=sd)


def test_the_throughput_knee_is_the_smallest_size_within_the_share_of_the_best() -> None:
    sizes = [_size(4, 100, 2), _size(16, 300, 3), _size(64, 950, 5), _size(256, 1000, 5)]
    assert knee(sizes) == (64, 256, 64, 64)  # 950 >= 0.9 * 1000; 300 is far below
    # 860 ± 60 straddles the bar of 900: the data allow 16 (high end) or 64 (low end clears it)
    assert knee([_size(4, 100, 2), _size(16, 860, 60), _size(64, 980, 10), _size(256, 1000, 5)]) == (64, 256, 16, 64)
    assert knee([_size(4, 500, 5), _size(16, 300, 5)]) == (4, 4, 4, 4)


def test_throughput_is_read_from_the_named_column_only() -> None:
    assert throughput_of({THROUGHPUT_COLUMN: 12.5, "e2e_samples_per_s": 99.0}) == 12.5
    assert throughput_of({THROUGHPUT_COLUMN: None}) is None
    assert throughput_of({THROUGHPUT_COLUMN: float("nan")}) is None


#: (framework, batch) -> per repeat (samples/s, status, training seconds at each of 4 evaluations, accuracies)
CASES: dict[tuple[str, int], list[tuple[float, str, list[float], list[float]]]] = {
    # alpha: best mean final 0.956 at 64 -> target 0.946. 64 crosses between 1.5 s (0.93) and 2 s (0.955); 8 only at
    # its last points; 256 is the fastest per sample (the knee) but never gets there
    ("alpha", 8): [(100.0, "ok", [2, 4, 6, 8], [0.80, 0.90, 0.94, 0.950]),
                   (104.0, "ok", [2.1, 4.1, 6.1, 8.1], [0.80, 0.90, 0.945, 0.952])],
    ("alpha", 64): [(600.0, "ok", [0.5, 1.0, 1.5, 2.0], [0.60, 0.85, 0.93, 0.955]),
                    (610.0, "ok", [0.5, 1.0, 1.5, 2.0], [0.62, 0.86, 0.935, 0.957])],
    ("alpha", 256): [(1000.0, "ok", [0.2, 0.4, 0.6, 0.8], [0.30, 0.50, 0.70, 0.85]),
                     (1010.0, "ok", [0.2, 0.4, 0.6, 0.8], [0.31, 0.52, 0.71, 0.86])],
    # beta: batch 64 would be soonest, but one repeat diverged: never recommended; 256 is the answer
    ("beta", 8): [(100.0, "ok", [2, 4, 6, 8], [0.70, 0.85, 0.92, 0.95]),
                  (110.0, "ok", [2, 4, 6, 8], [0.70, 0.86, 0.93, 0.95])],
    ("beta", 64): [(800.0, "ok", [0.3, 0.6, 0.9, 1.2], [0.90, 0.95, 0.955, 0.96]),
                   (810.0, "diverged", [0.3, 0.6], [0.5, 0.1])],
    ("beta", 256): [(1000.0, "ok", [0.5, 1.0, 1.5, 2.0], [0.80, 0.90, 0.95, 0.955]),
                    (1005.0, "ok", [0.5, 1.0, 1.5, 2.0], [0.80, 0.91, 0.952, 0.955])],
    # delta: 64 touches the target (0.94) first but falls back by the end (mean final 0.925): not an answer; 8 holds
    ("delta", 8): [(100.0, "ok", [2, 4, 6, 8], [0.80, 0.90, 0.94, 0.950]),
                   (100.0, "ok", [2, 4, 6, 8], [0.80, 0.90, 0.94, 0.950])],
    ("delta", 64): [(600.0, "ok", [0.5, 1.0, 1.5, 2.0], [0.80, 0.945, 0.93, 0.925]),
                    (600.0, "ok", [0.5, 1.0, 1.5, 2.0], [0.80, 0.945, 0.93, 0.925])],
    # gamma: at each size one repeat ends below the default target: no size is eligible, no answer
    ("gamma", 8): [(50.0, "ok", [1, 2, 3, 4], [0.5, 0.7, 0.8, 0.90]),
                   (50.0, "ok", [1, 2, 3, 4], [0.5, 0.6, 0.7, 0.80])],
    ("gamma", 64): [(400.0, "ok", [1, 2, 3, 4], [0.5, 0.7, 0.8, 0.91]),
                    (400.0, "ok", [1, 2, 3, 4], [0.5, 0.6, 0.7, 0.8])],
}


def _write(store: Store, run_id: int, fw: str, bs: int, repeat: int, tput: float, status: str, times: Sequence[float],
           accs: Sequence[float], variant: str = "", optimizer: str = "sgd") -> None:
    final = accs[-1] if status == "ok" else None
    store.write_trial(TrialOutcome(trial=sweep_trial(fw, bs, repeat, variant, optimizer), status=status,  # type: ignore[arg-type]
                                   device={"device": "cpu"}, curve=even_curve(bs, times, accs),
                                   metrics=WorkerMetrics(step_samples_per_s=tput, accuracy=final)), run_id, {})


@pytest.fixture()
def rule_store(tmp_path: Path) -> Path:
    with Store.open(tmp_path) as store:
        spec = experiment_spec(["alpha", "beta", "gamma", "delta"])
        run_id = store.begin_run(EXP, spec, "pytest (rule test rows)", {})
        for (fw, bs), reps in CASES.items():
            for repeat, (tput, status, times, accs) in enumerate(reps):
                _write(store, run_id, fw, bs, repeat, tput, status, times, accs)
        store.write_trial(TrialOutcome(trial=sweep_trial("gamma", 1024, 0), status="oom", reason="made up"), run_id, {})
        store.write_maxbatch(maxbatch_record({"experiment": EXP, "framework": "alpha", "max_batch": 700,
                                              "recommended_batch": 512, "margin_mib": 256.0, "budget_mib": 4096.0,
                                              "budget_kind": "os-rlimit"}))
    return tmp_path


def test_time_to_target_and_the_recommended_size_are_recomputed_from_the_stored_rows(
        rule_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", str(rule_store), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    recs = {r["framework"]: r for r in printed["experiments"][0]["recommendations"]}
    expected = recompute(rule_store)
    assert {fw: r["recommended_batch"] for fw, r in recs.items()} == {fw: e["batch"] for fw, e in expected.items()} \
        == {"alpha": 64, "beta": 256, "gamma": None, "delta": 8}
    for fw, r in recs.items():
        for size in r["sizes"]:
            tt = size["time_to_target"]
            want = expected[fw]["times"].get(size["batch_size"])  # type: ignore[attr-defined]
            got = tt and tt["train_s"] and tt["train_s"]["mean"]
            assert got == pytest.approx(want), (fw, size["batch_size"])
    # alpha: 64 crosses 0.946 between (1.5 s, 0.93) and (2.0 s, 0.955) in repeat 0: 1.5 + 0.5 x 0.016 / 0.025
    assert recs["alpha"]["target_accuracy"] == pytest.approx(0.946)
    alpha64 = next(s for s in recs["alpha"]["sizes"] if s["batch_size"] == 64)["time_to_target"]
    assert alpha64["train_s"]["n"] == 2 and alpha64["eligible"]
    assert recs["alpha"]["knee_batch"] == 256  # the throughput knee stays as the second column, not the answer
    assert recs["alpha"]["supported"] and recs["alpha"]["range"] == [64, 64]
    assert recs["alpha"]["max_fit"]["max_batch"] == 700
    alpha256 = next(s for s in recs["alpha"]["sizes"] if s["batch_size"] == 256)["time_to_target"]
    assert alpha256["text"] == "not reached in 2 epochs" and not alpha256["eligible"]
    beta64 = next(s for s in recs["beta"]["sizes"] if s["batch_size"] == 64)["time_to_target"]
    assert beta64["diverged_n"] == 1 and not beta64["eligible"]
    delta64 = next(s for s in recs["delta"]["sizes"] if s["batch_size"] == 64)["time_to_target"]
    assert delta64["reached_n"] == 2 and not delta64["eligible"] and "fell back (final 92.5%)" in delta64["text"]
    assert recs["gamma"]["recommended_batch"] is None and "no batch size reached the target" in recs["gamma"]["why"]
    assert any("epochs = 4" in t for t in recs["gamma"]["to_run"])
    assert any("lr_policy" in t for t in recs["gamma"]["to_run"])


def test_an_absolute_target_from_the_command_line_changes_the_answer(rule_store: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # at 80 % every alpha size reaches the target; 256 gets there first (between 0.6 s at 0.70 and 0.8 s at 0.85)
    assert main(["recommend", str(rule_store), "--json", "--target-accuracy", "80"]) == 0
    recs = {r["framework"]: r for r in json.loads(capsys.readouterr().out)["experiments"][0]["recommendations"]}
    expected = recompute(rule_store, 80.0)
    assert recs["alpha"]["recommended_batch"] == expected["alpha"]["batch"] == 256
    assert recs["alpha"]["target_how"] == "absolute" and recs["alpha"]["target_accuracy"] == pytest.approx(0.8)


@pytest.mark.parametrize("bad", ["0.9", "101", "abc", "-1"])
def test_a_bad_target_is_a_usage_error(rule_store: Path, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["recommend", str(rule_store), "--target-accuracy", bad])
    assert e.value.code == 2 and "--target-accuracy" in capsys.readouterr().err


def test_the_terminal_shows_the_answer_the_knee_and_the_rule(rule_store: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", str(rule_store)]) == 0
    out = capsys.readouterr().out
    assert "alpha: 64: reaches the target 94.6%" in out
    assert "time to target per size: 8: " in out and "256: not reached in 2 epochs" in out
    assert "700 (512 with a 256 MiB margin)" in out
    assert "rule: Recommended: the batch size that reaches the target accuracy" in out


def test_two_variants_are_two_answers_never_averaged(tmp_path: Path) -> None:
    """As experiments/optimizer_batch.toml: sgd and adam on one framework. Averaged into one cell, batch 64 would
    win (sgd's slow 8 and adam's missed 64 mixed); kept apart, sgd's answer is 64 and adam's is 8."""
    with Store.open(tmp_path) as store:
        variants = [{"name": opt, "settings": {"optimizer": opt}} for opt in ("sgd", "adam")]
        run_id = store.begin_run(EXP, experiment_spec(["alpha"], variants=variants), "pytest", {})
        for rep in (0, 1):
            _write(store, run_id, "alpha", 8, rep, 100.0, "ok", [2, 4, 6, 8], [0.5, 0.7, 0.85, 0.90], "sgd", "sgd")
            _write(store, run_id, "alpha", 64, rep, 900.0, "ok", [1, 2, 3, 4], [0.6, 0.8, 0.9, 0.92], "sgd", "sgd")
            _write(store, run_id, "alpha", 8, rep, 100.0, "ok", [1, 2, 3, 4], [0.9, 0.97, 0.98, 0.985], "adam", "adam")
            _write(store, run_id, "alpha", 64, rep, 900.0, "ok", [1, 2, 3, 4], [0.5, 0.6, 0.7, 0.80], "adam", "adam")
    recs = recommend(load(tmp_path).experiments[0])
    by_variant = {r.variant: r for r in recs}
    assert len(recs) == 2 and set(by_variant) == {"sgd", "adam"}
    assert by_variant["sgd"].batch_size == 64 and by_variant["adam"].batch_size == 8
    assert by_variant["sgd"].target.accuracy == pytest.approx(0.91)  # type: ignore[union-attr]
    assert by_variant["adam"].target.accuracy == pytest.approx(0.975)  # type: ignore[union-attr]
    assert {r.name for r in recs} == {"alpha [sgd]", "alpha [adam]"}
    # every size of each answer holds only that variant's two repeats
    assert all(s.repeats_n == 2 for r in recs for s in r.sizes)


def test_start_up_that_weighs_on_the_time_to_target_is_named(tmp_path: Path, rule_store: Path) -> None:
    """Batch 64's first evaluation comes about 1 s later than its steady pace says (as JAX's jit compiles on the first
    step): 1 s of its 2.8 s to the target, named with what to run. A curve at a steady pace (the rule store's) is
    not."""
    own = tmp_path / "start_up"  # tmp_path holds the rule store
    with Store.open(own) as store:
        run_id = store.begin_run(EXP, experiment_spec(["alpha"]), "pytest", {})
        for rep in (0, 1):
            _write(store, run_id, "alpha", 8, rep, 100.0, "ok", [2, 4, 6, 8], [0.80, 0.90, 0.94, 0.95])
            _write(store, run_id, "alpha", 64, rep, 600.0, "ok", [1.5, 2.0, 2.5, 3.0], [0.60, 0.85, 0.93, 0.955])
    (rec,) = recommend(load(own).experiments[0])
    assert rec.batch_size == 64
    (said,) = [c for c in rec.caveats if "start-up" in c]
    # evaluations at steps 31, 62, 93, 125 of 2 epochs: the pace is 1.5 s / 94 steps, so start-up 1.5 - 31 x that
    assert float(said.split()[0]) == pytest.approx(1.5 - 31 * 1.5 / 94, abs=0.005), said
    assert said.split(" ", 2)[2].startswith("of batch 64's 2.80 s to the target"), said
    assert any("weighs start-up less" in t for t in rec.to_run)
    # a fixed target's time does not shrink with a longer training: named, without that advice
    (fixed,) = recommend(load(own).experiments[0], target_accuracy=94.5)
    assert fixed.batch_size == 64 and any("s of batch 64's" in c for c in fixed.caveats)
    assert not any("longer" in t for t in fixed.to_run) and not any("longer training" in c for c in fixed.caveats)
    steady = {r.name: r for r in recommend(load(rule_store).experiments[0])}
    assert steady["alpha"].batch_size == 64 and not any("start-up" in c for c in steady["alpha"].caveats)


def test_no_accuracy_gives_no_answer_but_the_knee(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        run_id = store.begin_run(EXP, {"name": EXP, "epochs": 0}, "pytest", {})
        for bs, tput in ((8, 10.0), (64, 50.0)):
            for rep in (0, 1):
                store.write_trial(TrialOutcome(trial=sweep_trial("alpha", bs, rep), status="ok",
                                               metrics=WorkerMetrics(step_samples_per_s=tput + rep)), run_id, {})
    (rec,) = recommend(load(tmp_path).experiments[0])
    assert rec.batch_size is None and rec.knee_batch == 64
    assert "no accuracy to reach" in rec.why and "knee is batch 64" in rec.why
    assert any("epochs >= 1" in t for t in rec.to_run)


def test_a_best_accuracy_near_chance_gives_no_answer(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        run_id = store.begin_run(EXP, experiment_spec(["alpha"]), "pytest", {})
        for bs in (8, 64):
            for rep in (0, 1):
                _write(store, run_id, "alpha", bs, rep, 100.0 * bs, "ok", [1, 2, 3, 4], [0.10, 0.11, 0.12, 0.13])
    (rec,) = recommend(load(tmp_path).experiments[0])
    assert rec.batch_size is None and "within 5 points of chance (10.0%)" in rec.why


def test_nothing_finished_gives_no_size_and_says_why(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        run_id = store.begin_run(EXP, {"name": EXP}, "pytest", {})
        store.write_trial(TrialOutcome(trial=sweep_trial("alpha", 8, 0), status="oom", reason="made up"), run_id, {})
    (rec,) = recommend(load(tmp_path).experiments[0])
    assert rec.batch_size is None and not rec.supported and "no trial finished (oom)" in rec.why


def test_recommend_without_a_store_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", str(tmp_path)]) == 2
    assert "no results store" in capsys.readouterr().err


def test_a_store_without_learning_curves_says_so_and_gives_the_knee(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        run_id = store.begin_run(EXP, experiment_spec(["alpha"]), "pytest", {})
        for bs in (8, 64):
            for rep in (0, 1):
                store.write_trial(TrialOutcome(trial=sweep_trial("alpha", bs, rep), status="ok", metrics=WorkerMetrics(
                    step_samples_per_s=10.0 * bs, accuracy=0.9)), run_id, {})
    (rec,) = recommend(load(tmp_path).experiments[0])
    assert rec.batch_size is None and "no learning curve" in rec.why and rec.knee_batch == 64
    assert any("eval_points" in t for t in rec.to_run)


def test_a_sweep_that_only_diverged_recommends_nothing_and_says_so(tmp_path: Path) -> None:
    """As learning_rate = 1e6: every trial diverged; nothing is recommended, and the reason is the divergence."""
    with Store.open(tmp_path) as store:
        run_id = store.begin_run(EXP, experiment_spec(["alpha"]), "pytest", {})
        for bs in (8, 32):
            _write(store, run_id, "alpha", bs, 0, 100.0, "diverged", [1.0], [0.1])
    (rec,) = recommend(load(tmp_path).experiments[0])
    assert rec.batch_size is None and "every trial that trained diverged (batch 8, 32)" in rec.why
    assert any("learning_rate" in t for t in rec.to_run)


def _noise_rows(curve: Sequence[CurvePoint], early_g2: float, late_g2: float, trace: float) -> list[NoiseRecord]:
    """A measurement at each curve point whose X means follow E|G_B|² = |G|² + tr(Σ)/B exactly: |G|² = early_g2
    before half the training, late_g2 from then on."""
    half = curve[-1].samples_seen / 2
    out = []
    for p in curve:
        g2 = late_g2 if p.samples_seen >= half else early_g2
        out.append(NoiseRecord(point=p.point, step=p.step, samples_seen=p.samples_seen, b_small=8, b_big=32,
                               x_small_mean=g2 + trace / 8, x_big_mean=g2 + trace / 32, small_n=16, big_n=4,
                               noise_s=0.2))
    return out


def test_the_gradient_noise_scale_of_the_later_half_of_training_is_shown_beside_the_answer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """B_simple = tr(Σ)/|G|² over each trial's later half (|G|² 1, tr(Σ) 100: 100); the early points (|G|² 10) would
    pull an all-points average to 100/3.25 ≈ 31."""
    curves = []
    with Store.open(tmp_path) as store:
        run_id = store.begin_run(EXP, experiment_spec(["alpha"], gradient_noise=4), "pytest (noise rows)", {})
        for bs in (8, 64):
            for repeat, (tput, status, times, accs) in enumerate(CASES[("alpha", bs)]):
                curve = even_curve(bs, times, accs)
                curves.append(curve)
                store.write_trial(TrialOutcome(
                    trial=sweep_trial("alpha", bs, repeat), status=status, device={"device": "cpu"},  # type: ignore[arg-type]
                    curve=curve, gradient_noise=_noise_rows(curve, 10.0, 1.0, 100.0),
                    metrics=WorkerMetrics(step_samples_per_s=tput, accuracy=accs[-1])), run_id, {})
    assert main(["recommend", str(tmp_path), "--json"]) == 0
    (rec,) = json.loads(capsys.readouterr().out)["experiments"][0]["recommendations"]
    noise = rec["gradient_noise"]
    later = sum(p.samples_seen >= c[-1].samples_seen / 2 for c in curves for p in c)
    assert noise["b_simple"] == pytest.approx(100.0) and noise["trials_n"] == 4 and noise["points_n"] == later < 16
    assert main(["recommend", str(tmp_path)]) == 0
    assert "B_simple ≈ 100 (predicted critical batch)" in capsys.readouterr().out


def test_a_store_without_gradient_noise_shows_none(rule_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", str(rule_store), "--json"]) == 0
    recs = json.loads(capsys.readouterr().out)["experiments"][0]["recommendations"]
    assert recs and all(r["gradient_noise"] is None for r in recs)
    assert main(["recommend", str(rule_store)]) == 0
    assert "B_simple" not in capsys.readouterr().out


def test_a_warm_compilation_cache_changes_neither_the_answer_nor_its_start_up(tmp_path: Path) -> None:
    """Two stores of one JAX-like sweep (issue 31): compilation outside the training clock, so the curves are the
    same; one with the cache off (every trial compiles 3 s), one where each size's second repeat found it warm
    (0.3 s spent, 3 s saved). Same batch, same start-up caveat: the figure is what a fresh process pays."""
    stores = {}
    for name, second in (("off", ("off", 3.0, 3.0)), ("cached", ("warm", 0.3, 3.0))):
        stores[name] = tmp_path / name
        with Store.open(stores[name]) as store:
            run_id = store.begin_run(EXP, experiment_spec(["alpha"]), "pytest", {})
            for rep, (cache, spent, cold) in enumerate((("cold" if name == "cached" else "off", 3.0, 3.0), second)):
                for bs, tput, times, accs in ((8, 100.0, [2, 4, 6, 8], [0.80, 0.90, 0.94, 0.95]),
                                              (64, 600.0, [0.5, 1.0, 1.5, 2.0], [0.60, 0.85, 0.93, 0.955])):
                    metrics = WorkerMetrics(step_samples_per_s=tput, accuracy=accs[-1], compile_s=spent,
                                            compile_cache=cache, compile_cold_s=cold)
                    store.write_trial(TrialOutcome(trial=sweep_trial("alpha", bs, rep), status="ok",
                                                   device={"device": "cpu"}, curve=even_curve(bs, times, accs),
                                                   metrics=metrics), run_id, {})
    (off,), (cached,) = (recommend(load(stores[n]).experiments[0]) for n in ("off", "cached"))
    assert off.batch_size == cached.batch_size == 64
    said = [c for c in cached.caveats if c.startswith("start-up")]
    assert said and said == [c for c in off.caveats if c.startswith("start-up")], (said, off.caveats)
    assert "3.00 s of it compiling as a fresh process pays it" in said[0], said
