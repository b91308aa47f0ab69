"""A real PyTorch sweep on CPU at tiny sizes: real figures in the store, device rules honoured."""

from __future__ import annotations

import pytest

from harness.config.experiment import parse_experiment
from harness.errors import ConfigError
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import Store

pytestmark = pytest.mark.slow  # every test here starts a real framework


def test_real_pytorch_sweep_stores_a_row_per_batch_size(tmp_path, cache_dir):
    exp = parse_experiment({
        "name": "torchsmoke", "frameworks": ["pytorch"], "model": "osu_cnn", "dataset": "synthetic",
        "synthetic_shape": [1, 12, 12], "synthetic_samples": 96, "batch_sizes": [4, 32], "epochs": 1,
        "warmup_steps": 2, "timed_steps": 4, "threads": 1, "repeats": 2,
    }, source="inline")
    result = run_sweep(exp, tmp_path, SweepOptions(cache_dir=cache_dir))
    assert [o.status for o in result.outcomes] == ["ok"] * 4, [o.reason for o in result.outcomes]
    with Store.open(tmp_path) as store:
        rows = store.trials()
    for r in rows:
        assert r["step_samples_per_s"] > 0 and r["step_time_ms_median"] > 0 and r["step_time_ms_iqr"] >= 0
        assert r["rss_peak_mib"] > 50  # a real torch process
        assert 0 <= r["accuracy"] <= 1
        assert r["epochs_done"] == pytest.approx(1.0)
        assert r["param_count"] == 1 * 9 * 32 + 32 + 32 * 6 * 6 * 128 + 128 + 128 * 10 + 10
        assert r["device"] == "cpu" and '"torch"' in r["versions_json"]
        # the math mode: asked ieee (the default), read back from torch as n/a on the CPU; no MFU off the GPU
        assert (r["math_mode"], r["math_mode_seen"], r["mfu_pct"], r["mfu_note"]) == ("ieee", "n/a", None, None)
    by_bs = {r["batch_size"]: r for r in rows if r["repeat"] == 0}
    assert by_bs[4]["train_steps_n"] == 24 and by_bs[32]["train_steps_n"] == 3
    # the learning curve: eval_points (8 by default) spread over the samples, then the end of the training: at 11, 21,
    # 32, 43, 53, 64, 75 and 85 of the 96 samples, each after the first step of 4 that reaches it (21: after step 6)
    with Store.open(tmp_path) as store:
        curves = {bs: store.curves(r["trial_hash"]) for bs, r in by_bs.items()}
    assert [p["step"] for p in curves[4]] == [3, 6, 8, 11, 14, 16, 19, 22, 24]
    assert [p["step"] for p in curves[32]] == [1, 2, 3]  # 3 steps: a point after each
    for bs, curve in curves.items():
        assert curve[-1]["accuracy"] == by_bs[bs]["accuracy"] and curve[-1]["eval_loss"] == by_bs[bs]["eval_loss"]
        assert curve[-1]["train_s"] == pytest.approx(by_bs[bs]["train_s"])
        assert by_bs[bs]["eval_total_s"] >= sum(p["eval_s"] for p in curve)


def test_a_learning_rate_that_blows_the_weights_up_gives_a_diverged_trial(tmp_path, cache_dir):
    """Issue 22: learning_rate = 1e6 at batch 32 was stored ok, with 10 % accuracy and a NULL loss."""
    exp = parse_experiment({
        "name": "blowup", "frameworks": ["pytorch"], "model": "osu_cnn", "dataset": "mnist5k", "train_samples": 1024,
        "batch_sizes": [32], "epochs": 1, "warmup_steps": 2, "timed_steps": 4, "threads": 1,
        "learning_rate": 1e6, "device": "cpu",
    }, source="inline")
    result = run_sweep(exp, tmp_path, SweepOptions(cache_dir=cache_dir))
    (outcome,) = result.outcomes
    assert outcome.status == "diverged", (outcome.status, outcome.reason)
    assert "at eval point" in outcome.reason and ("eval loss is nan" in outcome.reason
                                                  or "weights not finite" in outcome.reason), outcome.reason
    with Store.open(tmp_path) as store:
        (row,) = store.trials()
        curve = store.curves(row["trial_hash"])
    assert row["status"] == "diverged" and row["reason"] == outcome.reason
    assert row["train_steps_n"] < 32 and row["step_samples_per_s"] > 0  # stopped there, measured up to there
    assert curve and f"(step {curve[-1]['step']})" in row["reason"]


def test_asking_for_a_gpu_where_there_is_none_is_an_error(tmp_path, cache_dir):
    pytest.importorskip("pynvml")
    from harness.monitor.environment import gpus

    if gpus()[0]:
        pytest.skip("this machine has a GPU: the no-GPU refusal cannot be shown here")
    exp = parse_experiment({"name": "gpuask", "frameworks": ["pytorch"], "dataset": "synthetic",
                            "synthetic_shape": [1, 8, 8], "synthetic_samples": 16, "batch_sizes": [4],
                            "device": "gpu"}, source="inline")
    # refused in the parent, before anything is written (issue 13, item 8), not an error row per trial
    with pytest.raises(ConfigError, match='device = "gpu".*NVML sees no GPU'):
        run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    assert not (tmp_path / "out").exists()
