"""Issue 24: every signal x every phase. ``test_signals.py`` covers training (SIGINT, SIGTERM, SIGHUP, SIGKILL of
``run``; SIGTERM and SIGINT of ``maxbatch``), ``test_pipes.py`` data preparation (SIGINT, SIGTERM, SIGHUP),
``test_data_faults.py`` a preparation killed outright, ``test_worker_faults.py`` stopped workers and parents.
Here: the worker's start-up, evaluation, the store's write, ``maxbatch`` under SIGHUP and SIGKILL, the report,
and a stop (SIGSTOP, then SIGCONT) in each phase, which must change nothing but the wall time.

However the command ends: the exit code says which signal (130 / 143 / 129), no worker outlives it, what was
stored is whole, and nothing half-written is left behind.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import ROOT
from tests.faults.helpers import (
    alive,
    bs,
    command,
    env_for,
    fake_experiment,
    gone_within,
    hanging,
    interruptible,
    rows,
    start,
    wait_for,
    workers_of,
)

#: every test here starts batchscope in a process of its own and signals or kills it: `make test` only
pytestmark = pytest.mark.process

CASES = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
IDS = [s.name for s, _ in CASES]


def _signal_and_check(proc: subprocess.Popen[str], workers: list[int], sig: signal.Signals, code: int) -> str:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert gone_within(workers) == [], "a worker outlived its parent"
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    return err


def _hanging_worker(proc: subprocess.Popen[str]) -> list[int]:
    workers = wait_for(lambda: workers_of(proc.pid) or proc.poll() is not None, 120, "the worker")
    assert proc.poll() is None, proc.communicate()
    wait_for(lambda: hanging(workers[0]), 120, "the worker to reach its hang")
    return workers


# ---------------------------------------------------------------- the worker's start-up
@pytest.mark.parametrize(("sig", "code"), CASES, ids=IDS)
def test_a_signal_during_the_workers_start_up(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    out = tmp_path / "out"
    proc = start(tmp_path, "run", str(fake_experiment(tmp_path, timeout_s=600)), "--out", str(out),
                 behaviour="hang_setup")
    workers = _hanging_worker(proc)
    _signal_and_check(proc, workers, sig, code)
    assert rows(out) == []


def test_the_parent_killed_during_the_workers_start_up(tmp_path: Path) -> None:
    proc = start(tmp_path, "run", str(fake_experiment(tmp_path, timeout_s=600)), "--out", str(tmp_path / "out"),
                 behaviour="hang_setup")
    workers = _hanging_worker(proc)
    proc.kill()
    proc.communicate(timeout=60)
    assert gone_within(workers) == []


# ---------------------------------------------------------------- evaluation
def _in_eval(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, list[int]]:
    """Batch 4 trains and evaluates; batch 64 trains, then hangs in evaluation."""
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 64], timeout_s=600, eval=True)
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="hang_eval_large")
    wait_for(lambda: len(rows(out)) >= 1 or proc.poll() is not None, 120, "the first trial to be stored")
    return proc, out, _hanging_worker(proc)


@pytest.mark.parametrize(("sig", "code"), CASES, ids=IDS)
def test_a_signal_during_evaluation_keeps_the_finished_trial(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    proc, out, workers = _in_eval(tmp_path)
    err = _signal_and_check(proc, workers, sig, code)
    assert "--resume" in err
    assert [(r["batch_size"], r["status"]) for r in rows(out)] == [(4, "ok")]


def test_the_parent_killed_during_evaluation(tmp_path: Path) -> None:
    proc, out, workers = _in_eval(tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    assert gone_within(workers) == []
    assert [(r["batch_size"], r["status"]) for r in rows(out)] == [(4, "ok")]


# ---------------------------------------------------------------- the store's write
@pytest.mark.parametrize(("sig", "code"), CASES, ids=IDS)
def test_a_signal_while_the_store_is_written_leaves_the_trial_whole_or_absent(tmp_path: Path, sig: signal.Signals,
                                                                              code: int) -> None:
    """The parent is caught in the store's write: another process holds the store's lock while the trial ends."""
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, timeout_s=600, timed_steps=10)  # 12 steps of 0.2 s
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="slow_steps")
    workers = wait_for(lambda: workers_of(proc.pid) or proc.poll() is not None, 120, "the worker")
    assert proc.poll() is None, proc.communicate()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys\n"
        f"c = sqlite3.connect({str(out / 'results.sqlite')!r}, isolation_level=None, timeout=60)\n"
        "c.execute('BEGIN EXCLUSIVE')\nprint('locked', flush=True)\nsys.stdin.readline()\nc.execute('COMMIT')\n")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        wait_for(lambda: not alive(workers[0]), 60, "the trial to end (its write then waits for the lock)")
        time.sleep(0.5)
        proc.send_signal(sig)
        time.sleep(1.0)
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and "Traceback" not in err, err
    conn = sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        stored = conn.execute("SELECT trial_hash, status, train_steps_n FROM trials").fetchall()
        for trial_hash, status, steps in stored:  # whole: its step times came with it
            assert status == "ok"
            assert conn.execute("SELECT COUNT(*) FROM step_times WHERE trial_hash = ?",
                                (trial_hash,)).fetchone()[0] == steps
    finally:
        conn.close()
    assert len(stored) <= 1


# ---------------------------------------------------------------- maxbatch
MAXBATCH = ("maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
            "--memory-limit-mib", "4096", "--timeout-s", "600")


def test_maxbatch_stopped_by_sighup_kills_its_probe(tmp_path: Path) -> None:
    proc = start(tmp_path, *MAXBATCH, "--out", str(tmp_path / "mb"), behaviour="hang")
    workers = _hanging_worker(proc)
    err = _signal_and_check(proc, workers, signal.SIGHUP, 129)
    assert "with --resume" not in err


def test_maxbatch_killed_outright_leaves_no_probe(tmp_path: Path) -> None:
    proc = start(tmp_path, *MAXBATCH, "--out", str(tmp_path / "mb"), behaviour="hang")
    workers = _hanging_worker(proc)
    proc.kill()
    proc.communicate(timeout=60)
    assert gone_within(workers) == []


# ---------------------------------------------------------------- the report
@pytest.fixture(scope="module")
def a_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("store")
    done = bs(tmp, "run", str(fake_experiment(tmp, batch_sizes=[4, 8], repeats=2)), "--out", str(tmp / "out"))
    assert done.returncode == 0, done.stderr
    return tmp / "out"


def _building(report_dir: Path) -> list[Path]:
    return [p for p in report_dir.iterdir() if p.name.startswith(".report-")] if report_dir.exists() else []


def _report_caught_building(tmp_path: Path, store: Path) -> tuple[subprocess.Popen[str], Path]:
    """``batchscope report`` frozen (SIGSTOP) the moment its temporary build directory appears."""
    out = tmp_path / "copy"
    out.mkdir()
    (out / "results.sqlite").write_bytes((store / "results.sqlite").read_bytes())
    proc = subprocess.Popen(command("report", str(out)), cwd=ROOT, env=env_for(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    deadline = time.monotonic() + 120
    while not _building(out / "report") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGSTOP)
    return proc, out


@pytest.mark.parametrize(("sig", "code"), CASES, ids=IDS)
def test_a_signal_during_the_report_leaves_no_partial_report(tmp_path: Path, a_store: Path, sig: signal.Signals,
                                                             code: int) -> None:
    proc, out = _report_caught_building(tmp_path, a_store)
    try:
        assert _building(out / "report"), "the report was not caught building"
        os.kill(proc.pid, sig)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code and "Traceback" not in err, err
    assert _building(out / "report") == [] and not (out / "report" / "report.pdf").exists()


def test_a_report_killed_outright_is_cleaned_up_by_the_next(tmp_path: Path, a_store: Path) -> None:
    proc, out = _report_caught_building(tmp_path, a_store)
    assert _building(out / "report"), "the report was not caught building"
    proc.kill()
    proc.communicate(timeout=60)
    assert _building(out / "report")  # SIGKILL cannot be caught: the partial build stays, for now
    again = bs(tmp_path, "report", str(out))
    assert again.returncode == 0, again.stderr
    assert _building(out / "report") == [] and (out / "report" / "report.pdf").is_file()


# ---------------------------------------------------------------- a stop in each phase changes nothing
def _stop_for(pid: int, seconds: float) -> None:
    os.kill(pid, signal.SIGSTOP)
    time.sleep(seconds)
    os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("who", ["parent", "worker"])
def test_a_stop_and_continue_during_training_changes_nothing_but_time(tmp_path: Path, who: str) -> None:
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, timeout_s=600, timed_steps=10)
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="slow_steps")
    workers = wait_for(lambda: workers_of(proc.pid) or proc.poll() is not None, 120, "the worker")
    assert proc.poll() is None, proc.communicate()
    _stop_for(proc.pid if who == "parent" else workers[0], 2.0)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert [r["status"] for r in rows(out)] == ["ok"]


def _preparing(prepared: Path) -> bool:
    try:
        return any(".tmp" in p.name for p in prepared.iterdir())
    except OSError:  # not made yet, or renamed meanwhile
        return False


def test_a_stop_and_continue_during_data_preparation_changes_nothing_but_time(tmp_path: Path) -> None:
    # the prepared copy is written in well under a second: polled every 5 ms, and run again (a fresh cache) when a
    # loaded machine let the whole run finish between two looks (seen: the stop sent to a process already gone)
    for attempt in range(3):
        base = tmp_path / f"attempt{attempt}"
        base.mkdir()
        out = base / "out"
        exp = fake_experiment(base, synthetic_shape=[3, 64, 64], synthetic_samples=4000)
        proc = start(base, "run", str(exp), "--out", str(out))
        prepared = base / "cache" / "prepared"
        caught = False
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not caught:
            if _preparing(prepared):
                try:
                    _stop_for(proc.pid, 1.0)
                    caught = True
                except ProcessLookupError:
                    break
            time.sleep(0.005)
        _, err = proc.communicate(timeout=120)
        if caught:
            assert proc.returncode == 0, err
            assert [r["status"] for r in rows(out)] == ["ok"]
            return
    pytest.fail("the data preparation was not caught in 3 runs")
