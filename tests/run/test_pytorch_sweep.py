"""A real PyTorch sweep on CPU at tiny sizes: real figures in the store, device rules honoured."""

from __future__ import annotations

import pytest

from harness.config.experiment import parse_experiment
from harness.errors import ConfigError
from harness.run.sweep import run_sweep
from harness.store import Store

pytestmark = pytest.mark.slow  # every test here starts a real framework


def test_real_pytorch_sweep_stores_a_row_per_batch_size(tmp_path, cache_dir):
    exp = parse_experiment({
        "name": "torchsmoke", "frameworks": ["pytorch"], "model": "osu_cnn", "dataset": "synthetic",
        "synthetic_shape": [1, 12, 12], "synthetic_samples": 96, "batch_sizes": [4, 32], "epochs": 1,
        "warmup_steps": 2, "timed_steps": 4, "threads": 1, "repeats": 2,
    }, source="inline")
    result = run_sweep(exp, tmp_path, cache_dir=cache_dir)
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
    by_bs = {r["batch_size"]: r for r in rows if r["repeat"] == 0}
    assert by_bs[4]["train_steps_n"] == 24 and by_bs[32]["train_steps_n"] == 3


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
        run_sweep(exp, tmp_path / "out", cache_dir=cache_dir)
    assert not (tmp_path / "out").exists()
