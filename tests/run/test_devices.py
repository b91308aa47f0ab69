"""One device per comparison (issue 29, item 3): device = "auto" resolved per framework from its build, mixed
devices refused unless asked for (then never compared across), the resolved device in the identity, and --resume
running errors again. No GPU is needed: the builds and NVML's GPU list are faked."""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
from pathlib import Path
from typing import Any

import pytest

from adapters import builds
from adapters.jax import build as jax_build
from adapters.pytorch import build as pytorch_build
from adapters.tensorflow import build as tensorflow_build
from harness import registry
from harness.cells import summary_rows
from harness.cli import main
from harness.config.experiment import load_experiment
from harness.config.trial import OptimizerSpec, TrialSpec
from harness.envs.runtime import unchecked_runtime
from harness.errors import ConfigError
from harness.run import devices, sweep
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import Store
from report.answer.thesis import thesis_findings

GPU = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559.0, "driver": "580", "cuda_driver": "13.0"}


@pytest.fixture()
def fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU-only and the CUDA-build fake adapters, registered as plugins."""
    eps = dict(registry._entry_points())
    for name, cls in (("fake", "FakeAdapter"), ("fakegpu", "FakeGpuBuildAdapter"), ("fakecpu", "FakeCpuBuildAdapter")):
        module = "tests.fakes.adapter" if name == "fake" else "tests.fakes.device_adapters"
        eps[name] = md.EntryPoint(name=name, value=f"{module}:{cls}", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: eps)


@pytest.fixture()
def a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML lists one H100 (the sweep's environment capture)."""
    real = sweep.environment.capture

    def capture() -> dict[str, Any]:
        return {**real(), "gpus": [GPU], "gpu_name": GPU["name"], "gpu_note": ""}

    monkeypatch.setattr(sweep.environment, "capture", capture)


def _toml(path: Path, frameworks: list[str], **extra: object) -> Path:
    lines = ['name = "mixed"', f"frameworks = {frameworks!r}".replace("'", '"'), 'model = "tiny_cnn"',
             'dataset = "synthetic"', "synthetic_shape = [1, 8, 8]", "synthetic_samples = 64", "synthetic_classes = 3",
             "batch_sizes = [16]", "warmup_steps = 1", "timed_steps = 2", "timeout_s = 60", "eval_points = 0",
             "steady_s = 0"]
    lines = [ln for ln in lines if ln.split(" =")[0] not in extra]
    lines += [f"{k} = {v!r}".replace("'", '"').replace("True", "true") for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------- builds from metadata
def _fake_metadata(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str], requires: dict[str, list[str]]
                   ) -> None:
    def version(dist: str) -> str:
        if dist not in versions:
            raise md.PackageNotFoundError(dist)
        return versions[dist]

    monkeypatch.setattr(builds.md, "version", version)
    monkeypatch.setattr(builds.md, "requires", lambda dist: requires.get(dist))


@pytest.mark.parametrize(("versions", "requires", "gpu", "words"), [
    ({"torch": "2.11.0+cu130"}, {}, True, "CUDA 13.0"),
    ({"torch": "2.13.0+cpu"}, {}, False, "CPU only"),
    ({"torch": "2.9.0", "nvidia-cuda-runtime-cu12": "12.8.90"}, {"torch": ["nvidia-cuda-runtime-cu12==12.8.90"]},
     True, "CUDA 12.8"),
    ({"torch": "2.9.0"}, {"torch": ["filelock"]}, False, "CPU only"),
])
def test_torch_build_is_read_from_its_version_and_requirements(monkeypatch: pytest.MonkeyPatch,
                                                               versions: dict[str, str],
                                                               requires: dict[str, list[str]], gpu: bool,
                                                               words: str) -> None:
    _fake_metadata(monkeypatch, versions, requires)
    build = pytorch_build.gpu_build()
    assert build is not None and build.gpu is gpu and words in build.label


