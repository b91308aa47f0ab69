"""A real sweep with the gradient-noise measurement on: rows at every point and a finite, positive B_simple."""

from __future__ import annotations

import math

import pytest

from harness.config.experiment import parse_experiment
from harness.noise import estimate_from_rows, format_estimate
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import Store

pytestmark = pytest.mark.slow  # starts a real framework


@pytest.mark.parametrize("framework", ["pytorch"])
def test_a_sweep_with_gradient_noise_stores_rows_and_a_positive_noise_scale(tmp_path, cache_dir, framework):
    exp = parse_experiment({
        "name": "noisesmoke", "frameworks": [framework], "model": "osu_cnn", "dataset": "mnist5k",
        "train_samples": 1024, "batch_sizes": [8, 32], "epochs": 1, "warmup_steps": 2, "timed_steps": 4,
        "threads": 1, "eval_points": 2, "gradient_noise": 4, "optimizer": "sgd", "learning_rate": 0.05,
        "device": "cpu",
    }, source="inline")
    result = run_sweep(exp, tmp_path, SweepOptions(cache_dir=cache_dir))
    assert [o.status for o in result.outcomes] == ["ok", "ok"], [o.reason for o in result.outcomes]
    with Store.open(tmp_path) as store:
        trials = {t["batch_size"]: t for t in store.trials()}
        rows = {bs: store.gradient_noise(t["trial_hash"]) for bs, t in trials.items()}
        curves = {bs: store.curves(t["trial_hash"]) for bs, t in trials.items()}
    for bs, mine in rows.items():
        assert [r["step"] for r in mine] == [p["step"] for p in curves[bs]] and len(mine) == 3
        for r in mine:
            assert (r["b_small"], r["b_big"], r["small_n"], r["big_n"]) == (bs, 4 * bs, 16, 4)
            assert r["x_small_mean"] > r["x_big_mean"] > 0 and r["noise_s"] > 0
        assert trials[bs]["eval_total_s"] >= sum(r["noise_s"] for r in mine)
    est = estimate_from_rows([r for mine in rows.values() for r in mine])
    assert est is not None and est.trials_n == 2 and est.points_n == 6
    assert est.b_simple is not None and math.isfinite(est.b_simple) and est.b_simple > 0, est
    assert "B_simple" in format_estimate(est)
