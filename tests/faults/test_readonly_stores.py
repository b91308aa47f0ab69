"""Issue 24 (read-only stores) and issue 25 item 5 (``Store.open(readonly=True)``): every reading verb
(compare, recommend, report, export) x every kind of damaged or unusual store.

A store shared read-only is normal (a colleague's results on a read-only mount, an archive): the reading
verbs open it read-only and work. What is not a store, or cannot be read, is refused with the path and what
to do (exit 2), never a traceback, never a hang. Permissions are made to apply even under root
(``permissions_apply``).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.helpers import assert_refused, cli, fake_experiment, gone_within, rows, start, wait_for, workers_of

STORE = "results.sqlite"
#: each verb, with its output (if any) sent somewhere writable, and a word its success prints
VERBS: dict[str, tuple[list[str], str]] = {
    "compare": ([], "fake"),
    "recommend": ([], "experiment 'faults'"),
    "report": (["-o", "{elsewhere}/r/report.pdf"], "report: "),
    "export": (["-o", "{elsewhere}/export"], "trials.csv"),
}


@pytest.fixture(scope="module")
def good_store(finished_fake_store: Path) -> Path:
    """A finished fake run (two batch sizes, two repeats) to copy and damage (tests/faults/conftest.py)."""
    assert finished_fake_store.name == STORE
    return finished_fake_store


def _read_only(path: Path) -> None:
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH | (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
                                                              if path.is_dir() else 0))


def _sql(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    try:
        for sql in statements:
            conn.execute(sql)
        conn.commit()
    finally:
        conn.close()


def _killed_mid_write(path: Path, wal: bool = False) -> None:
    """A process that dies (``os._exit``) inside a write transaction, or after a commit in WAL mode, leaving a
    hot ``-journal`` (or ``-wal`` and ``-shm``) beside the store, as a command SIGKILLed while writing does."""
    script = (f"import os, sqlite3\nc = sqlite3.connect({str(path)!r})\n"
              + ("c.execute('PRAGMA journal_mode=WAL')\nc.execute(\"INSERT INTO meta VALUES ('k', 'v')\")\n"
                 "c.commit()\n" if wal else
                 "c.execute('PRAGMA cache_size=1')\nc.execute('BEGIN IMMEDIATE')\n"
                 "for i in range(200):\n"
                 "    c.execute('INSERT INTO step_times VALUES (?,?,?,?)', ('h', i, 'x' * 500, 1))\n"
                 "c.execute('DELETE FROM trials')\n")
              + "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", script], check=True)
    assert (path.parent / (STORE + ("-wal" if wal else "-journal"))).exists()


# ---------------------------------------------------------------- stores every reading verb must read
def _ro_file(out: Path) -> None:
    _read_only(out / STORE)


def _ro_dir(out: Path) -> None:
    _read_only(out / STORE)
    _read_only(out)


def _ro_old_store(out: Path) -> None:
    """A store made before some columns and the maxbatch table existed, read-only: not migrated, still read."""
    _sql(out / STORE, "ALTER TABLE trials DROP COLUMN compute_dtype", "ALTER TABLE trials DROP COLUMN loss_scale",
         "ALTER TABLE trials DROP COLUMN variant", "DROP TABLE maxbatch")
    _ro_dir(out)


def _ro_wal_leftovers(out: Path) -> None:
    _killed_mid_write(out / STORE, wal=True)
    _ro_dir(out)


def _hot_journal(out: Path) -> None:
    _killed_mid_write(out / STORE)


def _symlink(out: Path) -> None:
    real = out.parent / "elsewhere.sqlite"
    (out / STORE).rename(real)
    (out / STORE).symlink_to(real)


READABLE: dict[str, Callable[[Path], None]] = {
    "read-only-file": _ro_file, "read-only-dir": _ro_dir, "read-only-older-store": _ro_old_store,
    "read-only-dir-wal-leftovers": _ro_wal_leftovers, "hot-journal": _hot_journal, "symlink": _symlink,
}


# ---------------------------------------------------------------- stores every reading verb must refuse
def _empty(out: Path) -> None:
    (out / STORE).write_bytes(b"")


def _newer(out: Path) -> None:
    _sql(out / STORE, "UPDATE meta SET value = '99' WHERE key = 'schema_version'")


def _dangling(out: Path) -> None:
    (out / STORE).unlink()
    (out / STORE).symlink_to(out / "gone.sqlite")


def _fifo(out: Path) -> None:
    (out / STORE).unlink()
    os.mkfifo(out / STORE)


def _unreadable(out: Path) -> None:
    (out / STORE).chmod(0)


def _hot_journal_ro_dir(out: Path) -> None:
    _killed_mid_write(out / STORE)
    _ro_dir(out)


def _truncated(out: Path) -> None:
    data = (out / STORE).read_bytes()
    (out / STORE).write_bytes(data[: len(data) // 2])


def _text(out: Path) -> None:
    (out / STORE).write_text("these are my notes, not a database\n" * 50)


REFUSED: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty-file": (_empty, "empty file"), "newer-schema": (_newer, "newer batchscope"),
    "dangling-symlink": (_dangling, "does not exist"), "fifo": (_fifo, "FIFO"),
    "unreadable": (_unreadable, "may read it"), "hot-journal-read-only-dir": (_hot_journal_ro_dir, "unfinished write"),
    "truncated": (_truncated, "truncated"), "text-file": (_text, "not a"),
}


#: the kinds made by a writer that dies in a process of its own (:func:`_killed_mid_write`): `make test` only
_WRITER_DIES = {"hot-journal", "read-only-dir-wal-leftovers", "hot-journal-read-only-dir"}


def _kinds(table: dict[str, Any]) -> list[Any]:
    return [pytest.param(k, marks=pytest.mark.process) if k in _WRITER_DIES else k for k in sorted(table)]


@pytest.fixture()
def store_copy(tmp_path: Path, good_store: Path) -> Iterator[Path]:
    """A fresh copy of the good store in ``tmp_path/out``; permissions restored afterwards for the clean-up."""
    out = tmp_path / "out"
    out.mkdir()
    shutil.copyfile(good_store, out / STORE)
    yield out
    for path in (out, *out.iterdir()):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def _verb(tmp_path: Path, verb: str, out: Path) -> subprocess.CompletedProcess[str]:
    """The verb called in the test process (tests/helpers/inprocess.py), permissions applying even to root."""
    extra, _ = VERBS[verb]
    elsewhere = tmp_path / "elsewhere"
    return cli(tmp_path, verb, str(out), *(a.format(elsewhere=elsewhere) for a in extra), as_user=True)


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("kind", _kinds(READABLE))
def test_a_reading_verb_reads_an_unusual_store(tmp_path: Path, store_copy: Path, verb: str, kind: str) -> None:
    READABLE[kind](store_copy)
    done = _verb(tmp_path, verb, store_copy)
    assert done.returncode == 0 and "Traceback" not in done.stderr, (done.stdout, done.stderr)
    assert VERBS[verb][1] in done.stdout, done.stdout
    if kind.startswith("read-only"):  # nothing written into a read-only store or beside it
        assert sorted(p.name for p in store_copy.iterdir() if "-wal" not in p.name and "-shm" not in p.name) == \
            [STORE]


@pytest.mark.timeout(60)  # a FIFO must not block the open: the timeout fails it
@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("kind", _kinds(REFUSED))
def test_a_reading_verb_refuses_what_is_not_a_readable_store(tmp_path: Path, store_copy: Path, verb: str,
                                                             kind: str) -> None:
    damage, words = REFUSED[kind]
    damage(store_copy)
    done = _verb(tmp_path, verb, store_copy)
    assert_refused(done, STORE, words)
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("verb", ["report", "export"])
def test_a_verb_that_writes_beside_a_read_only_store_says_the_directory_is_not_writable(
        tmp_path: Path, store_copy: Path, verb: str) -> None:
    _ro_dir(store_copy)
    done = cli(tmp_path, verb, str(store_copy), as_user=True)
    assert_refused(done, str(store_copy), "not writable", "-o")


@pytest.mark.parametrize("command", ["run-resume", "maxbatch"])
def test_a_writing_command_on_a_read_only_store_says_read_only_not_damaged(tmp_path: Path, store_copy: Path,
                                                                           command: str) -> None:
    _ro_file(store_copy)
    if command == "run-resume":
        exp = fake_experiment(tmp_path, batch_sizes=[4, 8, 16], repeats=2)
        done = cli(tmp_path, "run", str(exp), "--out", str(store_copy), "--resume", as_user=True)
    else:
        done = cli(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
                  "--memory-limit-mib", "4096", "--out", str(store_copy), as_user=True)
    assert_refused(done, STORE, "read-only")
    assert "damaged" not in done.stderr


@pytest.mark.process
def test_a_store_locked_by_a_writers_transaction_is_read_once_it_commits(tmp_path: Path, store_copy: Path) -> None:
    """A reader waits for a transaction in progress (a trial being stored) instead of failing."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        f"c = sqlite3.connect({str(store_copy / STORE)!r}, isolation_level=None)\n"
        "c.execute('BEGIN EXCLUSIVE')\nprint('locked', flush=True)\ntime.sleep(3)\nc.execute('COMMIT')\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        done = _verb(tmp_path, "compare", store_copy)
        assert done.returncode == 0, done.stderr
        assert time.monotonic() - t0 > 1.0  # it waited for the lock (it could not have read under it)
    finally:
        holder.wait(timeout=60)


