"""tests/helpers/processes.py: under ``make test-fast`` a test may start batchscope in a process of its own only with
the ``process`` (or ``slow``) marker; tests/helpers/inprocess.py: the command called in the test process."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.helpers import processes
from tests.helpers.inprocess import cli


def test_starting_a_process_unmarked_fails_under_test_fast_only(monkeypatch: pytest.MonkeyPatch) -> None:
    unmarked = SimpleNamespace(nodeid="t::unmarked", keywords={"test_x": 1})
    marked = SimpleNamespace(nodeid="t::marked", keywords={"process": 1})
    monkeypatch.setattr(processes, "RUNNING", [unmarked])
    monkeypatch.delenv(processes.FAST_ENV, raising=False)
    processes.check_may_start("batchscope run")  # make test: anything goes
    monkeypatch.setenv(processes.FAST_ENV, "1")
    with pytest.raises(AssertionError, match="t::unmarked starts batchscope run .* @pytest.mark.process"):
        processes.check_may_start("batchscope run")
    monkeypatch.setattr(processes, "RUNNING", [marked])
    processes.check_may_start("batchscope run")


def test_under_test_fast_every_process_start_is_checked_even_where_the_code_under_test_catches_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    unmarked = SimpleNamespace(nodeid="t::unmarked", keywords={"test_x": 1})
    marked = SimpleNamespace(nodeid="t::marked", keywords={"process": 1})
    monkeypatch.setattr(subprocess.Popen, "_execute_child", subprocess.Popen._execute_child)  # restored after
    monkeypatch.setattr(processes, "REFUSED", [])
    monkeypatch.setattr(processes, "RUNNING", [unmarked])
    monkeypatch.setenv(processes.FAST_ENV, "1")
    processes.guard_process_starts()
    processes.guard_process_starts()  # once only: a second call does not wrap the wrapper
    try:  # code under test that catches what a failed start raises (an executor recording the trial's error)
        subprocess.run(["true", "--made-up"], check=False)
    except Exception:  # noqa: BLE001
        pass
    (refused,) = processes.violations_of("t::unmarked")
    assert "t::unmarked starts true --made-up in a process of its own" in refused
    assert processes.violations_of("t::unmarked") == []  # read once
    with processes.shared_run("a store many tests read"):  # a shared fixture's run may start its processes
        assert subprocess.run(["true"], check=False).returncode == 0
    monkeypatch.setattr(processes, "RUNNING", [marked])
    assert subprocess.run(["true"], check=False).returncode == 0
    monkeypatch.delenv(processes.FAST_ENV)
    monkeypatch.setattr(processes, "RUNNING", [unmarked])
    assert subprocess.run(["true"], check=False).returncode == 0  # make test: anything goes
    assert processes.REFUSED == []


def test_the_command_in_the_test_process_gives_its_exit_code_and_output_and_leaves_the_process_as_it_was(
        tmp_path) -> None:
    import os

    before_env, before_cwd = dict(os.environ), os.getcwd()
    done = cli(["export", str(tmp_path)], env={**os.environ, "BATCHSCOPE_MADE_UP": "1"}, cwd=tmp_path)
    assert done.returncode == 2 and "batchscope: error:" in done.stderr and done.stdout == "", done
    usage = cli(["run", "--no-such-option"])  # argparse's exit, as a process would give it
    assert usage.returncode == 2 and "arguments are required: experiment" in usage.stderr, usage
    assert cli(["--version"]).stdout.startswith("batchscope ")
    assert dict(os.environ) == before_env and os.getcwd() == before_cwd
