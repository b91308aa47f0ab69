"""A managed environment is not moved aside under another command's workers: a command holds it in use (``flock``
shared on ``<envs>/.<name>.use``) from its resolution to its end; a rebuild (a damaged one, ``env build --rebuild``)
takes it exclusive, waits for the users a bounded time (saying once whom for), and else leaves it in place with a
clear error (docs/environments.md, "In use").

The user is another process resolving the environment as a command does (tests/envs/inuse_user.py); the environment
is a tiny fake one made without pip (:func:`tests.envs.inuse_user.fill_env`), in each test's own folder
(BATCHSCOPE_ENVS): the shared environments other tests use are never touched.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli import main
from harness.data import PreparedData
from harness.envs import build as build_mod
from harness.envs import inuse
from harness.envs.build import FACTS_FILE, EnvironmentBuildError, build, damage, is_built, python_in
from harness.envs.resolve import WORKER_PACKAGES, _code_dir
from harness.envs.spec import EnvSpec, spec_for
from harness.errors import BatchscopeWarning
from harness.records import TrialUnit
from harness.run import executor as executor_mod
from harness.run.executor import LocalExecutor
from harness.store import Store
from tests.conftest import make_trial
from tests.envs.inuse_user import fill_env
from tests.envs.test_faults import _toml
from tests.fakes.env_adapters import NumpyEnvAdapter

#: every test here starts a process that holds an environment (and most start batchscope's facts reader in it)
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]


class User:
    """Another batchscope process using the environment: its lines, read as they come."""

    def __init__(self, envs: Path, mode: str = "hold") -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.envs.inuse_user", str(envs), mode],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, cwd=ROOT)
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def said(self, start: str, timeout: float = 60.0) -> str:
        """The next line starting with ``start`` (the process's other lines skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the user process said no {start!r} line in {timeout:.0f} s "
                                     f"(exit {self.proc.poll()})") from None
            if line.startswith(start):
                return line

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def end(self) -> None:
        """Its command ends (stdin closed), as a command's end lets its environments go."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


@pytest.fixture()
def users() -> Iterator[list[User]]:
    """The user processes a test starts: none is left running, whatever the test did."""
    started: list[User] = []
    yield started
    for user in started:
        if user.proc.poll() is None:
            user.proc.kill()
        user.proc.wait(timeout=30)
        user.reader.join(timeout=30)  # at the end of its output
        for pipe in (user.proc.stdin, user.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture()
def spec() -> EnvSpec:
    found = spec_for("npenv", NumpyEnvAdapter, "cpu")
    assert found is not None
    return found


@pytest.fixture()
def no_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's builds make the tiny fake environment instead of running pip."""
    monkeypatch.setattr(build_mod, "_build_into", fill_env)


def _made(root: Path, spec: EnvSpec) -> Path:
    """``spec``'s environment under ``root``, built as the builder leaves one (its facts file last)."""
    env_dir = spec.path(root)
    facts = fill_env(env_dir, spec)
    (env_dir / FACTS_FILE).write_text(json.dumps(facts))
    assert is_built(env_dir) and damage(env_dir, spec) is None
    return env_dir


def _using(users: list[User], envs_dir: Path, mode: str = "hold") -> User:
    user = User(envs_dir, mode)
    users.append(user)
    line = user.said("using ")
    assert line.endswith("problem=None"), line  # its facts were read in the environment: a worker would start there
    return user


def _damage(env_dir: Path) -> None:
    """numpy's files deleted by hand (its metadata left behind)."""
    next(env_dir.glob("lib/python*/site-packages/numpy.pth")).unlink()