@pytest.mark.process
def test_every_reading_verb_reads_a_store_while_a_sweep_writes_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 64], timeout_s=600)
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="hang_large")
    try:
        workers = wait_for(lambda: (len(rows(out)) >= 1 and workers_of(proc.pid)) or proc.poll() is not None,
                           120, "the first trial stored and the second running")
        assert proc.poll() is None, proc.communicate()
        for verb in sorted(VERBS):
            done = _verb(tmp_path, verb, out)
            assert done.returncode == 0 and VERBS[verb][1] in done.stdout, (verb, done.stdout, done.stderr)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert gone_within(workers) == []


def test_the_report_command_checks_the_place_the_builder_writes_to() -> None:
    """``report`` checks DIR/report before it imports the builder (matplotlib): both must name one place."""
    from harness.cli.report import DEFAULT_REPORT
    from report.document.build import default_output

    assert Path("d") / DEFAULT_REPORT == default_output(Path("d"))


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_store_in_a_directory_with_odd_characters_is_read(tmp_path: Path, good_store: Path, verb: str) -> None:
    """The read-only open goes through a file: URI; a path with spaces, '?', '#' and '%' must survive it."""
    out = tmp_path / "my results ?#%20 é"
    out.mkdir()
    shutil.copyfile(good_store, out / STORE)
    _read_only(out / STORE)
    done = _verb(tmp_path, verb, out)
    assert done.returncode == 0 and VERBS[verb][1] in done.stdout, (done.stdout, done.stderr)


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_the_store_file_given_for_its_directory_is_refused_with_the_fix(tmp_path: Path, store_copy: Path,
                                                                        verb: str) -> None:
    done = cli(tmp_path, verb, str(store_copy / STORE))
    assert_refused(done, "is the store itself", str(store_copy))


def test_a_store_locked_for_longer_than_the_wait_is_refused_saying_so(store_copy: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction held for ever (a sqlite3 shell left in BEGIN EXCLUSIVE): the reader gives up with why."""
    from harness.errors import StoreError
    from harness.store import db

    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.5)
    holder = sqlite3.connect(store_copy / STORE, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked by another process"):
            db.Store.open(store_copy, create=False, readonly=True)
    finally:
        holder.execute("COMMIT")
        holder.close()
