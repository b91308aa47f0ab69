"""Accuracy after N epochs on the held-out split, for every framework, on real (embedded) data."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.experiment import parse_experiment
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import Store
from report.answer.thesis import side_by_side


@pytest.mark.slow
def test_every_framework_learns_digits_in_three_epochs(tmp_path: Path, cache_dir: Path) -> None:
    exp = parse_experiment({
        "name": "acc", "frameworks": ["pytorch", "tensorflow", "mxnet"], "model": "osu_cnn",
        "dataset": "digits",
        "batch_sizes": [32], "epochs": 3, "warmup_steps": 2, "timed_steps": 5, "optimizer": "adam",
        "learning_rate": 0.001, "device": "cpu", "threads": 1, "timeout_s": 300})
    run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    with Store.open(tmp_path / "out", create=False) as store:
        rows = store.trials()
    assert [r["status"] for r in rows] == ["ok"] * 3, [r["reason"] for r in rows]
    for r in rows:
        # 1,438 training digits in batches of 32: 45 steps an epoch, the last one short
        assert r["train_steps_n"] == 3 * 45 and r["epochs_done"] == pytest.approx(3.0)
        assert r["accuracy"] > 0.85, (r["framework"], r["accuracy"])  # 10 classes: chance is 0.10
        assert r["dataset"] == "digits"
    # same initial weights, same batches in the same order: the frameworks end up close
    accs = [r["accuracy"] for r in rows]
    assert max(accs) - min(accs) < 0.08, accs
    pct = {r["framework"]: r["ours"] for r in side_by_side(rows) if r["metric"] == "accuracy_pct"}
    assert pct == pytest.approx({r["framework"]: 100 * r["accuracy"] for r in rows})