def test_a_rebuild_waits_for_the_command_using_the_environment_then_proceeds_when_it_ends(
        env_fakes: None, envs_dir: Path, spec: EnvSpec, users: list[User], no_pip: None,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    env_dir = _made(envs_dir, spec)
    user = _using(users, envs_dir)
    monkeypatch.setenv(inuse.WAIT_VAR, "120")
    codes: list[int] = []
    rebuild = threading.Thread(target=lambda: codes.append(main(["env", "build", "--rebuild", "npenv"])))
    rebuild.start()
    try:
        out, deadline = "", time.monotonic() + 30
        while "waiting up to" not in out and time.monotonic() < deadline:
            time.sleep(0.1)
            out += capsys.readouterr().out
        time.sleep(1.0)  # it keeps waiting: the environment stays where the user's workers run
        assert rebuild.is_alive() and is_built(env_dir) and damage(env_dir, spec) is None
        assert (f"the npenv environment in {env_dir} is in use by another batchscope command (pid {user.proc.pid}: "
                in out), out
        assert "waiting up to 120 s for it to end before removing it (BATCHSCOPE_ENV_WAIT_S sets how long)" in out
    finally:
        user.end()
        rebuild.join(timeout=60)
    assert codes == [0]
    out += capsys.readouterr().out
    assert out.count("waiting up to") == 1  # said once
    assert f"npenv: removed {env_dir}, to build it anew" in out and "building the npenv environment" in out
    assert is_built(env_dir) and damage(env_dir, spec) is None


def test_a_bounded_wait_ends_with_a_clear_error_and_leaves_the_environment_in_place(
        env_fakes: None, envs_dir: Path, spec: EnvSpec, users: list[User], no_pip: None,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    env_dir = _made(envs_dir, spec)
    stamp = (env_dir / FACTS_FILE).stat().st_mtime_ns
    user = _using(users, envs_dir)
    monkeypatch.setenv(inuse.WAIT_VAR, "1")
    t0 = time.monotonic()
    code = main(["env", "build", "--rebuild", "npenv"])
    waited = time.monotonic() - t0
    printed = capsys.readouterr()
    assert code == 1 and "Traceback" not in printed.err, printed.err
    assert 1.0 <= waited < 30, waited
    assert printed.out.count("waiting up to 1 s") == 1, printed.out
    error = printed.err.strip()
    assert error.startswith(f"batchscope: error: {spec.label} in {env_dir} was to be removed, but another "
                            f"batchscope command is using it (pid {user.proc.pid}: "), error
    assert "it was left in place, not moved from under that command's workers" in error
    assert "Once that command has ended: batchscope env build --rebuild npenv" in error
    assert (env_dir / FACTS_FILE).stat().st_mtime_ns == stamp and damage(env_dir, spec) is None  # untouched
    assert user.proc.poll() is None
    user.end()


def test_a_user_killed_with_sigkill_leaves_no_lock_held(
        env_fakes: None, envs_dir: Path, spec: EnvSpec, users: list[User], no_pip: None,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """flock is the open file's: the kernel drops it when its holder dies, however it dies (its note stays, and is
    cleared by the next reader)."""
    env_dir = _made(envs_dir, spec)
    user = _using(users, envs_dir)
    monkeypatch.setenv(inuse.WAIT_VAR, "1")
    assert main(["env", "build", "--rebuild", "npenv"]) == 1  # held: the rebuild gives up, the environment stays
    assert "is using it (pid" in capsys.readouterr().err and is_built(env_dir)
    os.kill(user.proc.pid, signal.SIGKILL)
    assert user.proc.wait(timeout=30) == -signal.SIGKILL
    assert (inuse.notes_dir(spec, envs_dir) / f"{user.proc.pid}@{socket.gethostname()}").exists()  # left behind
    t0 = time.monotonic()
    assert main(["env", "build", "--rebuild", "npenv"]) == 0
    printed = capsys.readouterr().out
    assert "waiting up to" not in printed and time.monotonic() - t0 < 30, printed  # nothing held: no wait at all
    assert f"npenv: removed {env_dir}, to build it anew" in printed and is_built(env_dir)
    assert inuse.holders(spec, envs_dir) == []  # the dead holder's note, read and removed
    assert not list(inuse.notes_dir(spec, envs_dir).glob(f"{user.proc.pid}@*"))


def test_a_run_that_finds_the_environment_damaged_while_another_command_uses_it_leaves_it_in_place(
        env_fakes: None, envs_dir: Path, spec: EnvSpec, users: list[User], no_pip: None, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The defect: two commands (two checkouts that judge the environment differently, or a package removed by
    hand while one runs); the one that finds it damaged waits, then stores its trials as errors saying why, rather
    than pulling the interpreter from under the other's workers. Once the other has ended, the rebuild goes ahead."""
    env_dir = _made(envs_dir, spec)
    user = _using(users, envs_dir)
    _damage(env_dir)
    harm = damage(env_dir, spec)
    assert harm is not None
    monkeypatch.setenv(inuse.WAIT_VAR, "1")
    out = tmp_path / "out"
    code = main(["run", str(_toml(tmp_path / "e.toml", ["npenv"])), "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    assert code == 0 and "Traceback" not in printed.err, printed.err
    assert f"is in use by another batchscope command (pid {user.proc.pid}: " in printed.out
    with Store.open(out, create=False) as store:
        (row,) = store.trials()
    assert row["status"] == "error", row
    assert f"is damaged ({harm}), but another batchscope command is using it (pid {user.proc.pid}" in row["reason"]
    assert env_dir.is_dir() and user.proc.poll() is None  # in place (damaged as it was), its user still running
    user.end()
    assert build(spec, envs_dir, ()) == env_dir and damage(env_dir, spec) is None  # no user left: rebuilt


def test_a_command_that_uses_the_environment_rebuilds_it_itself_without_waiting_and_keeps_it(
        envs_dir: Path, spec: EnvSpec, no_pip: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The upgrade path: the command holds the environment (resolved), a trial finds it damaged and asks for the
    rebuild (harness.run.executor's retry): its own hold is converted, not waited for, and is held again after."""
    env_dir = _made(envs_dir, spec)
    monkeypatch.setenv(inuse.WAIT_VAR, "2")
    build_mod.use(spec, envs_dir)
    try:
        _damage(env_dir)
        waits: list[str] = []
        t0 = time.monotonic()
        assert build(spec, envs_dir, (), on_wait=waits.append) == env_dir
        assert waits == [] and time.monotonic() - t0 < 2 and damage(env_dir, spec) is None
        other = subprocess.run(  # another process's rebuild: this one still holds it, so it gives up
            [sys.executable, "-c", "import sys; from pathlib import Path; from harness.envs.build import remove; "
             "from tests.envs.test_in_use import _spec; remove(_spec(), Path(sys.argv[1]))", str(envs_dir)],
            capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert other.returncode == 1 and "EnvironmentInUseError" in other.stderr, other.stderr[-2000:]
        assert f"pid {os.getpid()}: " in other.stderr and is_built(env_dir)
    finally:
        inuse.release_all()


def test_two_commands_that_both_find_it_damaged_do_not_wait_on_each_other(
        envs_dir: Path, spec: EnvSpec, users: list[User], no_pip: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock order: each lets its hold go before it waits for the build lock, so the first to have the build
    lock rebuilds (the other's hold gone) and the other finds it whole; neither gives up."""
    env_dir = _made(envs_dir, spec)
    monkeypatch.setenv(inuse.WAIT_VAR, "60")
    user = _using(users, envs_dir, "rebuild")
    build_mod.use(spec, envs_dir)
    try:
        _damage(env_dir)
        results: list[object] = []

        def here() -> None:
            try:
                results.append(build(spec, envs_dir, ()))
            except EnvironmentBuildError as e:
                results.append(e)

        mine = threading.Thread(target=here)
        mine.start()
        time.sleep(0.5)  # this process has the build lock and waits for the other's hold
        user.tell("rebuild")  # the other finds it damaged too
        assert user.said("rebuilt", timeout=60) == "rebuilt"
        mine.join(timeout=60)
        assert results == [env_dir] and damage(env_dir, spec) is None
    finally:
        inuse.release_all()
        user.end()


def _spec() -> EnvSpec:
    """The environment's spec, for a process of its own (``-c``)."""
    found = spec_for("npenv", NumpyEnvAdapter, "cpu")
    assert found is not None
    return found



def test_a_trials_retry_in_an_environment_another_command_uses_waits_then_stores_an_error(
        envs_dir: Path, spec: EnvSpec, users: list[User], no_pip: None, tiny_data: PreparedData, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor's retry (a trial whose environment broke as it started is run again after the rebuild): its
    rebuild converts the unit's own hold, waits for the other command (a note, once), and gives up with the
    trial's ``error`` row saying so; the environment stays where the other command's workers run."""
    env_dir = _made(envs_dir, spec)
    user = _using(users, envs_dir)
    monkeypatch.setenv(inuse.WAIT_VAR, "1")
    real_ready = executor_mod._environment_ready
    calls: list[bool] = []

    def ready_then_broken(unit: TrialUnit, whole: bool = False) -> TrialUnit:
        unit = real_ready(unit, whole)
        calls.append(whole)
        if len(calls) == 1:  # as the first attempt starts, numpy's files go
            _damage(env_dir)
        return unit

    monkeypatch.setattr(executor_mod, "_environment_ready", ready_then_broken)
    trial = make_trial(framework="npenv", adapter_options={"behaviour": "ok"}, epochs=1, batch_size=8)
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(trial.seed, trial.epochs)),
                     adapter_target="tests.fakes.env_adapters:NumpyEnvAdapter", python=str(python_in(env_dir)),
                     pythonpath=(str(_code_dir([*WORKER_PACKAGES, "tests"])),), environment=spec.label,
                     env_spec=spec)
    with pytest.warns(BatchscopeWarning, match=rf"is in use by another batchscope command \(pid {user.proc.pid}: "):
        outcome = LocalExecutor(log_dir=tmp_path).run(unit)
    assert calls[:2] == [False, True]  # the failed attempt, then the rebuild the retry asked for
    assert outcome.status == "error" and "another batchscope command is using it" in outcome.reason, outcome.reason
    assert env_dir.is_dir() and user.proc.poll() is None
    user.end()
