"""Issue 50, items 4 and 5: a damaged managed environment (numpy removed by hand) is found before its trials run and
rebuilt, or, where the rebuild fails, its trials are ``error`` rows naming the environment and the command that
rebuilds it; ``batchscope env build --rebuild FRAMEWORK``; and a trial whose environment vanished or broke as it
started is run after the rebuild, not lost.

The environments are the numpy-only fake plugin's (tests/fakes/env_adapters.py), in each test's own folder
(BATCHSCOPE_ENVS): a few seconds to build, and the shared environments other tests use are never touched.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import main
from harness.data import PreparedData
from harness.envs import build as build_mod
from harness.envs.build import FACTS_FILE, EnvironmentBuildError, damage, python_in
from harness.envs.resolve import Interpreter, managed_interpreter
from harness.envs.spec import EnvSpec
from harness.records import TrialUnit
from harness.run import executor as executor_mod
from harness.run.executor import LocalExecutor
from harness.store import Store
from tests.conftest import make_trial
from tests.envs.test_faults import _toml

#: every test here builds an environment with pip and starts workers
pytestmark = pytest.mark.process


def _site(interp: Interpreter) -> Path:
    return next(Path(interp.python).parents[1].glob("lib/python*/site-packages"))


def _remove_numpy_package(interp: Interpreter) -> None:
    """numpy's files deleted by hand, its metadata left behind."""
    shutil.rmtree(_site(interp) / "numpy")


def _uninstall_numpy(interp: Interpreter) -> None:
    """numpy removed with its metadata (as ``pip uninstall numpy`` does)."""
    site = _site(interp)
    shutil.rmtree(site / "numpy")
    for info in site.glob("numpy-*.dist-info"):
        shutil.rmtree(info)


@pytest.mark.parametrize(("harm", "said"), [(_remove_numpy_package, "files missing: numpy (numpy/"),
                                            (_uninstall_numpy, "not installed: numpy ")],
                         ids=["files-deleted", "uninstalled"])
