"""Issue 24 (pipes and interrupts): ``batchscope run ... | head -1`` and a signal during data preparation.

A reader that closes stdout early (``head``) stops a run as a signal would (the worker killed, finished trials
kept, exit 141 = 128 + SIGPIPE, as a shell reports a command killed by it), with a message that says so
instead of blaming a path; a reading verb cut short by ``head`` exits quietly. A signal while the data set is
prepared removes the partial copy (it was 700 MB).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests import ROOT
from tests.faults.helpers import command, env_for, fake_experiment, gone_within, interruptible, rows, workers_of

#: every test here starts batchscope in a process of its own and signals or kills it: `make test` only
pytestmark = pytest.mark.process

EPIPE_EXIT = 128 + signal.SIGPIPE


def _first_line_then_close(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], str, list[int]]:
    """Start ``batchscope ARGS``, read its first line of stdout, then close the pipe (what ``head -1`` does)."""
    proc = subprocess.Popen(command(*args), cwd=ROOT, env=env_for(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    workers = workers_of(proc.pid)
    proc.stdout.close()
    return proc, first, workers


def test_a_run_whose_reader_goes_away_stops_like_a_signal_and_keeps_its_trials(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 8, 16, 32], repeats=3)
    proc, first, workers = _first_line_then_close(tmp_path, "run", str(exp), "--out", str(out))
    err = proc.stderr.read() if proc.stderr else ""
    proc.wait(timeout=120)
    assert first
    assert proc.returncode == EPIPE_EXIT, (proc.returncode, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "check that the path exists" not in err and "stdout was closed" in err and "--resume" in err, err
    assert gone_within(workers) == []
    assert len(rows(out)) < 12  # it stopped, and what it stored is whole
    assert all(r["status"] == "ok" for r in rows(out))


@pytest.mark.parametrize("verb", ["compare", "recommend", "export"])
def test_a_reading_verb_whose_reader_is_gone_exits_quietly(tmp_path: Path, verb: str) -> None:
    """``batchscope recommend DIR | true``: the reader exits before anything is written to it."""
    exp = fake_experiment(tmp_path, batch_sizes=[4, 8], repeats=2)
    made = subprocess.run(command("run", str(exp), "--out", str(tmp_path / "out")), cwd=ROOT,
                          env=env_for(tmp_path), capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(command(verb, str(tmp_path / "out")), cwd=ROOT, env=env_for(tmp_path),
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode in (0, EPIPE_EXIT), (done.returncode, done.stderr)
    assert done.stderr == "", done.stderr


def _preparing(prepared: Path) -> list[Path]:
    return [p for p in prepared.iterdir() if ".tmp" in p.name] if prepared.exists() else []


CASES = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]


@pytest.mark.parametrize(("sig", "code"), CASES, ids=[s.name for s, _ in CASES])
def test_a_signal_while_the_data_is_prepared_leaves_no_partial_copy(tmp_path: Path, sig: signal.Signals,
                                                                    code: int) -> None:
    """The command is frozen (SIGSTOP) the moment its temporary copy appears, signalled, then let go."""
    out = tmp_path / "out"
    # 4,000 images of 3x64x64: 200 MB to write, long enough to be caught writing it
    exp = fake_experiment(tmp_path, synthetic_shape=[3, 64, 64], synthetic_samples=4000)
    proc = subprocess.Popen(command("run", str(exp), "--out", str(out)), cwd=ROOT, env=env_for(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    prepared = tmp_path / "cache" / "prepared"
    deadline = time.monotonic() + 120
    while not _preparing(prepared) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        assert _preparing(prepared), "the preparation was not caught writing its copy"
        os.kill(proc.pid, sig)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    assert _preparing(prepared) == []
    assert not (out / "results.sqlite").exists()
