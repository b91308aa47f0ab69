"""The results store's schema: every table's columns, most derived from the records they store (a field of
:class:`~harness.records.WorkerMetrics`, :class:`~harness.records.CurvePoint` or :class:`~harness.noise.NoiseRecord`
is a column, named and typed by its annotation), the SQL that creates them, and how a trial's outcome fills a row
(:func:`outcome_row`). :mod:`harness.store.db` reads and writes them; the package (:mod:`harness.store`) exports
the names code reading the store uses."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.config.trial import TrialSpec
from harness.flops import mfu
from harness.monitor.fields import SAMPLE_COLUMNS
from harness.monitor.fields import TRIAL_COLUMNS as SAMPLER_TRIAL_COLUMNS
from harness.noise import NoiseRecord
from harness.records import CurvePoint, Placement, TrialOutcome, WorkerMetrics
from harness.store.maxbatch_row import maxbatch_columns

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
    """(name, SQL type) of each field of the dataclass ``cls``, in field order; a field that is a record of its own
    names its JSON column in its metadata (``column``: ``WorkerMetrics.step_estimate`` is ``step_estimate_json``)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.metadata["column"], "TEXT") if "column" in f.metadata else (f.name, sql_type(hints[f.name]))
                 for f in dataclasses.fields(cls))


def plain(value: Any) -> Any:
    """A record field's value as plain data: a record as its ``to_dict()``, a tuple of them (or of pairs) as a list."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value


def json_column(value: Any) -> str | None:
    """A record field's JSON column text (:func:`plain` data); None for None."""
    return None if value is None else json.dumps(plain(value))


