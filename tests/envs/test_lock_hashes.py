"""Issue 50, item 7: locks pin content, not only versions. Every line of every lock carries the sha256 of the files
pip may install for it, the builder installs a lock with ``--require-hashes`` (pip and uv alike), and a file whose
hash the lock does not list is refused."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.envs import build as build_mod
from harness.envs.build import EnvironmentBuildError, build, install_command, uv_flags
from harness.envs.locking import Pin, lock_text, target_tags
from harness.envs.resolve import WORKER_PACKAGES, _code_dir
from harness.envs.spec import EnvSpec, hashes_of, pin_of, requirement_lines, spec_for
from harness.registry import adapter_class
from tests import ROOT
from tests.fakes.env_adapters import NumpyEnvAdapter

LOCKS = sorted((ROOT / "adapters").glob("*/locks/*.txt"))
SHA256 = re.compile(r"[0-9a-f]{64}")


def test_every_framework_has_its_locks() -> None:
    assert [f"{p.parent.parent.name}/{p.name}" for p in LOCKS] == [
        "jax/cpu.txt", "jax/cuda.txt", "mxnet/cpu.txt", "pytorch/cpu.txt", "pytorch/cuda.txt", "tensorflow/cpu.txt",
        "tensorflow/cuda.txt"]


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: f"{p.parent.parent.name}-{p.stem}")
def test_every_line_of_a_lock_is_an_exact_pin_with_its_hashes(lock: Path) -> None:
    lines = requirement_lines(lock.read_text())
    assert len(lines) >= 5  # the framework, numpy and what they need
    names = []
    for line in lines:
        name, version = pin_of(line)  # raises where a line is not name==version
        names.append(name)
        digests = hashes_of(line)
        assert digests, f"{lock}: {name}=={version} carries no --hash"
        assert all(SHA256.fullmatch(d) for d in digests), line
        assert len(set(digests)) == len(digests), line
        # nothing but the pin and its hashes: an option or a marker there would change what is installed
        assert line.split() == [f"{line.split()[0]}", *(f"--hash=sha256:{d}" for d in digests)], line
    assert names == sorted(names) and len(set(names)) == len(names)
    assert "numpy" in names


def test_the_cpu_torch_lock_holds_this_machines_cpu_wheel_alone() -> None:
    """The machine's pip configuration serves torch 2.13.0+cpu (a local wheel): pinned with its label and its hash
    alone. PyPI's 2.13.0 is another build (CUDA's, which fails to import without its CUDA libraries): with its hash
    beside, pip took it even here (it prefers a file whose index-given hash matches); without the label, uv found no
    hash for the 2.13.0+cpu it resolved."""
    torch = [line for line in requirement_lines((ROOT / "adapters/pytorch/locks/cpu.txt").read_text())
             if pin_of(line)[0] == "torch"]
    assert len(torch) == 1 and pin_of(torch[0]) == ("torch", "2.13.0+cpu") and len(hashes_of(torch[0])) == 1
    local = sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))
    if local:  # this project's machines: the very file pip's configuration serves
        import hashlib

        assert hashes_of(torch[0]) == (hashlib.sha256(local[0].read_bytes()).hexdigest(),)


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "jax", "mxnet"])
@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_a_framework_environment_comes_from_a_hashed_lock(framework: str, kind: str) -> None:
    spec = spec_for(framework, adapter_class(framework), kind)
    assert spec is not None and spec.locked and spec.source.endswith(".txt")
    assert all(hashes_of(r) for r in spec.requirements)


def test_a_plugins_requirements_are_not_a_lock() -> None:
    """A plugin's specifiers are resolved at build time: no hashes, so no --require-hashes."""
    spec = spec_for(NumpyEnvAdapter.name, NumpyEnvAdapter, "cpu")
    assert spec is not None and not spec.locked


def test_the_hashes_name_the_environment() -> None:
    """Another file for the same pin (a hash changed) is another environment, built beside the old one."""
    spec = spec_for("mxnet", adapter_class("mxnet"), "cpu")
    assert spec is not None
    first = spec.requirements[0]
    changed = first.replace(hashes_of(first)[0], "0" * 64)
    other = EnvSpec(spec.framework, spec.kind, (changed, *spec.requirements[1:]), spec.source, spec.import_name,
                    spec.target, locked=True)
    assert other.digest != spec.digest


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_the_builder_installs_a_lock_with_require_hashes_and_no_deps(installer: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_mod, "uv_binary", lambda: "/opt/uv/bin/uv")
    monkeypatch.setattr(build_mod, "pip_config", lambda: [("global.find-links", "/opt/wheels")])
    python, requirements = tmp_path / "bin/python", tmp_path / "req.txt"
    locked = install_command(installer, python, requirements, locked=True)
    assert "--require-hashes" in locked and "--no-deps" in locked
    assert locked[-2:] == ["-r", str(requirements)] and str(python) in locked
    plugin = install_command(installer, python, requirements, locked=False, no_deps=False)
    assert "--require-hashes" not in plugin and "--no-deps" not in plugin  # a plugin's specifiers are resolved
    if installer == "uv":
        assert locked[:3] == ["/opt/uv/bin/uv", "pip", "install"] and "--find-links" in locked
        assert "--compile-bytecode" in locked  # as pip does: a worker's first import compiles nothing
    else:
        assert locked[:3] == [sys.executable, "-m", "pip"]
    with pytest.raises(ValueError, match="expected one of pip, uv"):
        install_command("conda", python, requirements, locked=True)


