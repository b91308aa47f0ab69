"""benchmarks/gpu_check.py on a machine without a GPU: it says so and exits 0, writing nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import ROOT
from tests.conftest import _gpu_reason

sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check


@pytest.mark.process
@pytest.mark.skipif(_gpu_reason() is None, reason="this machine has a GPU: the no-GPU path cannot be seen")
def test_without_a_gpu_it_says_so_exits_0_and_writes_no_summary(tmp_path):
    out = tmp_path / "summary.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "no GPU here" in done.stdout and "nothing to check" in done.stdout
    assert not out.exists()


@pytest.mark.process
def test_gpu_names_reads_nvidia_smi_and_is_empty_when_it_fails(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)'\n")
    fake.chmod(0o755)
    assert gpu_check.gpu_names(str(fake)) == ["NVIDIA H100 80GB HBM3"]
    broken = tmp_path / "broken-smi"
    broken.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    broken.chmod(0o755)
    assert gpu_check.gpu_names(str(broken)) == []
    assert gpu_check.gpu_names(str(tmp_path / "absent")) == []


def test_the_readings_step_checks_the_window_rule_and_the_steady_phase(monkeypatch, capsys):
    """benchmarks/readings_check.py (gpu_check's readings step): its checks pass on this code, and fail on a trial
    whose short timed phase published figures anyway or ran no steady phase (fake trials: no GPU needed)."""
    import readings_check

    failed: list[str] = []
    readings_check.rule_on_made_up_samples(failed)
    assert failed == []
    good = {"gpu_util_pct": None, "energy_j": None, "readings_note": "timed phase: 4 ms with 0 sample(s) ...",
            "steady_gpu_util_pct": 97.0, "steady_energy_j": 500.0}
    monkeypatch.setattr(readings_check, "short_trial", lambda device, work: ("ok", good, {"steady": 100}))
    readings_check.rule_on_a_trial(True, failed)
    assert failed == []
    bad = good | {"gpu_util_pct": 0.0, "readings_note": None}  # what the issue saw: 0 % published from 48 ms
    monkeypatch.setattr(readings_check, "short_trial", lambda device, work: ("ok", bad, {}))
    readings_check.rule_on_a_trial(True, failed)
    assert failed == ["short timed phase: no utilisation, power or energy, and why", "steady phase measured"]
    assert "[FAILED]" in capsys.readouterr().out


def test_the_device_step_refuses_mixed_devices_and_fails_when_a_resolution_is_wrong(monkeypatch, capsys):
    """benchmarks/devices_check.py (gpu_check's device step) on made-up resolutions: a mix is refused with the fix,
    one device is not, and a framework resolved against its build fails the check (no GPU needed)."""
    import devices_check

    from harness.run.devices import ResolvedDevice

    failed: list[str] = []
    mixed = {"pytorch": ResolvedDevice("pytorch", "gpu", "CUDA 13.0"),
             "tensorflow": ResolvedDevice("tensorflow", "cpu", "CPU only (tensorflow-cpu)")}
    assert devices_check.one_device_rule(mixed, failed) is True and failed == []
    assert "[ok] mixed devices refused with the fix" in capsys.readouterr().out
    assert devices_check.one_device_rule({"pytorch": mixed["pytorch"]}, failed) is False and failed == []
    monkeypatch.setattr(devices_check, "build_of", lambda fw: (False, "CPU only"))
    monkeypatch.setattr(devices_check, "resolve", lambda fw, req, gpu: ResolvedDevice(fw, "gpu", "wrong"))
    devices_check.resolution(["tensorflow"], True, failed)
    assert failed == ["tensorflow resolves to its build's device"]


def test_the_e2e_step_judges_each_trial_against_the_goal_only_on_a_gpu():
    """Step 5 (issue 40): end-to-end / step per PyTorch and JAX trial, >= 0.9 on a GPU; a CPU dry run is not judged,
    and a trial that did not end ok, or a framework missing, fails either way (made-up rows: no GPU needed)."""
    rows = [("jax", 256, 1000.0, 950.0, "ok", 1), ("jax", 1024, 1000.0, 850.0, "ok", 1),
            ("pytorch", 256, 2000.0, 1900.0, "ok", 1), ("pytorch", 1024, 2000.0, 1990.0, "ok", 1)]
    ok, table = gpu_check.e2e_verdict(rows, judged=True)
    assert not ok and len(table) == 2 + 4
    assert "| jax | 1024 | 1000.0 | 850.0 | 0.850 | True | FAILED: below 0.9 |" in table
    assert "| pytorch | 256 | 2000.0 | 1900.0 | 0.950 | True | holds (>= 0.9) |" in table
    assert gpu_check.e2e_verdict(rows, judged=False)[0]  # the dry run prints the ratios, judges none
    assert not gpu_check.e2e_verdict(rows[:2] + [("jax", 64, None, None, "oom", None)], judged=False)[0]
    assert not gpu_check.e2e_verdict([r for r in rows if r[0] == "jax"], judged=False)[0]  # PyTorch missing
    assert '"gpu"' in gpu_check.e2e_toml(dry=False) and "[256, 1024]" in gpu_check.e2e_toml(dry=False)


@pytest.mark.slow
@pytest.mark.heavy("benchmarks/gpu_check.py", "benchmarks/common.py")  # the GPU check's dry run
def test_the_e2e_dry_run_runs_pytorch_and_jax_on_the_cpu_and_passes(tmp_path):
    """``gpu_check.py --dry-run --only e2e``: step 5's sweep on the CPU (short), its table written, exit 0."""
    out = tmp_path / "summary.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--only", "e2e",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    for fw in ("pytorch", "jax"):
        for batch in (16, 32):
            assert f"| {fw} | {batch} |" in text
    assert text.count("not judged (CPU dry run)") == 4 and "FAILED" not in text



def test_the_estimate_step_compares_strategies_on_a_gpu_and_runs_the_cpu_path_dry(capsys):
    # issue 41's GPU comparison: PyTorch and JAX, deep_cnn, an emulated 6 GiB card, the three strategies; dry, the CPU
    # path with one model and one strategy (so that the step's command has run before a GPU machine runs it)
    import maxbatch_strategies

    gpu = gpu_check.estimate_cmd(dry=False)
    assert gpu[1] == "benchmarks/maxbatch_strategies.py" and gpu[gpu.index("--device") + 1] == "gpu"
    assert gpu[gpu.index("--budget-mib") + 1] == "6144" and gpu[gpu.index("--models") + 1] == "deep_cnn"
    assert gpu[gpu.index("--frameworks") + 1] == "pytorch,jax"
    assert gpu[gpu.index("--strategies") + 1] == "model,fitted,double-bisect"
    dry = gpu_check.estimate_cmd(dry=True)
    assert dry[dry.index("--device") + 1] == "cpu" and dry[dry.index("--strategies") + 1] == "model"
    with pytest.raises(SystemExit) as refused:  # every option the step passes is one the script knows: only a
        maxbatch_strategies.main([*gpu[2:], "--no-such-option"])  # wrong one is refused, before anything runs
    assert refused.value.code == 2 and "--no-such-option" in capsys.readouterr().err