def test_jax_tensorflow_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_metadata(monkeypatch, {"jax": "0.7.1", "jaxlib": "0.7.1", "tensorflow-cpu": "2.21.0"}, {})
    assert jax_build.gpu_build() == builds.GpuBuild(False, jax_build.gpu_build().label)  # type: ignore[union-attr]
    tf = tensorflow_build.gpu_build()
    assert tf is not None and tf.gpu is False and "tensorflow-cpu 2.21.0" in tf.label
    _fake_metadata(monkeypatch, {"jax": "0.7.1", "jax-cuda12-plugin": "0.7.1", "tensorflow": "2.21.0",
                                 "nvidia-cudnn-cu12": "9.3", "nvidia-cuda-runtime-cu12": "12.5.82"}, {})
    jax, tf = jax_build.gpu_build(), tensorflow_build.gpu_build()
    assert jax is not None and jax.gpu is True and "jax-cuda12-plugin" in jax.label
    if tf is not None and "Linux only" not in tf.label:
        assert tf.gpu is True and "CUDA 12.5" in tf.label
    _fake_metadata(monkeypatch, {"tensorflow": "2.21.0"}, {})
    bare = tensorflow_build.gpu_build()
    assert bare is not None and bare.gpu is not True  # no [and-cuda] libraries: not known to reach the GPU


