"""End to end: a real ``batchscope run`` of a PyTorch trial stores the sampler's figures and samples."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harness.cli import main
from harness.run.sweep import SweepOptions


@pytest.mark.slow
def test_batchscope_run_stores_host_figures_and_phase_tagged_samples(cache_dir: Path, tmp_path: Path, capsys):
    toml = tmp_path / "sampled.toml"
    toml.write_text("""
name = "sampled"
frameworks = ["pytorch"]
model = "tiny_cnn"
dataset = "synthetic"
synthetic_shape = [1, 8, 8]
synthetic_classes = 3
synthetic_samples = 256
batch_sizes = [16]
warmup_steps = 2
timed_steps = 30
threads = 1
device = "cpu"
sample_interval_ms = 20
eval_batch_size = 64
eval_points = 0  # phases in one order, each once (a phase resumed after an evaluation point: test_windows.py)
""")
    out = tmp_path / "out"
    assert main(["run", str(toml), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "GPU not sampled (device = cpu)" in printed and "every 20 ms" in printed
    assert printed.count("sampler: every") == 1  # the notice is printed once per run, not per trial

    conn = sqlite3.connect(out / "results.sqlite")
    conn.row_factory = sqlite3.Row
    row = dict(conn.execute("SELECT * FROM trials").fetchone())
    assert row["status"] == "ok", row["reason"]
    assert row["cpu_util_pct"] is not None and row["cpu_util_pct"] > 0
    assert row["rss_peak_mib"] > 50  # a Python process with torch loaded
    assert row["sample_interval_ms"] == 20.0
    n = conn.execute("SELECT COUNT(*) FROM samples WHERE trial_hash = ?", (row["trial_hash"],)).fetchone()[0]
    assert row["samples_n"] == n > 10
    assert row["gpu_util_pct"] is None and row["energy_j"] is None and row["j_per_sample"] is None  # CPU run

    samples = [dict(r) for r in conn.execute("SELECT * FROM samples ORDER BY t_s")]
    phases = [s["phase"] for s in samples]
    assert "setup" in phases  # torch's import alone spans many 20 ms ticks
    order = ["spawn", "setup", "warmup", "timed", "train", "eval"]
    assert [order.index(p) for p in phases] == sorted(order.index(p) for p in phases)  # in phase order
    assert all(s["cpu_util_pct"] is not None for s in samples)
    # a worker caught while exiting has released its memory: no RSS then, rather than a false 0
    rss = [s["rss_mib"] for s in samples]
    while rss and rss[-1] is None:
        rss.pop()
    assert len(rss) > 0.9 * len(samples) and all(r > 0 for r in rss)  # no gap before the exit
    assert max(s["cpu_util_pct"] for s in samples) < 100 * 4  # no CPU time counted twice
    assert all(s["gpu_util_pct"] is None for s in samples)
    ts = [s["t_s"] for s in samples]
    assert ts == sorted(ts) and ts[0] >= 0

    import json
    mon = json.loads(row["monitor_json"])
    assert mon["phases"]["timed"]["series"]["cpu_util_pct"]["mean"] == pytest.approx(row["cpu_util_pct"])
    assert "GPU not sampled" in mon["notes"][0]
    assert "samples" not in mon


@pytest.mark.slow
@pytest.mark.heavy("harness/monitor/", "harness/run/ray_executor.py")  # Ray
def test_sampler_travels_to_a_ray_node_and_samples_there(cache_dir: Path, tmp_path: Path):
    """RayExecutor pickles the monitor factory to the node: the sampler must be built and run there."""
    from harness.config.experiment import parse_experiment
    from harness.monitor.sampler import monitor_factory_for
    from harness.run.ray_executor import RayExecutor
    from harness.run.sweep import run_sweep
    from harness.store import Store

    exp = parse_experiment({"name": "rayed", "frameworks": ["pytorch"], "batch_sizes": [4], "model": "tiny_cnn",
                            "synthetic_shape": [1, 8, 8], "synthetic_samples": 32, "warmup_steps": 1,
                            "timed_steps": 2, "threads": 1, "sample_interval_ms": 20}, source="inline")
    factory, _ = monitor_factory_for(exp)
    executor = RayExecutor(init_kwargs={"num_cpus": 2, "configure_logging": False}, monitor_factory=factory,
                           log_dir=tmp_path / "logs")
    try:
        run_sweep(exp, tmp_path, SweepOptions(cache_dir=cache_dir, executor=executor, monitor_factory=factory))
    finally:
        executor.shutdown()
    with Store.open(tmp_path) as store:
        row = store.trials()[0]
        n = store.conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert row["status"] == "ok", row["reason"]
    assert row["samples_n"] == n > 5 and row["cpu_util_pct"] is not None and row["rss_peak_mib"] > 0
