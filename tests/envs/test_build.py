"""Issue 38, items 2 and 10: a managed environment is built once, atomically, by one process at a time, and no
fault (a lock that cannot install, a full disk, Ctrl-C, a kill, a deletion during a sweep) leaves one that looks
usable or stops the other frameworks. The environments here hold numpy alone: seconds to build, no framework."""

from __future__ import annotations

import errno
import json
import threading
from pathlib import Path

import pytest

from harness.envs import build as build_mod
from harness.envs.build import FACTS_FILE, EnvironmentBuildError, build, is_built, python_in
from harness.envs.resolve import WORKER_PACKAGES, _code_dir, managed_interpreter
from harness.envs.spec import spec_for
from tests.fakes.env_adapters import BrokenEnvAdapter, NumpyEnvAdapter


def _spec(cls: type = NumpyEnvAdapter):
    spec = spec_for(cls.name, cls, "cpu")
    assert spec is not None
    return spec


def _code() -> tuple[str, ...]:
    return (str(_code_dir([*WORKER_PACKAGES, "tests"])),)


@pytest.mark.process
def test_an_environment_is_built_once_and_reused(envs_dir: Path) -> None:
    spec = _spec()
    lines: list[str] = []
    path = build(spec, envs_dir, _code(), lines.append)
    assert path == spec.path(envs_dir) and is_built(path) and python_in(path).exists()
    facts = json.loads((path / FACTS_FILE).read_text())
    assert facts["digest"] == spec.digest and facts["numpy"] == spec.requirements[0].split("==")[1]
    assert any("building the npenv environment" in line for line in lines)
    stamp = (path / FACTS_FILE).stat().st_mtime_ns
    lines.clear()
    assert build(spec, envs_dir, _code(), lines.append) == path and lines == []  # reused: nothing said, nothing done
    assert (path / FACTS_FILE).stat().st_mtime_ns == stamp
    assert not list(envs_dir.glob(".*.building-*"))  # no temporary folder left beside it


@pytest.mark.process
def test_two_builds_at_once_build_it_once(envs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    real = build_mod._build_into

    def counting(tmp: Path, *args: object) -> dict[str, object]:
        calls.append(tmp)
        return real(tmp, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(build_mod, "_build_into", counting)
    spec, code = _spec(), _code()
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(build(spec, envs_dir, code))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(results) == 2 and results[0] == results[1] and len(calls) == 1  # the second waited, then reused


def test_the_code_folder_is_made_once_when_several_environments_are_prepared_at_once(envs_dir: Path) -> None:
    """The environments of one command are prepared by threads of one process (one pid): none may trip over
    another's half-made folder of links (a clean CI machine's first ``env build`` did, with four threads)."""
    barrier = threading.Barrier(6)
    results: list[Path] = []
    errors: list[BaseException] = []

    def make() -> None:
        barrier.wait()
        try:
            results.append(_code_dir([*WORKER_PACKAGES, "tests"]))
        except BaseException as exc:  # noqa: BLE001 - the test reports what a thread raised
            errors.append(exc)

    threads = [threading.Thread(target=make) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(results)) == 1
    folder = results[0]
    assert sorted(p.name for p in folder.iterdir()) == ["adapters", "harness", "tests"]
    assert (folder / "harness").resolve() == Path(__file__).resolve().parents[2] / "harness"
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no temporary folder left beside it


def test_a_code_folder_whose_links_no_longer_hold_is_made_again(envs_dir: Path, tmp_path: Path) -> None:
    """A checkout that was deleted and cloned again (as CI does) leaves links that dangle or point elsewhere."""
    folder = _code_dir([*WORKER_PACKAGES])
    gone = tmp_path / "gone"
    (folder / "harness").unlink()
    (folder / "harness").symlink_to(gone)  # dangling
    assert _code_dir([*WORKER_PACKAGES]) == folder
    assert (folder / "harness").resolve() == Path(__file__).resolve().parents[2] / "harness"


@pytest.mark.process
def test_a_lock_that_cannot_install_fails_with_the_installers_lines_and_leaves_nothing(envs_dir: Path) -> None:
    spec = _spec(BrokenEnvAdapter)
    with pytest.raises(EnvironmentBuildError) as e:
        build(spec, envs_dir, _code())
    assert "pip install failed" in str(e.value) and "batchscope-no-such-distribution" in str(e.value)
    assert not spec.path(envs_dir).exists()
    assert not list(envs_dir.glob(".*.building-*"))


@pytest.mark.parametrize("fault", ["disk_full", "ctrl_c"])
def test_a_build_stopped_half_way_leaves_nothing_that_looks_built(envs_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  fault: str) -> None:
    def half_way(tmp: Path, *args: object) -> dict[str, object]:
        (tmp / "bin").mkdir(parents=True)
        (tmp / "bin" / "python").write_text("")  # an interpreter, but no facts file: not built
        if fault == "disk_full":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise KeyboardInterrupt

    monkeypatch.setattr(build_mod, "_build_into", half_way)
    spec = _spec()
    if fault == "disk_full":
        with pytest.raises(EnvironmentBuildError, match="the disk is full"):
            build(spec, envs_dir, _code())
    else:
        with pytest.raises(KeyboardInterrupt):
            build(spec, envs_dir, _code())
    assert not spec.path(envs_dir).exists() and not list(envs_dir.glob(".*.building-*"))


@pytest.mark.process
def test_what_a_killed_build_left_is_cleared_and_never_used(envs_dir: Path) -> None:
    spec = _spec()
    leftover = envs_dir / f".{spec.name}.building-999999"  # a build killed with SIGKILL: its folder stays
    (leftover / "bin").mkdir(parents=True)
    final = spec.path(envs_dir)
    (final / "bin").mkdir(parents=True)  # a folder without its facts file at the final place (by hand, say)
    (final / "bin" / "python").write_text("")
    assert not is_built(final)
    path = build(spec, envs_dir, _code())
    assert is_built(path) and not leftover.exists()


@pytest.mark.process
def test_a_plugin_with_requirements_runs_in_an_environment_of_its_own(env_fakes: None, envs_dir: Path) -> None:
    interp = managed_interpreter("npenv", "cpu")
    assert interp.source == "managed" and interp.problem is None
    assert interp.environment.startswith("managed npenv-cpu@") and Path(interp.python).is_relative_to(envs_dir)
    assert interp.facts.get("numpy") and interp.worker_env()["PYTHONPATH"] == interp.pythonpath[0]
    assert managed_interpreter("fake", "cpu").source == "parent"  # no requirements, no framework of a built-in
    broken = managed_interpreter("brokenenv", "cpu")
    assert broken.problem and "batchscope-no-such-distribution" in broken.problem
