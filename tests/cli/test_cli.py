"""The command line: exit codes, bad input refused with nothing written, export, doctor."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.helpers.cli import bs, cli, write


def test_bad_experiment_exits_2_and_writes_nothing(tmp_path):
    exp = write(tmp_path, 'name = "x"\nframeworks = ["pytorch"]\nbatch_sizes = [0, 4]\n')
    out = tmp_path / "out"
    r = cli("run", str(exp), "--out", str(out))
    assert r.returncode == 2
    assert "batch size 0" in r.stderr and str(exp) in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_unknown_key_exits_2(tmp_path):
    exp = write(tmp_path, 'name = "x"\nframeworks = ["pytorch"]\nbatch_sizes = [4]\nbatchsize = 3\n')
    r = cli("run", str(exp), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "'batchsize'" in r.stderr and "valid keys" in r.stderr


def test_bad_cli_values_exit_2(tmp_path):
    r = cli("run", "experiments/quick.toml", "--batch-sizes", "4,x", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "comma-separated" in r.stderr
    r = cli("run", "experiments/quick.toml", "--frameworks", "caffe", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "unknown framework 'caffe'" in r.stderr
    assert not (tmp_path / "o").exists()
    r = cli("run", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "no such experiment file" in r.stderr


def test_adapters_lists_every_builtin():
    r = cli("adapters")
    assert r.returncode == 0
    for name in ("pytorch", "tensorflow", "mxnet"):
        assert name in r.stdout


@pytest.mark.process
def test_doctor_reports_cpu_and_gpu_state():
    r = cli("doctor")
    assert r.returncode in (0, 1), r.stderr  # 1 only when a pin problem is found, which it then names
    assert "python" in r.stdout and "frameworks" in r.stdout
    assert "no GPU: running on CPU" in r.stdout or "GPU(s):" in r.stdout
    if r.returncode == 1:
        assert "pin problems" in r.stdout


def test_export_of_a_missing_store_exits_2(tmp_path):
    r = cli("export", str(tmp_path))
    assert r.returncode == 2 and "no results store" in r.stderr


@pytest.mark.slow
def test_real_pytorch_run_then_export(tmp_path):
    exp = write(tmp_path, """
name = "clismoke"
frameworks = ["pytorch"]
model = "osu_cnn"
dataset = "synthetic"
synthetic_shape = [1, 12, 12]
synthetic_samples = 128
batch_sizes = [4, 16]
warmup_steps = 2
timed_steps = 5
threads = 1
""")
    out = tmp_path / "out"
    env = {"BATCHSCOPE_CACHE": str(tmp_path / "cache")}
    r = bs("run", str(exp), "--out", str(out), env_extra=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "[  2/2] pytorch" in r.stdout and "samples/s" in r.stdout
    assert (out / "results.sqlite").exists() and (out / "clismoke.resolved.json").exists()
    r = bs("run", str(exp), "--out", str(out), env_extra=env)
    assert r.returncode == 2 and "--resume" in r.stderr
    r = bs("run", str(exp), "--out", str(out), "--resume", env_extra=env)
    assert r.returncode == 0 and "2 trial(s) already stored" in r.stdout
    for fmt in ("csv", "parquet"):
        r = bs("export", str(out), "--format", fmt)
        assert r.returncode == 0, r.stderr
        path = out / "export" / f"trials.{fmt}"
        trials = pd.read_csv(path) if fmt == "csv" else pd.read_parquet(path)
        assert sorted(trials["batch_size"]) == [4, 16]
        assert (trials["status"] == "ok").all() and (trials["step_samples_per_s"] > 0).all()