def record_values(record: Any) -> dict[str, Any]:
    """The columns of a dataclass record: each field's value, a field whose metadata names a ``column`` as JSON text
    there (the store's side of the boundary: readers get the parsed value back, :mod:`harness.store.trial_record`,
    :meth:`harness.store.Store.gradient_noise`)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if "column" in f.metadata:
            out[f.metadata["column"]] = json_column(value)
        else:
            out[f.name] = value
    return out


def metric_values(metrics: WorkerMetrics) -> dict[str, Any]:
    """The trials columns of what the worker measured (:func:`record_values`)."""
    return record_values(metrics)


#: what the worker measured: one trials column per :class:`~harness.records.WorkerMetrics` field, named and typed
#: by the field (a new field is a new column, added to older stores on open). Throughput over every post-warm-up
#: step (harness/run/timing.py): step = batch / median step time (forward, backward, update); e2e = samples / wall
#: time of those steps, batch preparation included. NULL where the worker sent no result.
METRIC_COLUMNS: tuple[tuple[str, str], ...] = record_columns(WorkerMetrics)

#: where a trial ran (issue 23): one trials column per :class:`~harness.records.Placement` field (host, node_id,
#: device_index, concurrent_n, attempt); NULL in rows stored before
PLACEMENT_COLUMNS: tuple[tuple[str, str], ...] = record_columns(Placement)

@dataclass(frozen=True)
class TrialHead:
    """A trials row's own columns: the trial's hash and run, how it ended, what the parent derived from the
    measurements, and where the worker ran (the rest are the trial's settings, :data:`SPEC_FIELDS` of its TrialSpec,
    and a :class:`~harness.records.WorkerMetrics`'s, the sampler's field table's and a
    :class:`~harness.records.Placement`'s). One column per field, named and typed by it; units are in the names;
    ``*_json`` fields hold JSON text. NULL in a store made before a column existed (it gains it, empty, when opened).
    """

    trial_hash: str
    run_id: int
    status: str
    reason: str
    lr: float
    optimizer: str
    elapsed_s: float
    param_count: int | None
    device: str | None  # the framework's own name for where it ran ("cuda:0", "cpu(0)"); run_device what it was told
    #: MFU against the dense peak of the arithmetic that ran, that peak, or why no MFU is published (harness.flops)
    mfu_pct: float | None
    mfu_peak_tflops: float | None
    mfu_note: str | None
    rss_peak_mib: float | None  # the higher of the worker's maxrss and the sampler's peak
    #: the timed phase's device energy per training sample, and the steady phase's (issue 29, after the final
    #: evaluation); a timed step is one optimizer update of effective_batch_size samples
    j_per_sample: float | None
    steady_j_per_sample: float | None
    sample_interval_ms: float | None  # the sampler's: its interval, its samples, those in the timed phase
    samples_n: int | None
    timed_samples_n: int | None
    exit_code: int | None
    stderr_tail: str
    traceback: str
    versions_json: str  # the framework, numpy and python the worker imported; CUDA and cuDNN where present
    env_json: str
    device_json: str  # the adapter's setup facts (adapters.base.SetupFacts.to_dict)
    spec_json: str
    monitor_json: str
    started_at: str
    finished_at: str
    effective_batch_size: int
    #: issue 29: the device the trial was told to use (cpu | gpu: device = "auto" resolved per framework in the
    #: parent; auto: unresolved, the framework picked)
    run_device: str
    #: issue 38: the interpreter the worker ran in and its environment (managed <framework>-<kind>@<lock hash>, user,
    #: parent)
    python: str | None
    environment: str | None


#: the TrialSpec fields a trials row carries as columns, named and typed by the field: the trial's identity and the
#: settings a reader groups and filters by (``denormals`` and ``math_mode`` as asked for: what ran is the worker's
#: ``cpu_denormals`` and ``math_mode_seen``; ``variant`` is "" without variants); the whole spec is ``spec_json``
SPEC_FIELDS = ("experiment", "purpose", "framework", "model", "dataset", "batch_size", "repeat", "seed", "epochs",
               "precision", "denormals", "math_mode", "variant", "augment", "accumulate_steps")
_SPEC_HINTS = typing.get_type_hints(TrialSpec)
SPEC_COLUMNS: tuple[tuple[str, str], ...] = tuple((name, sql_type(_SPEC_HINTS[name])) for name in SPEC_FIELDS)

#: trials columns: (name, SQL type): the trial's settings (:data:`SPEC_COLUMNS`), the row's own (:class:`TrialHead`),
#: then the worker's measurements, the sampler's aggregates (from the field table, harness/monitor/fields.py: means
#: over the timed phase, except where the name says peak), and where it ran (issue 23); each derived from its record
TRIAL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trial_hash", "TEXT PRIMARY KEY"), *SPEC_COLUMNS, *record_columns(TrialHead)[1:],
    *METRIC_COLUMNS,
    *(c for c in SAMPLER_TRIAL_COLUMNS if c[0] != "rss_peak_mib"),  # rss_peak_mib is the head's (the higher)
    *PLACEMENT_COLUMNS,
)
TRIAL_COLUMN_NAMES = tuple(name for name, _ in TRIAL_COLUMNS)
#: statuses ``--resume`` runs again besides the unfinished ones (see :meth:`Store.finished_hashes`)
RERUN_ON_RESUME: tuple[str, ...] = ("error",)


#: maxbatch columns: one row per max-batch search (``batchscope maxbatch`` or ``max_batch = true`` in a sweep), one
#: column per stored field of a :class:`~harness.records.MaxBatchResult` and of its parts after the row's id
#: (harness/store/maxbatch_row.py flattens the record). The report codes against these names; add fields, never rename.
MAXBATCH_COLUMNS: tuple[tuple[str, str], ...] = (("result_id", "INTEGER PRIMARY KEY AUTOINCREMENT"),
                                                 *maxbatch_columns(sql_type))
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

def outcome_row(outcome: TrialOutcome, run_id: int, env: Mapping[str, Any]) -> dict[str, Any]:
    """The trials row for one outcome (metrics the worker or the monitor gave, or NULL)."""
    t = outcome.trial
    m = metric_values(outcome.metrics) if outcome.metrics is not None else {}
    mon = outcome.monitor.aggregates
    rss = [v for v in (m.get("maxrss_mib"), mon.get("rss_peak_mib")) if v is not None]
    head = TrialHead(
        trial_hash=t.trial_hash, run_id=run_id, status=outcome.status, reason=outcome.reason, lr=t.optimizer.lr,
        optimizer=t.optimizer.name, elapsed_s=outcome.elapsed_s, param_count=outcome.param_count,
        device=outcome.device.get("device"), **_mfu_columns(outcome, m), rss_peak_mib=max(rss) if rss else None,
        j_per_sample=_j_per_sample(mon.get("energy_j"), t.effective_batch_size, outcome.phase_steps.get("timed")),
        steady_j_per_sample=_j_per_sample(mon.get("steady_energy_j"), t.effective_batch_size,
                                          outcome.phase_steps.get("steady")),
        sample_interval_ms=mon.get("sample_interval_ms"), samples_n=mon.get("samples_n"),
        timed_samples_n=mon.get("timed_samples_n"),
        exit_code=outcome.exit_code, stderr_tail=outcome.stderr_tail, traceback=outcome.traceback,
        versions_json=json.dumps(outcome.versions), env_json=json.dumps(dict(env), default=str),
        device_json=json.dumps(outcome.device, default=str), spec_json=json.dumps(t.to_dict(), default=str),
        monitor_json=json.dumps(outcome.monitor.summary(), default=str),
        started_at=outcome.started_at, finished_at=outcome.finished_at,
        effective_batch_size=t.effective_batch_size, run_device=t.run_device,
        python=outcome.python or None, environment=outcome.environment or None)
    row: dict[str, Any] = {name: getattr(t, name) for name in SPEC_FIELDS} | dataclasses.asdict(head)
    row |= outcome.placement.to_dict()  # where it ran: its own columns
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
