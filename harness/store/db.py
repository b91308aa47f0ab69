"""The results store: one SQLite file per output directory, one transaction per trial.

Tables:

* ``runs``: one row per invocation (experiment, resolved spec, command line, environment).
* ``trials``: one row per trial, keyed by the hash of its resolved spec. Column names carry units.
* ``step_times``: every step's time (ms) with its phase.
* ``samples``: the sampler's raw samples, phase-tagged.
* ``maxbatch``: one row per max-batch search (its probes are ``trials`` rows with purpose ``probe``).
* ``curve``: one row per evaluation of a trial (its learning curve), columns from :class:`~harness.records.CurvePoint`.
* ``gradient_noise``: one row per evaluation point of a trial that measured the gradient noise (experiment key
  ``gradient_noise``), columns from :class:`~harness.noise.NoiseRecord`; a store made before has no such table.

A trial's rows are written in a single transaction the moment it finishes, so a killed sweep loses
at most the trial in flight, and ``--resume`` skips every trial whose hash is stored. The report
reads only this file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.diskfull import KEPT_RESUME, disk_full, is_disk_full
from harness.errors import BatchscopeError, OutputError, StoreError
from harness.monitor.fields import SAMPLE_COLUMNS
from harness.noise import groups_from_data
from harness.records import UNFINISHED_STATUSES, MaxBatchResult, TrialOutcome
from harness.store.maxbatch_row import maxbatch_record, maxbatch_row
from harness.store.schema import (
    _SCHEMA,
    BUSY_TIMEOUT_S,
    CURVE_COLUMN_NAMES,
    CURVE_COLUMNS,
    MAXBATCH_COLUMN_NAMES,
    MAXBATCH_COLUMNS,
    NOISE_COLUMN_NAMES,
    NOISE_COLUMNS,
    RERUN_ON_RESUME,
    SCHEMA_VERSION,
    STORE_NAME,
    TRIAL_COLUMN_NAMES,
    TRIAL_COLUMNS,
    outcome_row,
    record_values,
)
from harness.store.trial_record import RunRecord, TrialRecord


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def make_out_dir(out_dir: Path) -> None:
    """Create the output directory, or refuse (exit 2) with the path and the reason."""
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"{out_dir}: exists and is not a directory; give the output option a directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{out_dir}: cannot create the output directory ({e.strerror or e}); give a "
                          "writable path") from e


def writable_dir(directory: Path, hint: str) -> None:
    """Create ``directory`` and check that a file can be made in it, or refuse (OutputError, exit 2) with ``hint``:
    checked before a command draws or converts anything, so a read-only place is said at once, in plain words."""
    if directory.exists() and not directory.is_dir():
        raise OutputError(f"{directory}: exists and is not a directory; {hint}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise OutputError(f"{directory}: not writable ({e.strerror or e}); {hint}") from e


def _refuse_non_file(path: Path, out_dir: str | Path, create: bool) -> None:
    """Refuse, before SQLite opens it, whatever is not a regular file where the store goes: SQLite would take a
    directory for a damaged store, block for ever opening a FIFO, and create a new store at a dangling link."""
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a results store; move it away or give another "
                         "output directory")
    if path.is_symlink() and not path.exists():
        raise StoreError(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist; fix or remove "
                         "the link")
    if path.exists() and not path.is_file():
        kind = "a FIFO" if path.is_fifo() else "a socket" if path.is_socket() else "a device"
        raise StoreError(f"{path} is {kind}, not a results store (a regular file); move it away or give "
                         "another output directory")
    if Path(out_dir).is_file() and Path(out_dir).name == STORE_NAME:
        raise StoreError(f"{out_dir} is the store itself; give the directory that holds it: {Path(out_dir).parent}")
    if not path.exists() and not create:
        raise StoreError(f"{out_dir}: no results store ({STORE_NAME}) here; "
                         "run `batchscope run EXPERIMENT --out DIR` first")


def _first_read(conn: sqlite3.Connection) -> sqlite3.Connection:
    """``conn`` once it has read the schema (SQLite opens lazily: a bad file shows here), else closed and raised."""
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A connection that can only read (``mode=ro``). A store left with an unfinished transaction by a command
    killed mid-write (a hot ``-journal`` beside it) needs that transaction rolled back first, which is a write:
    done with a short writable open where the file and its directory allow it, refused with what to do where
    they do not."""
    uri = f"{path.resolve().as_uri()}?mode=ro"  # percent-encoded: any character a path may hold
    try:
        return _first_read(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S))
    except sqlite3.Error as e:
        if getattr(e, "sqlite_errorname", "") != "SQLITE_READONLY_ROLLBACK":
            raise _open_error(path, e, readonly=True) from e
    try:  # the roll-back of a killed writer's transaction, as any SQLite reader with write access does it
        _first_read(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)).close()
    except sqlite3.Error as e:
        raise StoreError(f"{path}: holds an unfinished write ({path.name}-journal beside it, left by a command that "
                         "was killed while writing) that must be rolled back before it can be read, and this "
                         f"directory is read-only ({e}); copy the directory somewhere writable and read the copy, "
                         "or run the command where it can write") from e
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)


