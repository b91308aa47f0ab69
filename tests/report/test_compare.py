"""`batchscope compare`: the reference table, side by side, and the findings computed from trials."""

from __future__ import annotations

import io
from typing import Any

import pytest

from harness.cli import compare as compare_cli
from harness.cli import main
from report.answer import thesis as compare


def _thesis_trials(repeats: int = 1, jitter: float = 0.0) -> list[dict[str, Any]]:
    """Trials whose figures are the thesis's own (a GPU run that reproduces it exactly)."""
    ref = {(r["framework"], r["batch_size"], r["metric"]): r["value"] for r in compare.load_reference()}
    trials = []
    for fw in ("pytorch", "tensorflow", "mxnet"):
        for bs in (4, 8, 16, 32, 64, 128, 256, 512, 1024):
            for rep in range(repeats):
                delta = jitter * (rep - (repeats - 1) / 2)
                acc = ref[("tensorflow", bs, "accuracy_pct")]  # the only published curve, for all three
                trials.append({"experiment": "osu2020", "purpose": "sweep", "framework": fw, "batch_size": bs,
                               "repeat": rep, "status": "ok", "dataset": "cifar10", "epochs": 10,
                               "device": "gpu",
                               "gpu_util_pct": ref[(fw, bs, "gpu_util_pct")] + delta,
                               "gpu_mem_used_peak_mib": ref[(fw, bs, "gpu_mem_mib")] + delta,
                               "proc_gpu_mem_peak_mib": None, "accuracy": (acc + delta) / 100})
    return trials


def _row(rows: list[dict[str, Any]], fw: str, bs: int, metric: str) -> dict[str, Any]:
    return next(r for r in rows if (r["framework"], r["batch_size"], r["metric"]) == (fw, bs, metric))


def _cpu_trials(dataset: str = "mnist5k") -> list[dict[str, Any]]:
    accs = {4: 0.80, 16: 0.91, 64: 0.93, 256: 0.85}
    return [{"experiment": "quick", "purpose": "sweep", "framework": fw, "batch_size": bs, "repeat": 0,
             "status": "ok", "dataset": dataset, "epochs": 2, "device": "cpu", "gpu_util_pct": None,
             "gpu_mem_used_peak_mib": None, "proc_gpu_mem_peak_mib": None, "accuracy": a}
            for fw in ("pytorch", "mxnet") for bs, a in accs.items()]


def test_reference_is_shipped_with_citation_and_our_metric_names() -> None:
    rows = compare.load_reference()
    assert {r["metric"] for r in rows} == set(compare.METRICS)
    assert {r["framework"] for r in rows} == {"pytorch", "tensorflow", "mxnet"}
    assert all("osu1587693436870594" in r["source"] for r in rows)
    mx = {r["batch_size"]: r["value"] for r in rows
          if r["framework"] == "mxnet" and r["metric"] == "gpu_mem_mib"}
    assert mx[128] == pytest.approx(2495.153) and all(r["unit"] == "MiB" for r in rows
                                                      if r["metric"] == "gpu_mem_mib")
    assert len([r for r in rows if r["metric"] == "accuracy_pct"]) == 9  # TensorFlow only


def test_side_by_side_mean_sd_and_difference() -> None:
    rows = compare.side_by_side(_thesis_trials(repeats=3, jitter=2.0))
    assert set(rows[0]) == {"framework", "batch_size", "metric", "ours", "ours_sd", "n", "theirs", "diff",
                            "unit"}
    r = _row(rows, "mxnet", 512, "gpu_util_pct")
    assert r["ours"] == pytest.approx(46.09) and r["ours_sd"] == pytest.approx(2.0) and r["n"] == 3
    assert r["diff"] == pytest.approx(0.0, abs=1e-9)
    acc = next(r for r in rows if (r["framework"], r["batch_size"], r["metric"]) == ("tensorflow", 128,
                                                                                      "accuracy_pct"))
    assert acc["ours"] == pytest.approx(69.77) and acc["theirs"] == pytest.approx(69.77)
    no_ref = next(r for r in rows if (r["framework"], r["metric"]) == ("pytorch", "accuracy_pct"))
    assert no_ref["theirs"] is None and no_ref["diff"] is None and no_ref["ours"] is not None