@pytest.mark.process
def test_this_machines_builds_are_read_without_importing_a_framework() -> None:
    import subprocess
    import sys

    from tests import ROOT

    code = ("import sys\nfrom harness.registry import adapter_class, list_adapters\n"
            "for a in list_adapters():\n    if a.installed and not a.problem: print(a.name, adapter_class(a.name)"
            ".gpu_build())\nprint(sorted({'torch', 'tensorflow', 'mxnet', 'jax'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"  # no framework imported to read its build


# ---------------------------------------------------------------- resolution
def test_auto_resolves_per_framework(fakes: None) -> None:  # fakes run in this interpreter: builds read here
    assert devices.resolve(unchecked_runtime("fakecpu"), "auto", gpu_present=True).device == "cpu"
    assert devices.resolve(unchecked_runtime("fakegpu"), "auto", gpu_present=True).device == "gpu"
    assert devices.resolve(unchecked_runtime("fakegpu"), "auto", gpu_present=False).device == "cpu"
    # unknown build: assumed, said so
    assert devices.resolve(unchecked_runtime("fake"), "auto", gpu_present=True).device == "gpu"
    assert "assumed" in devices.resolve(unchecked_runtime("fake"), "auto", gpu_present=True).why
    assert devices.resolve(unchecked_runtime("fakegpu"), "cpu", gpu_present=True).device == "cpu"
    line = devices.resolve(unchecked_runtime("fakecpu"), "auto", gpu_present=True).line()
    assert line.startswith("fakecpu on the CPU: CPU only (fakecpu-cpu 1.0 is installed), beside a GPU it cannot")
    with pytest.raises(ConfigError, match="CPU only"):
        devices.resolve(unchecked_runtime("fakecpu"), "gpu", gpu_present=True)


def _spec(**kw: Any) -> TrialSpec:
    base: dict[str, Any] = {"experiment": "e", "framework": "fake", "model": "m", "dataset": "d", "batch_size": 8,
                            "repeat": 0, "seed": 0, "epochs": 0, "warmup_steps": 1, "timed_steps": 2,
                            "optimizer": OptimizerSpec(), "device": "auto", "threads": 0, "timeout_s": 60}
    return TrialSpec(**(base | kw))


def test_the_resolved_device_is_part_of_the_identity_and_cpu_hashes_stay() -> None:
    old = _spec()
    assert _spec(device_resolved="cpu").trial_hash == old.trial_hash  # stores made before it keep their trials
    assert _spec(device_resolved="gpu").trial_hash != old.trial_hash  # GPU builds installed: a new trial
    assert _spec(device="gpu", device_resolved="gpu").trial_hash == _spec(device="gpu").trial_hash
    assert _spec(device_resolved="cpu").run_device == "cpu" and _spec(device_resolved="gpu").run_device == "gpu"
    assert _spec(device="cpu", device_resolved="gpu").run_device == "cpu" and old.run_device == "auto"
    assert TrialSpec.from_dict(_spec(device_resolved="gpu").to_dict()).run_device == "gpu"


# ---------------------------------------------------------------- mixed devices
def test_a_mixed_device_run_is_refused_with_the_fix_and_nothing_written(fakes: None, a_gpu: None, tmp_path: Path,
                                                                          cache_dir: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    toml = _toml(tmp_path / "mixed.toml", ["fakegpu", "fakecpu"])
    assert main(["run", str(toml), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr()
    assert "different devices (cpu: fakecpu; gpu: fakegpu)" in err.err
    assert "--allow-mixed-devices" in err.err and "--frameworks" in err.err
    assert "device fakecpu on the CPU: CPU only (fakecpu-cpu 1.0 is installed)" in err.out
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_an_allowed_mixed_run_groups_by_device_and_never_compares_across(fakes: None, a_gpu: None,
                                                                           tmp_path: Path, cache_dir: Path) -> None:
    exp = load_experiment(_toml(tmp_path / "mixed.toml", ["fakegpu", "fakecpu"], allow_mixed_devices=True))
    run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    with Store.open(tmp_path / "out", create=False) as store:
        rows = store.trials()
    assert {r["framework"]: r["run_device"] for r in rows} == {"fakegpu": "gpu", "fakecpu": "cpu"}
    cpu_row = next(r for r in rows if r["framework"] == "fakecpu")
    assert cpu_row["gpu_util_pct"] is None and cpu_row["power_w"] is None and cpu_row["j_per_sample"] is None
    assert {r["framework"] for r in summary_rows(rows)} == {"fakegpu [gpu]", "fakecpu [cpu]"}
    findings = thesis_findings(rows)
    assert {f["finding"][:5] for f in findings} == {"[cpu]", "[gpu]"}


@pytest.mark.process
def test_one_device_for_all_is_not_mixed(fakes: None, a_gpu: None, tmp_path: Path, cache_dir: Path) -> None:
    exp = load_experiment(_toml(tmp_path / "cpu.toml", ["fakegpu", "fakecpu"], device="cpu"))
    run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    with Store.open(tmp_path / "out", create=False) as store:
        rows = store.trials()
    assert {r["run_device"] for r in rows} == {"cpu"}
    assert {r["framework"] for r in summary_rows(rows)} == {"fakegpu", "fakecpu"}  # no device label: one device


# ---------------------------------------------------------------- --resume
@pytest.mark.process
def test_resume_reruns_errors_and_trials_resolved_to_another_device(fakes: None, tmp_path: Path, cache_dir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    exp = load_experiment(_toml(tmp_path / "one.toml", ["fakegpu"], batch_sizes=[16, 32]))
    run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir))  # no GPU here: resolved to the CPU
    with Store.open(tmp_path / "out", create=False) as store:
        cpu_hashes = {r["trial_hash"] for r in store.trials()}
        store.conn.execute("UPDATE trials SET status = 'error' WHERE batch_size = 16")
        store.conn.execute("UPDATE trials SET status = 'oom' WHERE batch_size = 32")
        store.conn.commit()
    again = run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir, resume=True))
    assert [o.trial.batch_size for o in again.outcomes] == [16] and again.already_done == 1  # oom kept
    real = sweep.environment.capture
    monkeypatch.setattr(sweep.environment, "capture", lambda: {**real(), "gpus": [GPU]})  # GPU builds installed
    with pytest.warns(Warning, match="another device"):
        moved = run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir, resume=True))
    assert sorted(o.trial.batch_size for o in moved.outcomes) == [16, 32]
    with Store.open(tmp_path / "out", create=False) as store:
        rows = store.trials()
    assert {r["run_device"] for r in rows} == {"gpu"} and len(rows) == 2
    assert not cpu_hashes & {r["trial_hash"] for r in rows}