def _open_error(path: Path, e: sqlite3.Error, readonly: bool) -> BatchscopeError:
    """The message for an open that SQLite refused, by its cause."""
    name = getattr(e, "sqlite_errorname", "")
    if is_disk_full(e):  # issue 32: it was called a damaged store
        return disk_full(path, "the results store", kept="nothing was stored: free some space and run the "
                                                         "command again")
    if name.startswith("SQLITE_READONLY") and not readonly:
        return OutputError(f"{path}: is read-only (the file or its directory: {e}); this command writes into the "
                           "store: give another --out directory, or make it writable. compare, recommend, "
                           "report -o and export -o read a read-only store as it is")
    if name.startswith("SQLITE_BUSY"):
        return StoreError(f"{path}: locked by another process for over {BUSY_TIMEOUT_S:g} s ({e}); wait for the "
                          "command that writes it to finish, then try again")
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_AUTH", "SQLITE_PERM")):
        return StoreError(f"{path}: cannot be opened ({e}); check that it exists and that you may read it "
                          "(its permissions and its directory's)")
    return StoreError(f"{path}: cannot be read as a results store ({e}); it is truncated, damaged or not a "
                      "batchscope store: move it away and re-run into this directory, or give another one")


def _remove_unmade(path: Path, made: bool) -> None:
    """A store this open began to make and could not finish (a full disk): removed with its journal, so that no
    empty ``results.sqlite`` is left for the next command to take for a damaged store (issue 32)."""
    if not made:
        return
    for p in (path, path.with_name(path.name + "-journal")):
        with contextlib.suppress(OSError):
            p.unlink()


def store_path(out_dir: str | Path) -> Path:
    """Where the store of an output directory lives."""
    return Path(out_dir) / STORE_NAME


