"""Issue 13, items 3, 7 and 13: the results store. An unreadable store is refused clearly by every command
that reads it; ``--resume`` refuses an experiment run with other settings, naming what changed; two runs
into one output directory cannot both run.
"""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import pytest

from tests.faults.helpers import assert_refused, cli, fake_experiment, gone_within, rows, start, wait_for, workers_of


def _text_file(out: Path) -> None:
    (out / "results.sqlite").write_text("these are my notes, not a database\n" * 50)


def _truncated(out: Path) -> None:
    path = out / "results.sqlite"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _directory(out: Path) -> None:
    (out / "results.sqlite").unlink()
    (out / "results.sqlite").mkdir()


BREAKS = {"text-file": _text_file, "truncated": _truncated, "directory": _directory}


@pytest.fixture(scope="module")
def good_store(finished_fake_store: Path) -> Path:
    """A finished fake run (two batch sizes, some samples) to copy and break (tests/faults/conftest.py)."""
    return finished_fake_store.parent.parent


@pytest.mark.parametrize("command", ["compare", "export", "run-resume"])
@pytest.mark.parametrize("damage", sorted(BREAKS))
def test_an_unreadable_store_is_refused_without_a_traceback(tmp_path: Path, good_store: Path, command: str,
                                                            damage: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.sqlite").write_bytes((good_store / "out" / "results.sqlite").read_bytes())
    BREAKS[damage](out)
    if command == "run-resume":
        exp = fake_experiment(tmp_path, batch_sizes=[4, 8], repeats=2)
        done = cli(tmp_path, "run", str(exp), "--out", str(out), "--resume")
    else:
        done = cli(tmp_path, command, str(out))
    assert_refused(done, "results.sqlite")
    assert not (out / "export").exists()


@pytest.mark.process
def test_resume_with_changed_settings_is_refused_naming_what_changed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, epochs=2, batch_sizes=[4, 8])
    first = cli(tmp_path, "run", str(exp), "--out", str(out), "--batch-sizes", "4")
    assert first.returncode == 0, first.stderr
    before = rows(out)
    done = cli(tmp_path, "run", str(exp), "--out", str(out), "--resume", "--epochs", "0")
    assert_refused(done, "--resume", "epochs: 2 stored, 0 now")
    assert rows(out) == before  # nothing mixed in


@pytest.mark.process
def test_resume_with_the_same_settings_still_finishes_the_sweep(tmp_path: Path) -> None:
    """The refusal above must not catch a plain resume: more batch sizes or repeats of the same settings."""
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, epochs=1, batch_sizes=[4, 8])
    assert cli(tmp_path, "run", str(exp), "--out", str(out), "--batch-sizes", "4").returncode == 0
    done = cli(tmp_path, "run", str(exp), "--out", str(out), "--resume", "--repeats", "2")
    assert done.returncode == 0, done.stderr
    assert sorted((r["batch_size"], r["repeat"]) for r in rows(out)) == [(4, 0), (4, 1), (8, 0), (8, 1)]


@pytest.mark.process
def test_a_second_run_into_the_same_directory_is_refused_while_the_first_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 64], timeout_s=600)
    first = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="hang_large")
    try:
        workers = wait_for(lambda: (len(rows(out)) >= 1 and workers_of(first.pid)) or first.poll() is not None,
                           120, "the first run's hanging trial")
        assert first.poll() is None, first.communicate()
        second = cli(tmp_path, "run", str(exp), "--out", str(out), "--resume", "--batch-sizes", "4")
        assert_refused(second, "in use by another batchscope command", f"pid {first.pid}")
        assert [r["batch_size"] for r in rows(out)] == [4]  # the second ran nothing
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert gone_within(workers) == []


@pytest.mark.process
def test_the_lock_dies_with_its_holder(tmp_path: Path) -> None:
    """A run killed outright leaves no stale lock: the next run into the directory goes ahead."""
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 64], timeout_s=600)
    first = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="hang_large")
    workers = wait_for(lambda: (len(rows(out)) >= 1 and workers_of(first.pid)) or first.poll() is not None,
                       120, "the first run's hanging trial")
    first.kill()
    first.communicate(timeout=60)
    assert gone_within(workers) == []
    again = cli(tmp_path, "run", str(exp), "--out", str(out), "--resume", "--batch-sizes", "4")
    assert again.returncode == 0, again.stderr
    conn = sqlite3.connect(out / "results.sqlite")
    try:
        assert conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 1
    finally:
        conn.close()