def test_the_builder_passes_what_the_lock_says_to_the_installer(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The requirements file the installer reads holds every pin with its hashes, one requirement a line."""
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], what: str, spec: EnvSpec, env: dict[str, str], timeout_s: float) -> str:
        seen.append(cmd)
        if what.endswith("install"):
            raise EnvironmentBuildError("stop here")
        return ""

    monkeypatch.setattr(build_mod, "_run", fake_run)
    monkeypatch.setattr(build_mod.venv, "EnvBuilder", lambda **kw: type("B", (), {"create": lambda self, p: None})())
    spec = spec_for("jax", adapter_class("jax"), "cpu")
    assert spec is not None
    target = tmp_path / "env"
    target.mkdir()
    with pytest.raises(EnvironmentBuildError):
        build_mod._build_into(target, spec, (), 60, "pip")
    assert "--require-hashes" in seen[0]
    written = (target / "batchscope-requirements.txt").read_text().splitlines()
    assert tuple(written) == spec.requirements and all("--hash=sha256:" in line for line in written)


def test_pips_configuration_becomes_uvs_flags() -> None:
    config = [(":env:.find-links", "/opt/wheels"), ("global.find-links", "/opt/wheels"),
              ("global.extra-index-url", "file:///opt/pypi/simple file:///opt/pypi-more/simple"),
              ("global.constraint", "/etc/xdg/pip/constraints.txt"), ("global.cert", "/etc/ssl/certs/ca.crt"),
              ("global.index-url", "https://mirror.example/simple")]
    flags = uv_flags(config)
    assert flags == ["--index-strategy", "unsafe-best-match", "--find-links", "/opt/wheels",
                     "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url",
                     "file:///opt/pypi-more/simple", "--constraint", "/etc/xdg/pip/constraints.txt",
                     "--index-url", "https://mirror.example/simple"]
    assert "--constraint" not in uv_flags(config, constraints=False)  # uv refuses a non-exact one with hashes
    assert uv_flags([("global.no-index", "true")]) == ["--index-strategy", "unsafe-best-match", "--no-index"]


def test_a_lock_written_by_make_locks_reads_back_as_its_pins_and_hashes() -> None:
    pins = [Pin("numpy", "2.4.6", "a" * 64), Pin("torch", "2.13.0+cpu", "b" * 64)]
    text = lock_text("pytorch", "cpu", Path("cpu.in"), pins, {"numpy": {"a" * 64}, "torch": {"c" * 64}}, "3.11")
    assert "torch==2.13.0+cpu \\\n    --hash=sha256:" in text  # pip-compile's layout, the local label kept
    lines = requirement_lines(text)
    assert [pin_of(line) for line in lines] == [("numpy", "2.4.6"), ("torch", "2.13.0+cpu")]
    assert [hashes_of(line) for line in lines] == [("a" * 64,), ("b" * 64, "c" * 64)]


def test_a_requirement_continued_over_lines_is_one_requirement() -> None:
    text = "# header\na==1 \\\n    --hash=sha256:ab \\\n    --hash=sha256:cd\nb==2  # note\n   # alone\n"
    assert requirement_lines(text) == ("a==1 --hash=sha256:ab --hash=sha256:cd", "b==2")
    with pytest.raises(ValueError, match="not an exact pin"):
        pin_of("numpy>=2")


def test_the_tags_a_cuda_lock_takes_are_linux_x86_64_for_its_python() -> None:
    tags = target_tags("3.11")
    assert "cp311-cp311-manylinux_2_28_x86_64" in tags and "py3-none-any" in tags
    assert "cp311-abi3-manylinux_2_17_x86_64" in tags
    assert not any("aarch64" in t or "macosx" in t or "win" in t or t.startswith("cp312") for t in tags)


@pytest.mark.process
def test_a_file_whose_hash_the_lock_does_not_list_is_refused(envs_dir: Path) -> None:
    """pip's hash-checking mode, as the builder runs it: numpy of the right version, but not the lock's file."""
    spec = EnvSpec("npenv", "cpu", (f"numpy=={np.__version__} --hash=sha256:{'0' * 64}",), "test lock", "numpy",
                   "tests.fakes.env_adapters:NumpyEnvAdapter", locked=True)
    with pytest.raises(EnvironmentBuildError, match="(?i)hash") as e:
        build(spec, envs_dir, (str(_code_dir([*WORKER_PACKAGES, "tests"])),))
    assert "pip install failed" in str(e.value)
    assert not spec.path(envs_dir).exists() and not list(envs_dir.glob(".*.building-*"))


def test_the_installer_is_named_by_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATCHSCOPE_INSTALLER", raising=False)
    assert build_mod.chosen_installer() == build_mod.INSTALLER == "pip"  # measured: docs/environments.md
    monkeypatch.setenv("BATCHSCOPE_INSTALLER", "UV")
    assert build_mod.chosen_installer() == "uv" and build_mod.chosen_installer("pip") == "pip"
    monkeypatch.setenv("BATCHSCOPE_INSTALLER", "conda")
    with pytest.raises(EnvironmentBuildError, match="BATCHSCOPE_INSTALLER='conda': expected one of pip, uv"):
        build_mod.chosen_installer()