def test_side_by_side_skips_failed_trials_probes_and_meaningless_accuracy() -> None:
    trials = _cpu_trials()
    trials[0] = trials[0] | {"status": "oom", "accuracy": None}
    trials.append(trials[1] | {"purpose": "probe", "accuracy": 0.0})
    rows = compare.side_by_side(trials)
    first = _row(rows, "pytorch", 4, "accuracy_pct")
    assert first["ours"] is None and first["n"] == 0
    second = next(r for r in rows if (r["framework"], r["batch_size"], r["metric"]) == ("pytorch", 16,
                                                                                        "accuracy_pct"))
    assert second["ours"] == pytest.approx(91.0) and second["n"] == 1
    # accuracy on another data set than CIFAR-10 is shown beside, never differenced
    tf = compare.side_by_side([trials[1] | {"framework": "tensorflow"}])
    assert next(r for r in tf if r["metric"] == "accuracy_pct")["diff"] is None
    synthetic = compare.side_by_side(_cpu_trials("synthetic"))
    assert all(r["ours"] is None for r in synthetic if r["metric"] == "accuracy_pct")


def test_findings_hold_on_the_thesis_own_numbers() -> None:
    findings = compare.thesis_findings(_thesis_trials())
    verdicts = {f["finding"]: f["holds"] for f in findings}
    assert all(v is True for v in verdicts.values()), findings
    most = next(f for f in findings if f["finding"].startswith("MXNet uses the most"))
    assert "mxnet 2496 MiB" in most["evidence"]  # mean of 2495.2, 2485.6, 2491.9, 2511.5


def test_findings_are_computed_not_canned() -> None:
    trials = _thesis_trials()
    for t in trials:
        if t["framework"] == "tensorflow":
            t["gpu_mem_used_peak_mib"] = 9000.0  # TensorFlow now the memory hog
        if t["framework"] == "mxnet":
            t["gpu_util_pct"] = 80.0 - t["batch_size"] / 20  # falls with batch size
        t["accuracy"] = 0.3 + t["batch_size"] / 4000  # rises monotonically: no middle peak
    verdicts = {f["finding"]: f for f in compare.thesis_findings(trials)}
    most = verdicts[f"MXNet uses the most GPU memory at large batch sizes (>= {compare.LARGE_BATCH})"]
    assert most["holds"] is False and "tensorflow uses the most" in most["evidence"]
    assert verdicts["mxnet: GPU usage rises with batch size"]["holds"] is False
    acc = verdicts["tensorflow: accuracy after training peaks at a middle batch size, "
                   "not the smallest or largest"]
    assert acc["holds"] is False and "best at batch 1024" in acc["evidence"]


def test_findings_on_a_cpu_run_say_not_measurable() -> None:
    findings = compare.thesis_findings(_cpu_trials())
    gpu = [f for f in findings if "accuracy" not in f["finding"]]
    assert gpu and all(f["holds"] is None and "measured no GPU" in f["evidence"] for f in gpu)
    acc = [f for f in findings if "accuracy" in f["finding"]]
    assert {f["holds"] for f in acc} == {True}  # 0.93 at 64, lower at 4 and 256
    synthetic = compare.thesis_findings(_cpu_trials("synthetic"))
    assert any(f["holds"] is None and "random noise" in f["evidence"] for f in synthetic)


def test_render_on_cpu_says_so_instead_of_comparing() -> None:
    buf = io.StringIO()
    compare_cli.render(_cpu_trials(), file=buf)
    text = buf.getvalue()
    assert "No GPU was measured" in text and "GPU MiB" not in text
    assert "not differenced" in text and "91.0" in text
    buf = io.StringIO()
    compare_cli.render(_thesis_trials(), file=buf)
    assert "GPU MiB ours" in buf.getvalue() and "[holds]" in buf.getvalue()


def test_compare_command_errors_are_clear(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(tmp_path / "nothing")]) == 2
    assert "no results store" in capsys.readouterr().err


def test_a_peak_within_the_spread_over_repeats_is_no_peak() -> None:
    trials = []
    for bs, accs in ((4, (0.920, 0.934)), (16, (0.925, 0.931)), (256, (0.60, 0.62))):
        for rep, a in enumerate(accs):
            trials.append({"experiment": "q", "purpose": "sweep", "framework": "pytorch", "batch_size": bs,
                           "repeat": rep, "status": "ok", "dataset": "mnist5k", "device": "cpu",
                           "accuracy": a})
    finding = next(f for f in compare.thesis_findings(trials) if f["finding"].startswith("pytorch: accuracy"))
    assert finding["holds"] is False and "within the spread over repeats" in finding["evidence"]
    trials[2]["accuracy"], trials[3]["accuracy"] = 0.96, 0.962  # now clearly above batch 4
    finding = next(f for f in compare.thesis_findings(trials) if f["finding"].startswith("pytorch: accuracy"))
    assert finding["holds"] is True


