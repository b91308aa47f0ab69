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
import dataclasses
import datetime as dt
import json
import os
import sqlite3
import tempfile
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.diskfull import KEPT_RESUME, disk_full, is_disk_full
from harness.errors import BatchscopeError, OutputError, StoreError
from harness.flops import mfu
from harness.monitor.fields import SAMPLE_COLUMNS
from harness.monitor.fields import TRIAL_COLUMNS as SAMPLER_TRIAL_COLUMNS
from harness.noise import NoiseRecord
from harness.records import UNFINISHED_STATUSES, CurvePoint, Placement, TrialOutcome, WorkerMetrics

STORE_NAME = "results.sqlite"
#: how long an open waits for another process's transaction (a sweep commits one trial at a time, in milliseconds)
BUSY_TIMEOUT_S = 30.0
#: 2: whole-training throughput (step_samples_per_s, e2e_samples_per_s replace samples_per_s and
#: train_samples_per_s, whose meaning changed), drift, denormals, FLOPs; peak GPU memory columns say peak
SCHEMA_VERSION = 2

def sql_type(hint: Any) -> str:
    """The SQLite column type of a record field's type: ``X | None`` is a nullable X; bool is INTEGER (0/1)."""
    args = [hint]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1 and typing.get_origin(args[0]) is typing.Literal:
        args = list({type(v) for v in typing.get_args(args[0])})
    if len(args) == 1 and args[0] in _SQL_TYPES:
        return _SQL_TYPES[args[0]]
    raise TypeError(f"no SQLite column type for a field of type {hint!r}; give the field a plain int, float, bool "
                    "or str type (or X | None)")


_SQL_TYPES: dict[Any, str] = {bool: "INTEGER", int: "INTEGER", float: "REAL", str: "TEXT"}


