"""Issue 13, item 2 (and the Ctrl-C message of item 14): however the parent ends, no worker outlives it.

Each test starts a real ``batchscope`` process with the fake adapter: batch 4 finishes, batch 64 hangs
(``hang_large``), so the signal arrives with a finished trial stored and a worker in flight.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.faults.helpers import fake_experiment, gone_within, hanging, rows, start, wait_for, workers_of

#: every test here starts batchscope in a process of its own and signals or kills it: `make test` only
pytestmark = pytest.mark.process

CASES = [(signal.SIGINT, 130, "interrupted (SIGINT)"), (signal.SIGTERM, 143, "stopped: got SIGTERM"),
         (signal.SIGHUP, 129, "stopped: got SIGHUP")]


def _hanging_run(tmp_path: Path) -> tuple[object, Path, list[int]]:
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 64], timeout_s=600)
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="hang_large")
    wait_for(lambda: len(rows(out)) >= 1 or proc.poll() is not None, 120, "the first trial to be stored")
    assert proc.poll() is None, proc.communicate()
    workers = wait_for(lambda: workers_of(proc.pid), 60, "the worker of the hanging trial")
    wait_for(lambda: hanging(workers[0]), 120, "the worker to reach its hang")
    return proc, out, workers


@pytest.mark.parametrize(("sig", "code", "message"), CASES, ids=[s.name for s, _, _ in CASES])
def test_run_stopped_by_a_signal_kills_its_worker_and_keeps_finished_trials(tmp_path: Path, sig: signal.Signals,
                                                                             code: int, message: str) -> None:
    proc, out, workers = _hanging_run(tmp_path)
    proc.send_signal(sig)  # type: ignore[attr-defined]
    _, err = proc.communicate(timeout=60)  # type: ignore[attr-defined]
    assert gone_within(workers) == [], "a worker outlived its parent"
    assert proc.returncode == code, err  # type: ignore[attr-defined]
    assert message in err and "--resume" in err and "Traceback" not in err
    kept = rows(out)
    assert [(r["batch_size"], r["status"]) for r in kept] == [(4, "ok")]


def test_a_worker_whose_parent_is_killed_outright_exits_by_itself(tmp_path: Path) -> None:
    """SIGKILL cannot be caught: the worker itself notices that its parent is gone."""
    proc, _, workers = _hanging_run(tmp_path)
    proc.kill()  # type: ignore[attr-defined]
    proc.communicate(timeout=60)  # type: ignore[attr-defined]
    assert gone_within(workers) == [], "the worker kept running after its parent was killed"


def test_maxbatch_stopped_by_sigterm_kills_its_probe_and_does_not_suggest_resume(tmp_path: Path) -> None:
    out = tmp_path / "mb"
    proc = start(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
                 "--memory-limit-mib", "4096", "--timeout-s", "600", "--out", str(out), behaviour="hang")
    workers = wait_for(lambda: workers_of(proc.pid) or proc.poll() is not None, 120, "the first probe's worker")
    assert proc.poll() is None, proc.communicate()
    wait_for(lambda: hanging(workers[0]), 120, "the probe to reach its hang")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert gone_within(workers) == [], "a probe's worker outlived its parent"
    assert proc.returncode == 143 and "SIGTERM" in err and "Traceback" not in err
    assert "with --resume" not in err  # no suggestion to resume: maxbatch has no --resume (issue 13, item 14)


def test_maxbatch_interrupted_does_not_suggest_resume(tmp_path: Path) -> None:
    proc = start(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
                 "--memory-limit-mib", "4096", "--timeout-s", "600", "--out", str(tmp_path / "mb"), behaviour="hang")
    workers = wait_for(lambda: workers_of(proc.pid) or proc.poll() is not None, 120, "the first probe's worker")
    assert proc.poll() is None, proc.communicate()
    wait_for(lambda: hanging(workers[0]), 120, "the probe to reach its hang")
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert gone_within(workers) == []
    assert proc.returncode == 130 and "interrupted" in err and "with --resume" not in err and "Traceback" not in err