def _h100_trial(tmp_path: Any, framework: str, batch_size: int, timed_s: float, util: float) -> dict[str, Any]:
    """A GPU trial stored from fake samples (100 ms apart, as the sampler takes them): warm-up, then ``timed_s`` of
    timed steps, then the evaluation."""
    from harness.monitor.windows import Aggregator, trial_aggregates
    from harness.records import MonitorResult, TrialOutcome
    from harness.store import Store
    from tests.conftest import make_trial

    agg = Aggregator(0.1)
    energy = 0
    for i in range(40):
        energy += 20_000  # 200 W
        agg.add(i * 0.1, {"gpu_util_pct": util, "power_w": 200.0, "energy_mj": energy, "gpu_mem_used_mib": 949.0})
    phases = [("setup", 0.0), ("warmup", 0.5), ("timed", 1.0), ("eval", 1.0 + timed_s)]
    trial = make_trial(framework, batch_size, device="gpu", timed_steps=10, experiment="quick")
    outcome = TrialOutcome(trial=trial, status="ok", phase_steps={"warmup": 2, "timed": 10, "train": 0},
                           monitor=MonitorResult(aggregates=trial_aggregates(agg.summarise(phases))),
                           device={"device": "cuda:0", "gpu_name": "NVIDIA H100 80GB HBM3"})
    with Store.open(tmp_path / f"{framework}{batch_size}") as store:
        store.write_trial(outcome, run_id=1, env={})
        return store.trials()[0] | {"purpose": "sweep", "dataset": "synthetic"}


def test_compare_says_not_measurable_for_utilisation_read_over_48_ms(tmp_path: Any) -> None:
    """Issue 29: JAX at batch 64 stepped for ~48 ms on an H100; NVML read 0 % there, and compare still judged
    "PyTorch keeps the GPU least busy". A window shorter than NVML can read gives no figure and no verdict."""
    trials = [_h100_trial(tmp_path, "pytorch", bs, 1.5, 10.0) for bs in (64, 128, 256)]
    trials += [_h100_trial(tmp_path, "jax", 64, 0.048, 0.0)]
    trials += [_h100_trial(tmp_path, "jax", bs, 1.5, 30.0) for bs in (128, 256)]
    jax64 = next(t for t in trials if (t["framework"], t["batch_size"]) == ("jax", 64))
    assert jax64["gpu_util_pct"] is None and jax64["energy_j"] is None and jax64["j_per_sample"] is None
    assert jax64["readings_note"].startswith("timed phase: 48 ms with 1 sample(s) at 100 ms")
    assert jax64["gpu_mem_used_peak_mib"] == 949.0  # memory is read at a moment: kept
    buf = io.StringIO()
    compare_cli.render(trials, file=buf)
    text = buf.getvalue()
    assert "[not measurable] PyTorch keeps the GPU least busy" in text
    assert "could not be read in 1 trial(s) (jax batch 64)" in text and "shorter than NVML can read" in text
    assert "[does not hold] PyTorch keeps" not in text and "[holds] PyTorch keeps" not in text
    # every trial long enough: the verdict is given again (PyTorch 10 % against JAX 30 %)
    trials[3] = _h100_trial(tmp_path / "long", "jax", 64, 1.5, 30.0)
    verdict = next(f for f in compare.thesis_findings(trials) if f["finding"].startswith("PyTorch keeps"))
    assert verdict["holds"] is True


def test_the_energy_finding_says_not_measurable_where_a_window_was_too_short(tmp_path: Any) -> None:
    from harness.cells import cells
    from report.answer.findings import energy_best

    trials = [_h100_trial(tmp_path, "jax", 64, 0.048, 0.0), _h100_trial(tmp_path, "jax", 128, 1.5, 30.0),
              _h100_trial(tmp_path, "jax", 256, 1.5, 30.0)]
    text = " ".join(f.text for f in energy_best(cells(trials, ["jax"]), ["jax"]))
    assert "jax's energy per sample is not measurable at batch 64: timed phase: 48 ms" in text
    assert "used the least energy" not in text  # no winner among the cells that could be read
    trials[0] = _h100_trial(tmp_path / "long", "jax", 64, 1.5, 30.0)
    text = " ".join(f.text for f in energy_best(cells(trials, ["jax"]), ["jax"]))
    assert "jax used the least energy per sample at batch 256" in text