def record_columns(cls: type) -> tuple[tuple[str, str], ...]:
    """(name, SQL type) of each field of the dataclass ``cls``, in field order."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, sql_type(hints[f.name])) for f in dataclasses.fields(cls))


#: what the worker measured: one trials column per :class:`~harness.records.WorkerMetrics` field, named and typed
#: by the field (a new field is a new column, added to older stores on open). Throughput over every post-warm-up
#: step (harness/run/timing.py): step = batch / median step time (forward, backward, update); e2e = samples / wall
#: time of those steps, batch preparation included. NULL where the worker sent no result.
METRIC_COLUMNS: tuple[tuple[str, str], ...] = record_columns(WorkerMetrics)

#: where a trial ran (issue 23): one trials column per :class:`~harness.records.Placement` field (host, node_id,
#: device_index, concurrent_n, attempt); NULL in rows stored before
PLACEMENT_COLUMNS: tuple[tuple[str, str], ...] = record_columns(Placement)

#: trials columns: (name, SQL type). Units are in the names; *_json columns hold JSON text. The trial's identity
#: and settings (from its TrialSpec) and how it ended come first, then the worker's measurements, then the
#: sampler's; a store made before a column existed gains it, empty, when opened.
TRIAL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trial_hash", "TEXT PRIMARY KEY"), ("run_id", "INTEGER"), ("experiment", "TEXT"), ("purpose", "TEXT"),
    ("framework", "TEXT"), ("model", "TEXT"), ("dataset", "TEXT"), ("batch_size", "INTEGER"),
    ("repeat", "INTEGER"), ("seed", "INTEGER"), ("status", "TEXT"), ("reason", "TEXT"),
    ("denormals", "TEXT"),  # asked for; what the CPU did is the worker's cpu_denormals (flush | keep | unknown)
    ("mfu_pct", "REAL"), ("rss_peak_mib", "REAL"),  # the higher of the worker's maxrss and the sampler's peak
    ("epochs", "INTEGER"), ("lr", "REAL"), ("optimizer", "TEXT"), ("elapsed_s", "REAL"),
    ("param_count", "INTEGER"), ("device", "TEXT"), ("precision", "TEXT"),
    # issue 29: the math mode asked for (ieee | tf32 | framework-default; what ran is the worker's math_mode_seen), and
    # the dense peak mfu_pct divides by, or why no MFU is published (harness.flops.mfu). NULL in rows stored before.
    ("math_mode", "TEXT"), ("mfu_peak_tflops", "REAL"), ("mfu_note", "TEXT"),
    *METRIC_COLUMNS,
    # sampler aggregates, from the field table (harness/monitor/fields.py): means over the timed phase, except
    # where the name says peak; NULL where not measured
    *(c for c in SAMPLER_TRIAL_COLUMNS if c[0] != "rss_peak_mib"), ("j_per_sample", "REAL"),
    ("steady_j_per_sample", "REAL"),  # the steady phase's energy per sample, after the final evaluation (issue 29)
    ("sample_interval_ms", "REAL"), ("samples_n", "INTEGER"),
    ("timed_samples_n", "INTEGER"),
    ("exit_code", "INTEGER"), ("stderr_tail", "TEXT"), ("traceback", "TEXT"),
    ("versions_json", "TEXT"), ("env_json", "TEXT"), ("device_json", "TEXT"), ("spec_json", "TEXT"),
    ("monitor_json", "TEXT"), ("started_at", "TEXT"), ("finished_at", "TEXT"),
    # study settings (issue 14): variant is "" without variants
    ("variant", "TEXT"), ("augment", "TEXT"), ("accumulate_steps", "INTEGER"), ("effective_batch_size", "INTEGER"),
    # issue 23: where it ran
    *PLACEMENT_COLUMNS,
    # issue 29: the device the trial was told to use (cpu | gpu: device = "auto" resolved per framework in the
    # parent; auto: unresolved, the framework picked); ``device`` above is the framework's own name for it
    ("run_device", "TEXT"),
)
TRIAL_COLUMN_NAMES = tuple(name for name, _ in TRIAL_COLUMNS)
#: statuses ``--resume`` runs again besides the unfinished ones (see :meth:`Store.finished_hashes`)
RERUN_ON_RESUME: tuple[str, ...] = ("error",)


#: maxbatch columns: one row per max-batch search (``batchscope maxbatch`` or ``max_batch = true`` in a sweep).
#: The report codes against these names; add columns, never rename.
MAXBATCH_COLUMNS: tuple[tuple[str, str], ...] = (
    ("result_id", "INTEGER PRIMARY KEY AUTOINCREMENT"), ("run_id", "INTEGER"), ("experiment", "TEXT"),
    ("framework", "TEXT"), ("model", "TEXT"), ("dataset", "TEXT"), ("device", "TEXT"), ("precision", "TEXT"),
    ("strategy", "TEXT"), ("budget_mib", "REAL"), ("budget_kind", "TEXT"), ("margin_mib", "REAL"),
    ("max_batch", "INTEGER"), ("first_fail_batch", "INTEGER"), ("first_fail_status", "TEXT"),
    ("first_fail_reason", "TEXT"), ("recommended_batch", "INTEGER"), ("recommended_pow2", "INTEGER"),
    ("recommended_mult8", "INTEGER"), ("probes_n", "INTEGER"), ("wall_s", "REAL"), ("formula_batch", "INTEGER"),
    ("formula_error_pct", "REAL"), ("param_count", "INTEGER"), ("per_sample_activation_mib", "REAL"),
    ("fit_a_mib", "REAL"), ("fit_b_mib_per_sample", "REAL"), ("probes_json", "TEXT"), ("env_json", "TEXT"),
    ("finished_at", "TEXT"),
    # added beyond the agreed set: the formula with the analytic activation size, and search facts
    ("formula_analytic_batch", "INTEGER"), ("formula_analytic_error_pct", "REAL"),
    ("analytic_activation_mib_per_sample", "REAL"), ("model_state_mib", "REAL"), ("capped", "INTEGER"),
    ("versions_json", "TEXT"),
    # issue 18: what the answer needs to hold in the user's own training, and the check that it does
    ("confirm_steps", "INTEGER"), ("margin_jitter_mib", "REAL"), ("margin_growth_mib", "REAL"),
    ("margin_total_mib", "REAL"), ("train_env_json", "TEXT"), ("verify_steps", "INTEGER"),
    ("verify_status", "TEXT"), ("verify_reason", "TEXT"), ("verify_peak_mib", "REAL"),
    # issue 14, item 5 ("what helps"): the setting a search ran with ("plain": fp32, no accumulation, the adapter's
    # defaults), max_batch being then the micro-batch and effective_batch = max_batch x accumulate_steps; the peak
    # and step throughput measured at the answer. NULL in rows stored before.
    ("setting", "TEXT"), ("accumulate_steps", "INTEGER"), ("effective_batch", "INTEGER"),
    ("adapter_options_json", "TEXT"), ("answer_peak_mib", "REAL"), ("answer_samples_per_s", "REAL"),
    # issue 22: the probes run under glibc's default malloc; the part of margin_total_mib left for its heap
    # variation (harness.maxbatch.advice.CPU_HEAP_ALLOWANCE). NULL in rows stored before.
    ("margin_heap_mib", "REAL"),
    # issue 22: the runs that settled the recommendation under glibc's default malloc ([{batch, run, status}], the
    # last candidate's last) and their length in timed steps (harness.maxbatch.prober.settle_heap)
    ("heap_settle_json", "TEXT"), ("heap_settle_steps", "INTEGER"),
    # issue 29: the math mode the probes ran under (ieee | tf32 | framework-default); NULL in rows stored before
    ("math_mode", "TEXT"),
    # issue 31: the search's resolution ("exact", "1%", "8,1%": harness.maxbatch.search.Resolution.label): the answer
    # is within it of the boundary. NULL in rows stored before (exact). The most a probe's worker held on the GPU
    # outside its framework's allocator (the CUDA context; trials.cuda_context_mib), NULL where none measured it.
    ("resolution", "TEXT"), ("cuda_context_mib", "REAL"),
)
MAXBATCH_COLUMN_NAMES = tuple(name for name, _ in MAXBATCH_COLUMNS)

#: curve columns: one row per evaluation of a trial on the held-out split, in training order (the last point is
#: the end of the training and equals the trial row's accuracy and eval_loss), from the CurvePoint record
CURVE_COLUMNS: tuple[tuple[str, str], ...] = (("trial_hash", "TEXT NOT NULL"), *record_columns(CurvePoint))
CURVE_COLUMN_NAMES = tuple(name for name, _ in CURVE_COLUMNS)
#: gradient-noise columns: one row per evaluation point that measured it (mean squared gradient norms at two batch
#: sizes, how many, and the seconds it took), from the NoiseRecord record; harness.noise.estimate_from_rows reads them
NOISE_COLUMNS: tuple[tuple[str, str], ...] = (("trial_hash", "TEXT NOT NULL"), *record_columns(NoiseRecord))
NOISE_COLUMN_NAMES = tuple(name for name, _ in NOISE_COLUMNS)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT, experiment TEXT, spec_json TEXT, command TEXT,
    env_json TEXT, started_at TEXT);
CREATE TABLE IF NOT EXISTS trials ({", ".join(f"{n} {t}" for n, t in TRIAL_COLUMNS)});
CREATE TABLE IF NOT EXISTS step_times (
    trial_hash TEXT NOT NULL, step INTEGER NOT NULL, phase TEXT, time_ms REAL,
    PRIMARY KEY (trial_hash, step));
CREATE TABLE IF NOT EXISTS samples ({", ".join(f"{n} {t}" for n, t in SAMPLE_COLUMNS)});
CREATE INDEX IF NOT EXISTS samples_by_trial ON samples (trial_hash);
CREATE TABLE IF NOT EXISTS maxbatch ({", ".join(f"{n} {t}" for n, t in MAXBATCH_COLUMNS)});
CREATE TABLE IF NOT EXISTS curve ({", ".join(f"{n} {t}" for n, t in CURVE_COLUMNS)}, PRIMARY KEY (trial_hash, point));
CREATE TABLE IF NOT EXISTS gradient_noise ({", ".join(f"{n} {t}" for n, t in NOISE_COLUMNS)},
    PRIMARY KEY (trial_hash, point));
"""


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
                ((h, *(r.to_dict()[n] for n in NOISE_COLUMN_NAMES[1:])) for r in outcome.gradient_noise))

    def trials(self, where: str = "", params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """Trial rows as dicts (``where`` is an SQL condition on trials' columns)."""
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
        the measurement existed (read-only: the table is not added)."""
        if not self.has_table("gradient_noise"):
            return []
        where, params = ("WHERE trial_hash=?", (trial_hash,)) if trial_hash else ("", ())
        return [dict(r) for r in self.conn.execute(
            f"SELECT * FROM gradient_noise {where} ORDER BY trial_hash, point", params)]

    def runs(self) -> list[dict[str, Any]]:
        """Run rows as dicts."""
        return [dict(r) for r in self.conn.execute("SELECT * FROM runs ORDER BY run_id")]

    def write_maxbatch(self, row: Mapping[str, Any]) -> int:
        """Store one max-batch result (keys: :data:`MAXBATCH_COLUMN_NAMES`); returns its ``result_id``."""
        unknown = sorted(set(row) - set(MAXBATCH_COLUMN_NAMES))
        if unknown:
            raise StoreError(f"maxbatch row has unknown column(s) {unknown}; known: {MAXBATCH_COLUMN_NAMES}")
        cols = [c for c in MAXBATCH_COLUMN_NAMES if c in row and c != "result_id"]
        with self._writing("the max-batch result", "the results stored before are kept: free some space and run "
                                                   "the command again"), self.conn:
            cur = self.conn.execute(f"INSERT INTO maxbatch ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                    tuple(row[c] for c in cols))
        return int(cur.lastrowid or 0)

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


def outcome_row(outcome: TrialOutcome, run_id: int, env: Mapping[str, Any]) -> dict[str, Any]:
    """The trials row for one outcome (metrics the worker or the monitor gave, or NULL)."""
    t = outcome.trial
    m = outcome.metrics.to_dict() if outcome.metrics is not None else {}
    mon = outcome.monitor.aggregates
    rss = [v for v in (m.get("maxrss_mib"), mon.get("rss_peak_mib")) if v is not None]
    row: dict[str, Any] = {
        "trial_hash": t.trial_hash, "run_id": run_id, "experiment": t.experiment, "purpose": t.purpose,
        "framework": t.framework, "model": t.model, "dataset": t.dataset, "batch_size": t.batch_size,
        "repeat": t.repeat, "seed": t.seed, "status": outcome.status, "reason": outcome.reason,
        "epochs": t.epochs, "lr": t.optimizer.lr, "optimizer": t.optimizer.name,
        "elapsed_s": outcome.elapsed_s, "param_count": outcome.param_count,
        "device": outcome.device.get("device"), "run_device": t.run_device, "precision": t.precision,
        "denormals": t.denormals, "math_mode": t.math_mode, **_mfu_columns(outcome, m),
        "rss_peak_mib": max(rss) if rss else None,
        "variant": t.variant, "augment": t.augment, "accumulate_steps": t.accumulate_steps,
        "effective_batch_size": t.effective_batch_size,
        # a timed step is one optimizer update of effective_batch_size samples
        "j_per_sample": _j_per_sample(mon.get("energy_j"), t.effective_batch_size, outcome.phase_steps.get("timed")),
        "steady_j_per_sample": _j_per_sample(mon.get("steady_energy_j"), t.effective_batch_size,
                                             outcome.phase_steps.get("steady")),
        "exit_code": outcome.exit_code, "stderr_tail": outcome.stderr_tail, "traceback": outcome.traceback,
        "versions_json": json.dumps(outcome.versions), "env_json": json.dumps(dict(env), default=str),
        "device_json": json.dumps(outcome.device, default=str), "spec_json": json.dumps(t.to_dict(), default=str),
        "monitor_json": json.dumps(outcome.monitor.summary(), default=str),
        "started_at": outcome.started_at, "finished_at": outcome.finished_at,
    }
    row.update(outcome.placement.to_dict())
    for name in TRIAL_COLUMN_NAMES:  # the worker's measurements (METRIC_COLUMNS), then the sampler's
        if name not in row:
            row[name] = m.get(name, mon.get(name))
    return row


def _mfu_columns(outcome: TrialOutcome, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``mfu_pct`` against the peak of the arithmetic that ran (the math mode read back, the precision), with the
    peak and a note; all NULL off the GPU and where the trial has no measurements."""
    gpu_name = outcome.device.get("gpu_name")
    if not gpu_name or metrics.get("achieved_gflop_per_s") is None:
        return {"mfu_pct": None, "mfu_peak_tflops": None, "mfu_note": None}
    got = mfu(metrics.get("achieved_gflop_per_s"), gpu_name, outcome.trial.precision, metrics.get("math_mode_seen"))
    return {"mfu_pct": got.pct, "mfu_peak_tflops": got.peak_tflops, "mfu_note": got.note}


def _j_per_sample(energy_j: float | None, batch_size: int, timed_steps_n: int | None) -> float | None:
    """The timed phase's device energy per training sample (the sampler measures the energy, the worker
    counts the steps, so the two meet here)."""
    if energy_j is None or not timed_steps_n:
        return None
    return float(energy_j) / (batch_size * timed_steps_n)