def test_superseded_names_only_the_other_devices_hash() -> None:
    gpu = _spec(device_resolved="gpu")
    cpu_hash = dataclasses.replace(gpu, device_resolved="cpu").trial_hash
    assert sweep.superseded([gpu], {cpu_hash, "x"}) == {cpu_hash}
    assert sweep.superseded([_spec(device="cpu")], {cpu_hash}) == set()


# ---------------------------------------------------------------- doctor (issue 29, item 4)
@pytest.mark.process
def test_doctor_names_each_build_and_the_frameworks_that_cannot_use_a_present_gpu(
        fakes: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import doctor

    real = doctor.environment.capture
    monkeypatch.setattr(doctor.environment, "capture", lambda: {**real(), "gpus": [GPU], "gpu_note": "1 GPU(s):"})
    monkeypatch.setattr(doctor, "pin_problems", list)
    assert doctor.run_doctor() == 0
    out = capsys.readouterr().out
    block = {name: out.split(f"  {name} ")[1].split("\n  ")[0:3] for name in ("fakecpu", "fakegpu")}
    assert "build: CPU only (fakecpu-cpu 1.0 is installed)" in " ".join(block["fakecpu"])
    assert "a GPU is present, but this fakecpu build cannot use it" in out
    assert "build: CUDA 13.0" in " ".join(block["fakegpu"]) and "this fakegpu build" not in out
    monkeypatch.setattr(doctor.environment, "capture", lambda: {**real(), "gpus": []})
    doctor.run_doctor()
    assert "cannot use it" not in capsys.readouterr().out  # no GPU: nothing to say


@pytest.mark.slow  # reads the managed environments `make test` builds first (make test-fast builds none)
def test_doctor_names_each_environment_and_build_and_says_cpu_only_for_those_without_a_gpu(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The "done when" of issues 29 and 38: each built-in framework's environment (managed, built, its lock and
    versions) and build named, "CPU only" for each on this CPU machine, read in its environment without importing it."""
    from harness.cli import doctor
    from tests.helpers.envs import python_for

    for name in ("pytorch", "tensorflow", "jax", "mxnet"):
        python_for(name)  # built (make test built it already)
    doctor.run_doctor()
    out = capsys.readouterr().out
    for name in ("pytorch", "tensorflow", "jax", "mxnet"):
        block = out.split(f"\n  {name:<11} ")[1].split(f"\n  {'':<11} build: ")
        assert block[0].startswith(f"managed {name}-cpu@") and "built: " in block[0], out
        assert block[1].startswith("CPU only"), out
    assert "mxnet 1.9.1, numpy 1.26.4" in out and "torch 2.13.0+cpu, numpy 2.4.6" in out


# ---------------------------------------------------------------- GPU tests that hold on real GPUs (item 7)
def test_gpu_tests_skip_with_the_reason_where_the_framework_or_its_gpu_build_is_missing(
        fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.conftest as shared

    monkeypatch.setattr(shared, "_gpu_reason", lambda: None)  # as on a machine with a GPU
    cpu_only = shared.gpu_build_reason("fakecpu")
    assert cpu_only is not None and "the installed fakecpu is CPU only (fakecpu-cpu 1.0 is installed)" in cpu_only
    assert shared.gpu_build_reason("fakegpu") is None
    monkeypatch.setattr(registry.adapter_class("fakegpu"), "import_name", "no_such_framework_here")
    missing = shared.gpu_build_reason("fakegpu")
    assert missing is not None and "fakegpu is not installed" in missing
    with pytest.raises(pytest.skip.Exception, match="CPU only"):
        shared.skip_unless_gpu_build("fakecpu")
    monkeypatch.setattr(shared, "_gpu_reason", lambda: "no NVIDIA GPU on this machine (NVML sees 0 devices)")
    assert "NVML sees 0 devices" in (shared.gpu_build_reason("fakegpu") or "")