class Store:
    """The SQLite results store of one output directory."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        #: a read-only open: the columns each table has (the migration that would add the rest was not run)
        self._columns: dict[str, set[str]] | None = None

    @classmethod
    def open(cls, out_dir: str | Path, create: bool = True, readonly: bool = False) -> Store:
        """Open (and with ``create``, make) the store in ``out_dir``; ``readonly`` for the commands that only read.

        A read-only open writes nothing, not even the columns added since the store was made (its rows read as
        NULL there), so a store on a read-only file, directory or medium is read as it is. Anything that is not
        a readable store (a text file, a truncated file, a directory, FIFO or dangling link in its place, an
        output path that is a file or cannot be created) is refused with the path and what to do.
        """
        path = store_path(out_dir)
        _refuse_non_file(path, out_dir, create and not readonly)
        made = not readonly and not path.exists()  # a store this open makes: removed again if it cannot be made
        if readonly:
            conn = _connect_readonly(path)
        else:
            make_out_dir(Path(out_dir))
            try:
                conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
            except sqlite3.Error as e:
                raise StoreError(f"{path}: cannot be opened ({e}); check the path and its permissions") from e
        try:
            conn.row_factory = sqlite3.Row
            store = cls(path, conn)
            if readonly:
                store._check_schema()
            else:
                conn.execute("PRAGMA synchronous=FULL")
                store._init_schema(create)
            store._check_integrity()
        except sqlite3.Error as e:
            conn.close()
            _remove_unmade(path, made)
            raise _open_error(path, e, readonly) from e
        except BaseException:
            conn.close()
            _remove_unmade(path, made)
            raise
        return store

    def _check_integrity(self) -> None:
        """``PRAGMA quick_check`` (reads every page once, milliseconds for a sweep's store): a truncated store
        is refused when opened, not half-way through a command that already printed results."""
        problems = [r[0] for r in self.conn.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError("; ".join(problems))

    def _schema_version(self, create: bool) -> set[str]:
        """The store's tables, once its schema version is known to be the one this batchscope reads."""
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" in tables:
            row = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path}: made by a newer batchscope (schema {version}, this one reads "
                                 f"{SCHEMA_VERSION}); upgrade batchscope to read it")
            if version < SCHEMA_VERSION:
                raise StoreError(f"{self.path}: made by an older batchscope (schema {version}, this one reads "
                                 f"{SCHEMA_VERSION}); re-run the experiment into a new --out directory")
        elif tables or not create:
            what = "an empty file" if not tables and self.path.stat().st_size == 0 else "no schema version"
            raise StoreError(f"{self.path}: not a batchscope results store ({what}); move it away, or point at "
                             "the --out directory of a `batchscope run`")
        return tables

    def _check_schema(self) -> None:
        """A read-only open: the schema version checked, the columns each table has noted (nothing added)."""
        tables = self._schema_version(create=False)
        missing = {"runs", "trials"} - tables
        if missing:
            raise StoreError(f"{self.path}: not a batchscope results store (no {', '.join(sorted(missing))} table)")
        self._columns = {t: {r[1] for r in self.conn.execute(f"PRAGMA table_info({t})")} for t in tables}

    def _init_schema(self, create: bool) -> None:
        self._schema_version(create)
        with self.conn:
            self.conn.executescript(_SCHEMA)
            self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            # columns added since a store was made are added to it (nullable, so old rows stay valid)
            for table, columns in (("trials", TRIAL_COLUMNS), ("samples", SAMPLE_COLUMNS),
                                   ("maxbatch", MAXBATCH_COLUMNS), ("curve", CURVE_COLUMNS),
                                   ("gradient_noise", NOISE_COLUMNS)):
                have = {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}
                for name, typ in columns:
                    if name not in have:
                        self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {typ.split()[0]}")

    def has_table(self, table: str) -> bool:
        """Whether the store holds ``table`` (a read-only open of an older store may lack a newer one)."""
        if self._columns is not None:
            return table in self._columns
        return self.conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() \
            is not None

    def _complete(self, table: str, names: tuple[str, ...], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows of an older store read without its migration: the columns it lacks read as NULL, as they would
        after the migration a writing open does."""
        have = self._columns.get(table) if self._columns is not None else None
        if have is None:
            return rows
        absent = [n for n in names if n not in have]
        return [r | dict.fromkeys(absent) for r in rows] if absent else rows

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    @contextmanager
    def _writing(self, what: str, kept: str = KEPT_RESUME) -> Iterator[None]:
        """A failed write (a full disk, the directory removed or made read-only mid-run) is an OutputError
        with the path and the reason (exit 2); every transaction committed before it stays in the file."""
        try:
            yield
        # OperationalError is what the file system's refusals become (disk I/O error, database or disk is
        # full, readonly database, unable to open); a ProgrammingError is a bug and stays one
        except sqlite3.OperationalError as e:
            if is_disk_full(e):
                raise disk_full(self.path, what, kept=kept) from e
            raise OutputError(f"{self.path}: cannot write {what} ({e}); check that the directory still exists, "
                              "is writable and has space; the trials stored before are kept") from e

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def begin_run(self, experiment: str, spec: Mapping[str, Any], command: str, env: Mapping[str, Any]) -> int:
        """Record one invocation; returns its run id."""
        with self._writing("the run's record"), self.conn:
            cur = self.conn.execute(
                "INSERT INTO runs (experiment, spec_json, command, env_json, started_at) VALUES (?,?,?,?,?)",
                (experiment, json.dumps(spec, default=str), command, json.dumps(env, default=str), _now()))
        return int(cur.lastrowid or 0)

    def finished_hashes(self) -> set[str]:
        """Hashes of every trial ``--resume`` keeps: ``ok``, ``oom``, ``diverged``, ``skipped``, ``timeout`` and
        ``crashed`` (outcomes of the settings: the same settings give them again). A ``lost`` trial, whose node
        died, and an ``error`` (an exception in the worker: often a missing package or a driver, fixed since; Ray
        Tune's resume-errored) are run again (issue 29)."""
        again = (*UNFINISHED_STATUSES, *RERUN_ON_RESUME)
        marks = ", ".join("?" * len(again))
        return {r[0] for r in self.conn.execute(f"SELECT trial_hash FROM trials WHERE status NOT IN ({marks})",
                                                again)}

    def drop_trials(self, hashes: Iterable[str]) -> int:
        """Delete these trials and everything stored with them (a trial superseded by the same trial on another
        device: :func:`harness.run.sweep.run_sweep` under ``--resume``); returns how many were there."""
        hashes = list(hashes)
        marks = ", ".join("?" * len(hashes))
        if not hashes:
            return 0
        with self._writing("superseded trials"), self.conn:
            for table in ("step_times", "samples", "curve", "gradient_noise"):
                self.conn.execute(f"DELETE FROM {table} WHERE trial_hash IN ({marks})", hashes)
            cur = self.conn.execute(f"DELETE FROM trials WHERE trial_hash IN ({marks})", hashes)
        return int(cur.rowcount or 0)

    def write_trial(self, outcome: TrialOutcome, run_id: int, env: Mapping[str, Any]) -> None:
        """Write one trial, its step times, its samples and its curve in one transaction (all or nothing)."""
        row = outcome_row(outcome, run_id, env)
        h = row["trial_hash"]
        steps = outcome.phase_steps
        bounds = [("warmup", steps.get("warmup", 0)), ("timed", steps.get("timed", 0)), ("train", 10**12)]

        def phase_of(i: int) -> str:
            acc = 0
            for name, n in bounds:
                acc += n
                if i < acc:
                    return name
            return "train"

        samples = list(outcome.monitor.samples)
        sample_names = [n for n, _ in SAMPLE_COLUMNS]
        with self._writing(f"trial {h}"), self.conn:
            self.conn.execute("DELETE FROM step_times WHERE trial_hash=?", (h,))
            self.conn.execute("DELETE FROM samples WHERE trial_hash=?", (h,))
            self.conn.execute("DELETE FROM curve WHERE trial_hash=?", (h,))
            self.conn.execute("DELETE FROM gradient_noise WHERE trial_hash=?", (h,))
            cols = ", ".join(row)
            self.conn.execute(f"INSERT OR REPLACE INTO trials ({cols}) VALUES ({', '.join('?' * len(row))})",
                              tuple(row.values()))
            self.conn.executemany("INSERT INTO step_times VALUES (?,?,?,?)",
                                  ((h, i, phase_of(i), t) for i, t in enumerate(outcome.step_times_ms)))
            if samples:
                self.conn.executemany(
                    f"INSERT INTO samples ({', '.join(sample_names)}) VALUES ({', '.join('?' * len(sample_names))})",
                    ([h if n == "trial_hash" else s.get(n) for n in sample_names] for s in samples))
            self.conn.executemany(
                f"INSERT INTO curve ({', '.join(CURVE_COLUMN_NAMES)}) VALUES ({', '.join('?' * len(CURVE_COLUMNS))})",
                ((h, *(p.to_dict()[n] for n in CURVE_COLUMN_NAMES[1:])) for p in outcome.curve))
            self.conn.executemany(
                f"INSERT INTO gradient_noise ({', '.join(NOISE_COLUMN_NAMES)}) "
                f"VALUES ({', '.join('?' * len(NOISE_COLUMNS))})",
                ((h, *(record_values(r)[n] for n in NOISE_COLUMN_NAMES[1:])) for r in outcome.gradient_noise))

    def trials(self, where: str = "", params: Iterable[Any] = ()) -> list[TrialRecord]:
        """The stored trials as records, in store order (``where`` is an SQL condition on trials' columns). A record
        still reads as its row (``record["status"]``)."""
        return [TrialRecord.from_row(row) for row in self._trial_rows(where, params)]

    def _trial_rows(self, where: str, params: Iterable[Any]) -> list[dict[str, Any]]:
        sql = "SELECT * FROM trials" + (f" WHERE {where}" if where else "") + " ORDER BY rowid"
        return self._complete("trials", TRIAL_COLUMN_NAMES, [dict(r) for r in self.conn.execute(sql, tuple(params))])

    def curves(self, trial_hash: str | None = None) -> list[dict[str, Any]]:
        """Curve rows as dicts (of one trial, or of all), by trial and point."""
        if not self.has_table("curve"):  # a read-only open of a store made before curves
            return []
        where, params = ("WHERE trial_hash=?", (trial_hash,)) if trial_hash else ("", ())
        return [dict(r) for r in self.conn.execute(f"SELECT * FROM curve {where} ORDER BY trial_hash, point", params)]

    def gradient_noise(self, trial_hash: str | None = None) -> list[dict[str, Any]]:
        """Gradient-noise rows as dicts (of one trial, or of all), by trial and point; none in a store made before
        the measurement existed (read-only: the table is not added). Each row's ``groups_json`` column is also
        given parsed, as ``groups`` (``NoiseRecord.groups``: what :mod:`harness.noise` reads; None where the column
        is NULL or cannot be read), the one place it is parsed."""
        if not self.has_table("gradient_noise"):
            return []
        where, params = ("WHERE trial_hash=?", (trial_hash,)) if trial_hash else ("", ())
        return [_noise_row(dict(r)) for r in self.conn.execute(
            f"SELECT * FROM gradient_noise {where} ORDER BY trial_hash, point", params)]

    def runs(self) -> list[RunRecord]:
        """The runs as records (their JSON parsed; each still reads as its row, ``run["command"]``)."""
        return [RunRecord.from_row(dict(r)) for r in self.conn.execute("SELECT * FROM runs ORDER BY run_id")]

    def write_maxbatch(self, result: MaxBatchResult) -> int:
        """Store one max-batch answer (flattened to its columns here: :func:`harness.store.maxbatch_row.maxbatch_row`);
        returns its ``result_id``."""
        row = maxbatch_row(result)
        unknown = sorted(set(row) - set(MAXBATCH_COLUMN_NAMES))
        if unknown:
            raise StoreError(f"maxbatch row has unknown column(s) {unknown}; known: {MAXBATCH_COLUMN_NAMES}")
        cols = [c for c in MAXBATCH_COLUMN_NAMES if c in row and c != "result_id"]
        with self._writing("the max-batch result", "the results stored before are kept: free some space and run "
                                                   "the command again"), self.conn:
            cur = self.conn.execute(f"INSERT INTO maxbatch ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                    tuple(row[c] for c in cols))
        return int(cur.lastrowid or 0)

    def maxbatch_answers(self, where: str = "", params: Iterable[Any] = ()) -> list[MaxBatchResult]:
        """Max-batch answers as records, oldest first (``where`` is an SQL condition on their columns)."""
        return [maxbatch_record(row) for row in self.maxbatch_results(where, params)]

    def maxbatch_results(self, where: str = "", params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """Max-batch rows as dicts, oldest first (``where`` is an SQL condition on its columns)."""
        if not self.has_table("maxbatch"):
            return []
        sql = "SELECT * FROM maxbatch" + (f" WHERE {where}" if where else "") + " ORDER BY result_id"
        return self._complete("maxbatch", MAXBATCH_COLUMN_NAMES,
                              [dict(r) for r in self.conn.execute(sql, tuple(params))])

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A transaction for callers that add tables of their own (e.g. max-batch results)."""
        with self.conn:
            yield self.conn


def _noise_row(row: dict[str, Any]) -> dict[str, Any]:
    """A gradient-noise row with its ``groups_json`` column parsed into ``groups`` (None where NULL or unreadable: the
    row's own means stand, :func:`harness.noise._units`)."""
    try:
        text = row.get("groups_json")
        groups = None if text is None else groups_from_data(json.loads(text))
    except (TypeError, ValueError):
        groups = None
    return {**row, "groups": groups}
