"""The answer must hold in the user's own training (issue 18): margin from measured variation, the settings the
probes ran with, the confirm length recorded, and --verify.

The search runs against a stand-in executor (tests/fakes/memory_executor.py: peak = 100 + 10·batch MiB, plus a
chosen growth per step), so every number is exact; the real-framework check is the slow test at the end.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.data import DataRequest, prepare
from harness.maxbatch.advice import CPU_PEAK_JITTER_MIB, Margin, answer_env, train_advice
from harness.maxbatch.request import CONFIRM_STEPS, MaxBatchRequest
from harness.run.executor import CPU_ALLOCATOR_ENV
from harness.store import Store
from tests.fakes.memory_executor import BUDGET_MIB


def _maxbatch(out: Path, *extra: str) -> int:
    return main(["maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--device", "cpu",
                 "--memory-limit-mib", f"{BUDGET_MIB:g}", "--threads", "1", "--out", str(out), *extra])


def _row(out: Path) -> dict[str, Any]:
    with Store.open(out, create=False) as store:
        (row,) = store.maxbatch_results()
    return row


def test_margin_is_made_of_what_varied():
    probes = [
        {"batch": 16, "status": "ok", "peak_mib": 260.0, "confirm": False},
        {"batch": 16, "status": "ok", "peak_mib": 264.5, "confirm": False},  # the same size, 4.5 MiB apart
        {"batch": 28, "status": "ok", "peak_mib": 380.0, "confirm": False},
        {"batch": 28, "status": "ok", "peak_mib": 383.0, "confirm": True},  # the longer run needed 3 MiB more
        {"batch": 29, "status": "oom", "peak_mib": None, "confirm": False},
    ]
    cpu = Margin.measure(probes, 28, "cpu-rlimit-data", user_mib=10.0)
    assert (cpu.jitter_mib, cpu.growth_mib, cpu.total_mib) == (4.5, 3.0, 17.5)
    # the spread seen here is below the run-to-run jitter measured over 72 workers: that one counts on CPU
    quiet = Margin.measure(probes[2:], 28, "cpu-rlimit-data", user_mib=0.0)
    assert quiet.jitter_mib == CPU_PEAK_JITTER_MIB and quiet.growth_mib == 3.0
    # on a GPU only what this search saw (nothing was measured run to run there)
    gpu = Margin.measure(probes[2:], 28, "gpu-card", user_mib=0.0)
    assert (gpu.jitter_mib, gpu.growth_mib) == (0.0, 3.0)
    assert Margin.measure([], 28, "gpu-card", 0.0).total_mib == 0.0


def test_answer_env_is_the_allocator_settings_the_probes_saw():
    parent = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "HOME": "/root", "MALLOC_MMAP_THRESHOLD_": "1"}
    env = answer_env(dict(CPU_ALLOCATOR_ENV), parent)
    # the probe's own setting wins over the parent's (as in the executor), unrelated variables are left out
    assert env == {"MALLOC_MMAP_THRESHOLD_": "131072", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert answer_env({}, {"HOME": "/root"}) == {}


def test_the_recommendation_leaves_the_measured_margin_and_says_how_to_train(fake_executor, tmp_path, capsys,
                                                                             monkeypatch):
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # a setting the user had: it shaped the answer too
    made = fake_executor(growth_mib_per_step=0.25)  # 2 timed steps: +0.5 MiB; the 8-step confirm run: +2 MiB
    assert _maxbatch(tmp_path / "out") == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    row = _row(tmp_path / "out")
    assert row["max_batch"] == 28 and row["confirm_steps"] == CONFIRM_STEPS
    growth = 0.25 * (CONFIRM_STEPS - 2)
    assert row["margin_growth_mib"] == pytest.approx(growth)
    assert row["margin_jitter_mib"] == CPU_PEAK_JITTER_MIB
    assert row["margin_total_mib"] == pytest.approx(CPU_PEAK_JITTER_MIB + growth)
    # 4.5 MiB at the measured 10 MiB per sample: one sample below the boundary
    assert row["recommended_batch"] == 28 - math.ceil((CPU_PEAK_JITTER_MIB + growth) / 10.0) == 27
    train_env = json.loads(row["train_env_json"])
    assert train_env == {**CPU_ALLOCATOR_ENV, "TF_ENABLE_ONEDNN_OPTS": "0"}
    # every probe ran with the setting the answer is printed with
    assert all(u.env.get("MALLOC_MMAP_THRESHOLD_") == "131072" for u in made[0].units)
    assert "the probes ran with: MALLOC_MMAP_THRESHOLD_=131072 TF_ENABLE_ONEDNN_OPTS=0" in out
    assert "recommended leaving 4.5 MiB unused at the boundary" in out and ": 27  (power of two: 16" in out
    assert f"confirm run: {CONFIRM_STEPS} steps + eval at 28" in out
    advice = train_advice(row)
    assert advice is not None and "recommended 27 leaves 4.5 MiB" in advice and "MALLOC_MMAP_THRESHOLD_" in advice


def test_verify_trains_the_recommendation_in_a_fresh_worker_with_the_printed_settings(fake_executor, tmp_path,
                                                                                      capsys):
    made = fake_executor()
    assert _maxbatch(tmp_path / "out", "--verify", "--verify-steps", "20") == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    row = _row(tmp_path / "out")
    verify = made[0].units[-1]
    assert verify.trial.purpose == "verify" and verify.trial.batch_size == row["recommended_batch"] == 27
    assert verify.trial.timed_steps == 20 and verify.trial.eval
    assert verify.os_memory_limit_mib == BUDGET_MIB and verify.env == CPU_ALLOCATOR_ENV
    assert (row["verify_status"], row["verify_steps"], row["verify_reason"]) == ("pass", 20, "")
    assert "verify: 27 trained 20 steps + eval in a fresh worker under the same budget and settings: PASS" in out
    with Store.open(tmp_path / "out", create=False) as store:
        assert [t["batch_size"] for t in store.trials("purpose = 'verify'")] == [27]


def test_a_failed_verification_exits_1_and_says_why(fake_executor, tmp_path, capsys):
    fake_executor(failing_purpose="verify")
    assert _maxbatch(tmp_path / "out", "--verify") == 1
    out = capsys.readouterr().out
    row = _row(tmp_path / "out")
    assert row["verify_status"] == "fail" and row["verify_steps"] == CONFIRM_STEPS  # default: the confirm length
    assert "FAIL: oom: RuntimeError: can't allocate memory" in out


def test_verify_steps_without_verify_is_refused(tmp_path, capsys):
    assert _maxbatch(tmp_path / "out", "--verify-steps", "5") == 2
    assert "--verify-steps applies only with --verify" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_sweep_workers_on_cpu_run_with_the_probes_allocator_setting(tmp_path):
    from harness.config.experiment import parse_experiment
    from harness.run.sweep import unit_for, worker_env
    from tests.conftest import make_trial

    exp = parse_experiment({"name": "e", "frameworks": ["pytorch"], "batch_sizes": [8], "device": "cpu"})
    data = prepare(DataRequest(name="synthetic", synthetic_shape=(1, 8, 8), synthetic_samples=64), tmp_path)
    cpu, auto, gpu = (make_trial("pytorch", device=d) for d in ("cpu", "auto", "gpu"))
    assert worker_env(cpu, {"gpus": [{"index": 0}]}) == CPU_ALLOCATOR_ENV
    assert worker_env(auto, {"gpus": []}) == CPU_ALLOCATOR_ENV  # auto with no GPU trains on CPU
    assert worker_env(auto, {"gpus": [{"index": 0}]}) == {} and worker_env(gpu, {}) == {}
    assert unit_for(exp, cpu, data, env=worker_env(cpu, {})).env == CPU_ALLOCATOR_ENV
    assert MaxBatchRequest("pytorch", "tiny_cnn").confirm_steps == CONFIRM_STEPS


@pytest.mark.slow
@pytest.mark.alone  # a peak under an OS memory limit, against a margin of a few MiB
@pytest.mark.xdist_group("real_search")
def test_verify_passes_on_a_real_pytorch_worker(real_search):
    # the real boundary, and the recommendation trained for the confirm length in a fresh worker under the same
    # budget and the printed settings (tiny_cnn 3x64x64: ~0.5 MiB per sample, so the margin is a few samples)
    assert real_search.code == 0, real_search.printed
    row = real_search.row
    assert row["verify_status"] == "pass" and 0 < row["recommended_batch"] < row["max_batch"], row
    assert row["margin_total_mib"] >= CPU_PEAK_JITTER_MIB
    assert "MALLOC_MMAP_THRESHOLD_=131072" in real_search.printed and ": PASS" in real_search.printed


def test_no_settings_are_said_as_such(capsys):
    from harness.cli.maxbatch import print_recommendation

    row = {"margin_total_mib": 0.0, "margin_mib": 0.0, "recommended_batch": 300, "recommended_pow2": 256,
           "recommended_mult8": 296, "train_env_json": "{}", "max_batch": 300}
    print_recommendation(row, None)
    out = capsys.readouterr().out
    assert "the probes ran with no allocator settings" in out and "train with them" not in out