def test_a_damaged_environment_is_found_and_rebuilt_before_its_trials(
        env_fakes: None, envs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        harm: Callable[[Interpreter], None], said: str) -> None:
    interp = managed_interpreter("npenv", "cpu")
    env_dir = Path(interp.python).parents[1]
    assert interp.problem is None and interp.spec is not None and damage(env_dir, interp.spec) is None
    harm(interp)
    problem = damage(env_dir, interp.spec)
    assert problem is not None and said in problem, problem
    out = tmp_path / "out"
    code = main(["run", str(_toml(tmp_path / "e.toml", ["npenv"])), "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert f"the npenv environment in {env_dir} is damaged ({problem}): building it anew" in printed.out
    assert damage(env_dir, interp.spec) is None  # whole again, at the same place (named by its requirements)
    with Store.open(out, create=False) as store:
        (row,) = store.trials()
    assert row["status"] == "ok" and row["environment"] == interp.environment, row["reason"]


def test_a_damaged_environment_that_cannot_be_rebuilt_gives_error_rows_naming_it_and_the_command(
        env_fakes: None, envs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    interp = managed_interpreter("npenv", "cpu")
    _remove_numpy_package(interp)

    def offline(tmp: Path, spec: EnvSpec, *args: object) -> dict[str, object]:
        raise EnvironmentBuildError(f"{spec.label}: pip install failed (exit 1); the installer's last lines:\n"
                                    "ERROR: Could not find a version that satisfies numpy (the test is offline)")

    monkeypatch.setattr(build_mod, "_build_into", offline)
    out = tmp_path / "out"
    code = main(["run", str(_toml(tmp_path / "e.toml", ["npenv"])), "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    assert code == 0 and "Traceback" not in printed.err, printed.err
    with Store.open(out, create=False) as store:
        (row,) = store.trials()
    reason = row["reason"]
    assert row["status"] == "error" and reason.startswith(f"not started: {interp.environment} in "), reason
    assert "was damaged (files missing: numpy (numpy/" in reason and "batchscope env build --rebuild npenv" in reason
    assert "the test is offline" in row["stderr_tail"]  # the installer's lines, whole
    assert "its trials are stored as errors" in printed.out


def test_env_build_rebuild_builds_it_anew(env_fakes: None, envs_dir: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    interp = managed_interpreter("npenv", "cpu")
    env_dir = Path(interp.python).parents[1]
    stamp = (env_dir / FACTS_FILE).stat().st_mtime_ns
    assert main(["env", "build", "--rebuild", "npenv"]) == 0
    printed = capsys.readouterr().out
    assert f"npenv: removed {env_dir}, to build it anew" in printed and "building the npenv environment" in printed
    assert (env_dir / FACTS_FILE).stat().st_mtime_ns != stamp and python_in(env_dir).exists()
    assert main(["env", "list", "--rebuild", "npenv"]) == 2  # --rebuild goes with build
    assert "--rebuild goes with build" in capsys.readouterr().err


@pytest.mark.parametrize("vanish", ["deleted", "numpy-deleted"])
def test_a_trial_whose_environment_vanished_as_it_started_runs_after_the_rebuild(
        env_fakes: None, envs_dir: Path, tiny_data: PreparedData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        vanish: str) -> None:
    """The environment goes after the executor found it there and before its worker runs (today's loss:
    ok,error,ok,ok): the worker cannot start, or cannot import numpy; the trial runs again once it is rebuilt."""
    interp = managed_interpreter("npenv", "cpu")
    env_dir = Path(interp.python).parents[1]
    real_ready = executor_mod._environment_ready
    calls: list[bool] = []

    def ready_then_gone(unit: TrialUnit, whole: bool = False) -> TrialUnit:
        unit = real_ready(unit, whole)
        calls.append(whole)
        if len(calls) == 1:  # the first attempt only: as it starts, the environment goes
            if vanish == "deleted":
                shutil.rmtree(env_dir)
            else:
                _remove_numpy_package(interp)
        return unit

    monkeypatch.setattr(executor_mod, "_environment_ready", ready_then_gone)
    spec = make_trial(framework="npenv", adapter_options={"behaviour": "ok"}, epochs=1, batch_size=8)
    unit = TrialUnit(trial=spec, data=tiny_data, order_path=str(tiny_data.write_order(spec.seed, spec.epochs)),
                     adapter_target="tests.fakes.env_adapters:NumpyEnvAdapter", python=interp.python,
                     pythonpath=interp.pythonpath, environment=interp.environment, env_spec=interp.spec)
    outcome = LocalExecutor(log_dir=tmp_path).run(unit)
    assert outcome.status == "ok", (outcome.reason, outcome.stderr_tail)
    assert calls[:2] == [False, True]  # the failed attempt, then the environment rebuilt before the second
    assert interp.spec is not None and damage(env_dir, interp.spec) is None
    assert outcome.environment == interp.environment


def test_a_trial_that_fails_in_a_whole_environment_is_not_run_again(
        env_fakes: None, envs_dir: Path, tiny_data: PreparedData, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the environment's harm earns a second attempt: a trial's own failure is stored as it was."""
    interp = managed_interpreter("npenv", "cpu")
    attempts: list[TrialUnit] = []
    real_once = LocalExecutor._run_once

    def counted(self: LocalExecutor, unit: TrialUnit, on_event: object = None) -> object:
        attempts.append(unit)
        return real_once(self, unit, on_event)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalExecutor, "_run_once", counted)
    spec = make_trial(framework="npenv", adapter_options={"behaviour": "segfault"}, epochs=1, batch_size=8)
    unit = TrialUnit(trial=spec, data=tiny_data, order_path=str(tiny_data.write_order(spec.seed, spec.epochs)),
                     adapter_target="tests.fakes.env_adapters:NumpyEnvAdapter", python=interp.python,
                     pythonpath=interp.pythonpath, environment=interp.environment, env_spec=interp.spec)
    outcome = LocalExecutor(log_dir=tmp_path).run(unit)
    assert outcome.status in ("crashed", "error") and len(attempts) == 1, outcome.reason


def _fake_env(root: Path, spec: EnvSpec, installed: dict[str, str]) -> Path:
    """A built environment's files without a process: the interpreter, the facts file, and for each distribution
    a ``.dist-info`` with a RECORD naming one file of its package, that file present."""
    env_dir = spec.path(root)
    python_in(env_dir).parent.mkdir(parents=True)
    python_in(env_dir).symlink_to(sys.executable)
    (env_dir / FACTS_FILE).write_text(json.dumps({"requirements": list(spec.requirements)}))
    site = env_dir / "lib" / "python3.11" / "site-packages"
    for name, version in installed.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        package = name.replace("-", "_")
        (site / package).mkdir()
        (site / package / "__init__.py").write_text("")
        (info / "RECORD").write_text(f"../../../bin/{name},,\n{info.name}/METADATA,,\n{package}/__init__.py,,\n")
    return env_dir


def test_a_lock_with_hashes_is_whole_where_its_pins_are_installed(tmp_path: Path) -> None:
    """The check reads a hashed lock's pins (``name==version --hash=...``, a local label kept): an environment built
    from one is not taken for damaged (it was, once, and every command rebuilt it)."""
    spec = EnvSpec("pytorch", "cpu", ("numpy==2.4.6 --hash=sha256:aa --hash=sha256:bb",
                                      "torch==2.13.0+cpu --hash=sha256:cc", "typing-extensions==4.16.0"),
                   "cpu.txt", "torch", locked=True)
    env_dir = _fake_env(tmp_path, spec, {"numpy": "2.4.6", "torch": "2.13.0+cpu", "typing-extensions": "4.16.0"})
    assert damage(env_dir, spec) is None
    shutil.rmtree(next(env_dir.glob("lib/python*/site-packages")) / "torch")
    assert damage(env_dir, spec) == "files missing: torch (torch/__init__.py is gone)"
