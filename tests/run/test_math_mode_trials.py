"""A trial's math mode end to end, with the fake adapter pretending a GPU (no GPU here): applied in the worker's
environment, read back, checked, stored beside the precision, and MFU divided by the peak of the arithmetic that ran."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness.config.trial import TrialSpec
from harness.errors import ConfigError
from harness.gpu_peaks import refuse_tf32_without_units
from harness.records import TrialOutcome, TrialUnit, WorkerMetrics
from harness.run.executor import LocalExecutor
from harness.run.protocol import SetupFacts
from harness.run.worker.trial import math_mode_env
from harness.store.schema import outcome_row
from tests.conftest import make_trial
from tests.fakes.adapter import FAKE_GPU_ENV, FAKE_MATH_ENV, FakeAdapter
from tests.helpers.cli import cli, write

TARGET = "tests.fakes.adapter:FakeAdapter"
H100 = "NVIDIA H100 80GB HBM3"


def _run(tiny_data: Any, tmp_path: Any, env: dict[str, str], **trial: Any) -> TrialOutcome:
    spec = make_trial(**{"epochs": 0, "batch_size": 8, **trial})
    unit = TrialUnit(trial=spec, data=tiny_data, order_path=str(tiny_data.write_order(spec.seed, spec.epochs)),
                     adapter_target=TARGET, oom_patterns=FakeAdapter.oom_stderr_patterns, env=env)
    return LocalExecutor(log_dir=tmp_path).run(unit)


@pytest.mark.process
@pytest.mark.parametrize("mode, override", [("ieee", "0"), ("tf32", None), ("framework-default", "1")])
def test_the_worker_applies_the_mode_records_what_was_read_back_and_mfu_uses_its_peak(tiny_data, tmp_path, mode,
                                                                                      override):
    # NVIDIA_TF32_OVERRIDE=1 in the user's shell: ieee sets 0 over it, tf32 removes it, framework-default keeps it
    env = {FAKE_GPU_ENV: H100, "NVIDIA_TF32_OVERRIDE": "1"}
    outcome = _run(tiny_data, tmp_path, env, device="gpu", math_mode=mode)
    assert outcome.status == "ok", outcome.reason
    assert outcome.device["tf32_override"] == override
    seen = "tf32" if mode == "framework-default" else mode  # the fake framework's default is TF32
    assert outcome.metrics is not None and outcome.metrics.math_mode_seen == seen
    row = outcome_row(outcome, 1, {})
    assert (row["math_mode"], row["math_mode_seen"], row["precision"]) == (mode, seen, "fp32")
    assert row["mfu_peak_tflops"] == {"ieee": 67.0, "tf32": 494.7}[seen]
    achieved = outcome.metrics.achieved_gflop_per_s
    assert achieved is not None and achieved > 0
    pct = achieved / (row["mfu_peak_tflops"] * 1e3) * 100
    if pct <= 100:  # the fake steps in microseconds: its FLOP/s can pass any card's peak, and then none is published
        assert row["mfu_pct"] == pytest.approx(pct) and "dense" in row["mfu_note"]
    else:
        assert row["mfu_pct"] is None and "impossible" in row["mfu_note"]


@pytest.mark.process
def test_a_mode_the_framework_did_not_apply_fails_the_trial(tiny_data, tmp_path):
    # a framework that ignores the switch (TF32 stays on): the trial is not stored as an ieee run
    outcome = _run(tiny_data, tmp_path, {FAKE_GPU_ENV: H100, FAKE_MATH_ENV: "tf32"}, device="gpu", math_mode="ieee")
    assert outcome.status == "error" and outcome.metrics is None
    assert "math_mode = 'ieee' was asked for" in outcome.reason and "reads back 'tf32'" in outcome.reason
    # on the CPU the math mode does not arise: recorded n/a, no MFU
    cpu = _run(tiny_data, tmp_path, {}, device="cpu", math_mode="ieee")
    assert cpu.status == "ok" and cpu.metrics is not None and cpu.metrics.math_mode_seen == "n/a"
    row = outcome_row(cpu, 1, {})
    assert row["math_mode_seen"] == "n/a" and row["mfu_pct"] is None and row["mfu_note"] is None


def test_the_worker_environment_and_where_it_ran():
    env = {"NVIDIA_TF32_OVERRIDE": "1"}
    math_mode_env("framework-default", env)
    assert env == {"NVIDIA_TF32_OVERRIDE": "1"}
    math_mode_env("ieee", env)
    assert env == {"NVIDIA_TF32_OVERRIDE": "0"}
    math_mode_env("tf32", env)
    assert env == {}
    assert SetupFacts(device="cpu", math_mode_seen="n/a").on_gpu is False
    assert SetupFacts(device="cuda:0", math_mode_seen="ieee").on_gpu is True
    assert SetupFacts(device="gpu(0)").on_gpu is True and SetupFacts(device="/CPU:0").on_gpu is False
    assert SetupFacts(device="x", gpu_name="Tesla T4").on_gpu is True
    # a plugin written before 0.9 returns the flat mapping, where the read-back was called math_mode
    old = SetupFacts.of({"device": "cuda:0", "math_mode": "tf32", "mode": "growth"})
    assert old.math_mode_seen == "tf32" and old.extra == {"mode": "growth"} and old.on_gpu is True
    assert SetupFacts.of(old) is old and SetupFacts.from_dict(old.to_dict()) == old


def test_the_math_mode_is_part_of_the_trial_identity_and_old_trials_keep_theirs():
    cpu = make_trial(device="cpu")
    assert cpu.math_mode == "ieee"
    # a CPU trial stored before math modes ran true float32: it hashes as ieee, and as before
    old = cpu.to_dict()
    del old["math_mode"]
    assert TrialSpec.from_dict(old) == cpu
    payload_hash = dataclasses.replace(cpu, math_mode="framework-default").trial_hash
    assert len({cpu.trial_hash, payload_hash, dataclasses.replace(cpu, math_mode="tf32").trial_hash}) == 3
    gpu = make_trial(device="gpu")
    assert len({gpu.trial_hash, dataclasses.replace(gpu, math_mode="framework-default").trial_hash}) == 2
    assert TrialSpec.from_dict(gpu.to_dict()).math_mode == "ieee"


def test_tf32_on_a_card_without_tf32_units_is_refused_before_anything_runs():
    v100 = [{"name": "Tesla V100-SXM2-16GB"}, {"name": "Tesla T4"}]
    with pytest.raises(ConfigError, match="has no TF32 tensor cores.*math_mode = 'ieee'"):
        refuse_tf32_without_units(["ieee", "tf32"], v100, "exp.toml")
    refuse_tf32_without_units(["ieee"], v100, "exp.toml")
    refuse_tf32_without_units(["tf32"], [{"name": H100}], "exp.toml")
    refuse_tf32_without_units(["tf32"], [{"name": "Some Future GPU"}], "exp.toml")  # unknown: the worker checks


def test_mfu_is_never_published_above_100_percent():
    trial = make_trial(device="gpu")
    for mode, achieved in (("tf32", 600_000.0), ("ieee", 67_000.1), ("ieee", 1e9)):
        outcome = TrialOutcome(trial=trial, status="ok", device={"gpu_name": H100},
                               metrics=WorkerMetrics(achieved_gflop_per_s=achieved, math_mode_seen=mode))
        row = outcome_row(outcome, 1, {})
        assert row["mfu_pct"] is None and "impossible" in row["mfu_note"], (mode, achieved)
    ok = TrialOutcome(trial=trial, status="ok", device={"gpu_name": H100},
                      metrics=WorkerMetrics(achieved_gflop_per_s=49_470.0, math_mode_seen="tf32"))
    assert outcome_row(ok, 1, {})["mfu_pct"] == pytest.approx(10.0)
    mixed = dataclasses.replace(ok, metrics=WorkerMetrics(achieved_gflop_per_s=100.0, math_mode_seen="conv-tf32"))
    assert outcome_row(mixed, 1, {})["mfu_pct"] is None and "different arithmetics" in outcome_row(mixed, 1, {})[
        "mfu_note"]


def test_the_cli_refuses_tf32_on_the_cpu_with_exit_2_and_writes_nothing(tmp_path):
    exp = write(tmp_path, 'name = "x"\nframeworks = ["pytorch"]\nbatch_sizes = [4]\ndevice = "cpu"\n')
    out = tmp_path / "out"
    r = cli("run", str(exp), "--out", str(out), "--math-mode", "tf32")
    assert r.returncode == 2, r.stderr
    assert "--math-mode: math_mode = 'tf32'" in r.stderr and "Traceback" not in r.stderr and not out.exists()
    r = cli("maxbatch", "--framework", "mxnet", "--model", "tiny_cnn", "--device", "gpu", "--math-mode", "tf32",
            "--out", str(out))
    assert r.returncode == 2 and "--math-mode 'tf32'" in r.stderr and "MXNet has no switch" in r.stderr, r.stderr
    assert not out.exists()


def test_resuming_a_store_from_before_math_modes_is_refused_only_where_the_arithmetic_changed():
    from harness.config.experiment import parse_experiment
    from harness.run.sweep import changed_settings

    for device, refused in (("cpu", False), ("gpu", True), ("auto", True)):
        now = parse_experiment({"name": "x", "frameworks": ["pytorch"], "batch_sizes": [4], "device": device}).to_dict()
        old = {k: v for k, v in now.items() if k != "math_mode"}
        assert bool(changed_settings(old, now)) is refused, device  # ieee on a GPU is not what such a store ran
        assert not changed_settings(old, {**now, "math_mode": "framework-default"}) or device == "cpu"
