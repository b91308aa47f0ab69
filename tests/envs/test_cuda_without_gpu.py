"""Issue 50, item 3: ``BATCHSCOPE_ENV_KIND=cuda`` (``make quick GPU=1``) where NVML sees no GPU is refused before any
download: exit 2, saying so, with what it would fetch and how to build the environments deliberately. NVML is faked
(no GPU here or anywhere), and the build is replaced by one that fails the test if anything reaches it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.envs import build as build_mod
from harness.envs.build import FACTS_FILE, EnvironmentBuildError, python_in
from harness.envs.guard import cuda_downloads, deliberate, managed_kind
from harness.envs.resolve import managed_spec
from harness.envs.sizes import download_size, read_sizes
from harness.envs.spec import KIND_VAR, requirement_lines, requirement_name, spec_for
from harness.errors import ConfigError
from harness.monitor import environment
from harness.registry import adapter_class
from tests.envs.test_faults import _toml

CUDA_FRAMEWORKS = ("pytorch", "tensorflow", "jax")  # MXNet has no CUDA lock: its CPU one is used


@pytest.fixture()
def no_gpu(monkeypatch: pytest.MonkeyPatch, envs_dir: Path) -> list[Any]:
    """NVML sees no GPU, BATCHSCOPE_ENV_KIND=cuda, environments in this test's folder; every build attempted is
    recorded in the returned list and fails at once (nothing is installed)."""
    monkeypatch.setattr(environment, "gpus", lambda: ([], "no GPU: running on CPU (faked by the test)"))
    monkeypatch.setenv(KIND_VAR, "cuda")
    builds: list[Any] = []

    def no_install(tmp: Path, spec: Any, *args: object) -> dict[str, object]:
        builds.append(spec)
        raise EnvironmentBuildError(f"{spec.label}: the test stopped this build before pip")

    monkeypatch.setattr(build_mod, "_build_into", no_install)
    return builds


def test_run_is_refused_before_any_download(no_gpu: list[Any], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["run", str(_toml(tmp_path / "e.toml", ["pytorch", "mxnet"])), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert "BATCHSCOPE_ENV_KIND=cuda" in err and "NVML sees no GPU" in err and "Nothing was downloaded" in err
    assert "would download about" in err and " GB " in err and deliberate(["pytorch"]) in err
    assert "mxnet" not in err.split("would download")[0]  # MXNet builds its CPU lock: no CUDA download to refuse
    assert no_gpu == [] and not out.exists()  # no build started, nothing written


def test_maxbatch_and_env_build_are_refused_too(no_gpu: list[Any], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["maxbatch", "--framework", "jax", "--model", "tiny_cnn", "--device", "cpu", "--memory-limit-mib",
                 "600", "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and deliberate(["jax"]) in err, err
    assert main(["env", "build", "tensorflow"]) == 2
    assert deliberate(["tensorflow"]) in capsys.readouterr().err
    assert no_gpu == [] and not (tmp_path / "out").exists()


def test_env_build_kind_cuda_builds_deliberately(no_gpu: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    """The override goes on to the build (stopped here by the test, before pip): the CUDA lock's environment."""
    assert main(["env", "build", "pytorch", "--kind", "cuda"]) == 1  # the stand-in build failed, as it must
    assert [(s.framework, s.kind, Path(s.source).name) for s in no_gpu] == [("pytorch", "cuda", "cuda.txt")]
    assert "the test stopped this build before pip" in capsys.readouterr().out


def test_a_cuda_environment_already_built_downloads_nothing_and_is_not_refused(no_gpu: list[Any],
                                                                               envs_dir: Path) -> None:
    spec = managed_spec("pytorch", "cuda")
    assert spec is not None
    built = spec.path(envs_dir)
    python_in(built).parent.mkdir(parents=True)
    python_in(built).write_text("")
    (built / FACTS_FILE).write_text(json.dumps({"requirements": list(spec.requirements)}))
    assert cuda_downloads(["pytorch"]) == {}
    assert managed_kind(["pytorch", "mxnet"], gpu_present=False) == "cuda"
    with pytest.raises(ConfigError, match="building jax would download"):
        managed_kind(["pytorch", "jax"], gpu_present=False)


def test_the_kind_is_unchanged_where_a_gpu_is_seen_or_cpu_is_asked(no_gpu: list[Any],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert managed_kind(CUDA_FRAMEWORKS, gpu_present=True) == "cuda"
    monkeypatch.setenv(KIND_VAR, "cpu")
    assert managed_kind(CUDA_FRAMEWORKS, gpu_present=False) == "cpu"
    monkeypatch.delenv(KIND_VAR)
    assert managed_kind(CUDA_FRAMEWORKS, gpu_present=False) == "cpu"


@pytest.mark.parametrize("framework", CUDA_FRAMEWORKS)
def test_every_pin_of_a_cuda_lock_has_a_recorded_size(framework: str) -> None:
    """A lock regenerated without its size table (``python -m harness.envs.sizes``) is caught here."""
    spec = spec_for(framework, adapter_class(framework), "cuda")
    assert spec is not None and spec.kind == "cuda"
    lock = Path(spec.source)
    size = download_size(requirement_lines(lock.read_text()), lock)
    assert size.unknown == () and size.pins == len(read_sizes(lock)), size
    assert size.known_bytes > 1e9  # CUDA wheels: gigabytes (what the refusal is for)


def test_a_pin_is_read_whatever_follows_it() -> None:
    """A lock with hashes (pip's ``--require-hashes`` format) still names its pins, for the sizes and the check."""
    assert requirement_name("Torch==2.14.1 \\") == ("torch", "2.14.1")
    assert requirement_name("typing_extensions==4.16.0 --hash=sha256:abc") == ("typing-extensions", "4.16.0")
    assert requirement_name("jax[cuda12]==0.10.2; python_version >= '3.10'") == ("jax", "0.10.2")
    assert requirement_name("numpy>=2") == ("numpy", "")
    assert requirement_name("    --hash=sha256:abc") is None and requirement_name("") is None
