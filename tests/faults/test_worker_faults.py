"""Issue 24 (worker logs, orphans, stopped processes): a worker that prints without end cannot fill the disk;
no worker outlives its parent by more than a few seconds, even a stopped one; a stopped parent does not turn a
worker that finished in time into a timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.helpers import (
    alive,
    fake_experiment,
    gone_within,
    hanging,
    request_sent,
    rows,
    start,
    wait_for,
    workers_of,
)

#: the bounded log: its head and tail (harness/capture.py) and a line saying what was dropped
LOG_CAP_BYTES = 2 * 2**20 + 4096


def _logs(out: Path) -> list[Path]:
    return sorted((out / "logs").glob("worker-*.log"))


@pytest.mark.process
def test_a_worker_that_prints_a_flood_then_fails_keeps_a_bounded_log_with_its_traceback(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, timeout_s=120)
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="flood_then_error")
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    (row,) = rows(out)
    assert row["status"] == "error" and "failed after a flood of output" in row["reason"]
    (log,) = _logs(out)
    assert log.stat().st_size <= LOG_CAP_BYTES, log.stat().st_size  # it printed 64 MiB
    text = log.read_text()
    assert "bytes of output dropped here" in text
    assert text.startswith("chatter") or "chatter" in text[:4096]  # the head: what it printed first
    assert "fake: the flood ends here" in text[-4096:]  # the tail: what it printed last
    assert "ValueError: fake: failed after a flood of output" in row["traceback"]


@pytest.mark.process
def test_a_worker_that_prints_without_end_is_bounded_by_its_timeout_and_its_log_by_the_cap(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, timeout_s=4)
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="flood")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    (row,) = rows(out)
    assert row["status"] == "timeout", row["reason"]
    (log,) = _logs(out)
    assert log.stat().st_size <= LOG_CAP_BYTES, log.stat().st_size
    assert "bytes of output dropped here" in log.read_text()


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except OSError:
        return False


@pytest.mark.process
def test_a_stopped_worker_whose_parent_is_killed_dies_within_seconds(tmp_path: Path) -> None:
    """Its parent-watching thread cannot run while it is stopped: the kernel's orphaned-group rule must reach it."""
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, timeout_s=600)
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="hang")
    workers = wait_for(lambda: workers_of(proc.pid) or proc.poll() is not None, 120, "the worker")
    assert proc.poll() is None, proc.communicate()
    wait_for(lambda: hanging(workers[0]), 120, "the worker to reach its hang")
    os.kill(workers[0], signal.SIGSTOP)
    wait_for(lambda: _stopped(workers[0]), 10, "the worker to stop")
    proc.kill()
    proc.communicate(timeout=60)
    left = gone_within(workers, 5.0)
    for pid in left:  # never leave one behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert left == [], "a stopped worker outlived its parent"


@pytest.mark.process
def test_a_stopped_parent_killed_while_its_worker_runs_leaves_no_worker(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, timeout_s=600)
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="hang")
    workers = wait_for(lambda: workers_of(proc.pid) or proc.poll() is not None, 120, "the worker")
    assert proc.poll() is None, proc.communicate()
    wait_for(lambda: hanging(workers[0]), 120, "the worker to reach its hang")
    os.kill(proc.pid, signal.SIGSTOP)
    proc.kill()
    proc.communicate(timeout=60)
    assert gone_within(workers, 5.0) == []


@pytest.mark.process
def test_request_sent_tells_a_child_still_waiting_on_its_stdin() -> None:
    """The check the test below waits on can say "not yet": a child whose stdin we hold open is still waiting."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert not request_sent(os.getpid(), child.pid)
        assert child.stdin is not None
        child.stdin.close()
        assert request_sent(os.getpid(), child.pid)
        child.wait(timeout=60)
    finally:
        child.kill()
        child.wait()


@pytest.mark.process
def test_a_worker_that_finished_while_its_parent_was_stopped_is_not_a_timeout(tmp_path: Path) -> None:
    """The parent, stopped past the trial's deadline, wakes to a worker that finished long before it: ok."""
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, timeout_s=8, timed_steps=5)  # 7 steps of 0.2 s: about 2 s of training
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="slow_steps")
    workers = wait_for(lambda: workers_of(proc.pid) or proc.poll() is not None, 120, "the worker")
    assert workers, proc.communicate()
    # stopped before it has sent the request, the parent leaves the worker waiting on stdin (seen once in CI)
    wait_for(lambda: request_sent(proc.pid, workers[0]), 60, "the parent to send the worker its request")
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        t_stop = time.monotonic()
        wait_for(lambda: not alive(workers[0]), 60, "the worker to finish while its parent is stopped")
        time.sleep(max(0.0, 10 - (time.monotonic() - t_stop)))  # past the deadline of 8 s
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    (row,) = rows(out)
    assert row["status"] == "ok", row["reason"]


@pytest.mark.process
def test_a_stopped_worker_past_its_timeout_is_killed_and_recorded_as_a_timeout(tmp_path: Path) -> None:
    """The guard beside the one above: a worker that really ran (or sat stopped) past its deadline is a timeout."""
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, timeout_s=5, timed_steps=5)
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="slow_steps")
    workers = wait_for(lambda: workers_of(proc.pid) or proc.poll() is not None, 120, "the worker")
    assert workers, proc.communicate()
    os.kill(workers[0], signal.SIGSTOP)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    (row,) = rows(out)
    assert row["status"] == "timeout", row["reason"]
    assert gone_within(workers) == []
