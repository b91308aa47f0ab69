"""A trials row as the store hands it back: a typed record of typed parts (issue 39).

The store alone turns a row into a :class:`TrialRecord` and back: a ``*_json`` column is a parsed value here
(``versions``, ``env``, ``setup``, ``spec``, ``monitor``: mappings), the worker's figures are a
:class:`~harness.records.WorkerMetrics` (its ``step_estimate`` a :class:`~harness.records.StepEstimate`, read from
the ``step_estimate_json`` column here, the one place it is parsed), where it ran a
:class:`~harness.records.Placement`, the sampler's aggregates a mapping by column name, and the trial's settings a
:class:`TrialSettings`. Its :attr:`series` is the report's grouping key.

A record still reads as the row it came from (``record["batch_size"]``, ``record.get("spec_json")``, ``dict(record)``:
the ``*_json`` names give JSON text again): the path readers of the store's dict rows (notebooks, plugins, scripts)
used before, kept so they go on working; new code reads the fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from harness.monitor.fields import TRIAL_COLUMNS as SAMPLER_TRIAL_COLUMNS
from harness.records import Placement, StepEstimate, WorkerMetrics, schedule_from_data
from harness.series import Series, device_of
from harness.store.schema import json_column


@dataclass(frozen=True)
class TrialSettings:
    """The trial's settings a trials row carries as columns (:data:`harness.store.schema.SPEC_FIELDS`); the whole
    spec is :attr:`TrialRecord.spec`. None where a column is NULL (a store made before it, or a hand-made row)."""

    experiment: str | None = None
    purpose: str | None = None
    framework: str | None = None
    model: str | None = None
    dataset: str | None = None
    batch_size: int | None = None
    repeat: int | None = None
    seed: int | None = None
    epochs: int | None = None
    precision: str | None = None
    denormals: str | None = None
    math_mode: str | None = None  # as asked for; what ran is ``metrics.math_mode_seen``
    variant: str | None = None
    augment: str | None = None
    accumulate_steps: int | None = None


#: the trials columns that hold JSON text, and the record field that holds their parsed value
JSON_COLUMNS: Mapping[str, str] = {"versions_json": "versions", "env_json": "env", "device_json": "setup",
                                   "spec_json": "spec", "monitor_json": "monitor"}
_SETTINGS = tuple(f.name for f in fields(TrialSettings))
#: the trials columns of WorkerMetrics: a field's own name, or (a record of its own) the JSON column its metadata names
_METRICS = tuple(f.metadata.get("column", f.name) for f in fields(WorkerMetrics))
#: WorkerMetrics' record fields by their JSON column: the field, how it is read from the parsed JSON, and what it
#: reads as where that fails (an estimate whose error says so; no schedule figures: the spec still names the schedule)
_METRIC_RECORDS: Mapping[str, tuple[str, Callable[[Any], Any], Callable[[str], Any]]] = {
    "step_estimate_json": ("step_estimate", StepEstimate.from_dict,
                           lambda why: StepEstimate(error=f"unreadable stored estimate: {why}"[:500])),
    "schedule_json": ("schedule", schedule_from_data, lambda why: None),
}
assert set(_METRIC_RECORDS) == {f.metadata["column"] for f in fields(WorkerMetrics) if "column" in f.metadata}
_PLACEMENT = tuple(f.name for f in fields(Placement))
_SAMPLER = tuple(name for name, _ in SAMPLER_TRIAL_COLUMNS if name != "rss_peak_mib")  # rss_peak_mib: the head's


def _parsed(text: Any) -> Any:
    """A JSON column's value; None where it is NULL or not JSON (an old or hand-made row)."""
    if text is None or text == "":
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _mapping(text: Any) -> dict[str, Any] | None:
    """A JSON column that holds an object, as a dict; None where it is NULL, not JSON or not an object."""
    value = _parsed(text)
    return value if isinstance(value, dict) else None


def _text(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _metrics(row: Mapping[str, Any]) -> WorkerMetrics:
    """The worker's figures of a trials row: plain columns as stored (NULL reads as None), a record's JSON column
    parsed into it (one that cannot be read: an estimate whose error says so, never a crash of the reader)."""
    values: dict[str, Any] = {}
    for column in _METRICS:
        if column in _METRIC_RECORDS:
            name, read, unreadable = _METRIC_RECORDS[column]
            parsed = _parsed(row.get(column))
            try:
                values[name] = None if parsed is None else read(parsed)
            except ValueError as e:
                values[name] = unreadable(str(e))
        else:
            values[column] = row.get(column)
    return WorkerMetrics(**values)


@dataclass(frozen=True)
class TrialRecord(Mapping[str, Any]):
    """One stored trial (see the module docstring). A field is None where its column is NULL."""

    trial_hash: str
    run_id: int | None
    settings: TrialSettings
    status: str | None
    reason: str | None = None
    lr: float | None = None
    optimizer: str | None = None
    elapsed_s: float | None = None
    param_count: int | None = None
    device: str | None = None  # the framework's own name for where it ran; ``run_device`` what it was told
    mfu_pct: float | None = None
    mfu_peak_tflops: float | None = None
    mfu_note: str | None = None
    rss_peak_mib: float | None = None
    j_per_sample: float | None = None
    steady_j_per_sample: float | None = None
    sample_interval_ms: float | None = None
    samples_n: int | None = None
    timed_samples_n: int | None = None
    exit_code: int | None = None
    stderr_tail: str | None = None
    traceback: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    effective_batch_size: int | None = None
    run_device: str | None = None
    python: str | None = None
    environment: str | None = None
    #: parsed JSON columns: the libraries the worker imported, the machine, the adapter's setup facts
    #: (``device_json``), the resolved trial spec (``TrialSpec.to_dict``), the monitor's summary; None where NULL
    versions: Mapping[str, Any] | None = None
    env: Mapping[str, Any] | None = None
    setup: Mapping[str, Any] | None = None
    spec: Mapping[str, Any] | None = None
    monitor: Mapping[str, Any] | None = None
    #: what the worker measured (its ``step_estimate_json`` column is ``metrics.step_estimate``, a record)
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    sampler: Mapping[str, Any] = field(default_factory=dict)  # the sampler's aggregates, by column
    placement: Placement = field(default_factory=Placement)
    #: columns this version does not know (a newer writer's), as read
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TrialRecord:
        """The record of one trials row (the store's reader; a column the row lacks reads as NULL)."""
        own = {f.name for f in fields(cls)} - {"settings", "metrics", "sampler", "placement", "extra",
                                               *JSON_COLUMNS.values()}
        known = {*own, *_SETTINGS, *_METRICS, *_PLACEMENT, *_SAMPLER, *JSON_COLUMNS}
        return cls(
            **{k: row.get(k) for k in own},  # type: ignore[arg-type]  # NULL columns read as None
            settings=TrialSettings(**{k: row.get(k) for k in _SETTINGS}),
            **{attr: _mapping(row.get(col)) for col, attr in JSON_COLUMNS.items()},  # type: ignore[arg-type]
            metrics=_metrics(row),
            sampler={k: row.get(k) for k in _SAMPLER},
            placement=Placement(**{k: row.get(k) for k in _PLACEMENT}),
            extra={k: v for k, v in row.items() if k not in known},
        )

    @classmethod
    def of(cls, trial: Mapping[str, Any]) -> TrialRecord:
        """``trial`` itself where it is a record, else the record of a dict row (a caller's own rows, as tests
        build)."""
        return trial if isinstance(trial, TrialRecord) else cls.from_row(trial)

    @property
    def step_estimate(self) -> StepEstimate | None:
        """A max-batch probe's framework estimate (``metrics.step_estimate``), None where none was asked for."""
        return self.metrics.step_estimate

    @property
    def series(self) -> Series:
        """The series the trial belongs to (the report's grouping key)."""
        s = self.settings
        return Series(framework=str(s.framework), variant=str(s.variant or ""), precision=str(s.precision or ""),
                      math_mode=str(s.math_mode or ""), denormals=str(s.denormals or ""),
                      accumulate_steps=int(s.accumulate_steps or 1), device=device_of({"run_device": self.run_device}))

    # the row's view: ``record["column"]``, ``record.get(...)``, ``dict(record)`` (see the module docstring)

    def column(self, name: str) -> Any:
        """The value of the trials column ``name`` as stored (a ``*_json`` column as JSON text); KeyError for a
        name that is no column of this row."""
        if name in JSON_COLUMNS:
            return _text(getattr(self, JSON_COLUMNS[name]))
        if name in _METRIC_RECORDS:
            return json_column(getattr(self.metrics, _METRIC_RECORDS[name][0]))
        if name in _SETTINGS:
            return getattr(self.settings, name)
        if name in _SAMPLER:
            return self.sampler.get(name)
        if name in _METRICS:
            return getattr(self.metrics, name)
        if name in _PLACEMENT:
            return getattr(self.placement, name)
        if name in _HEAD:
            return getattr(self, name)
        return self.extra[name]

    def __getitem__(self, name: str) -> Any:
        try:
            return self.column(name)
        except KeyError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        yield from _COLUMN_ORDER
        yield from self.extra

    def __len__(self) -> int:
        return len(_COLUMN_ORDER) + len(self.extra)

    def __contains__(self, name: object) -> bool:
        return name in _COLUMN_SET or name in self.extra

    def __or__(self, other: Mapping[str, Any]) -> dict[str, Any]:
        """``record | {...}``: the row as a dict with ``other``'s values over it (as a dict row merged)."""
        return self.row() | dict(other)

    def row(self) -> dict[str, Any]:
        """The trials row as a dict of column values (JSON columns as text)."""
        return {k: self[k] for k in self}


@dataclass(frozen=True)
class RunRecord(Mapping[str, Any]):
    """One stored run (an invocation): its ``spec_json`` and ``env_json`` parsed (None where NULL or not JSON); it
    reads as its row too (``run["spec_json"]`` as JSON text), as :class:`TrialRecord` does."""

    run_id: int | None
    experiment: str | None = None
    command: str | None = None
    started_at: str | None = None
    spec: Mapping[str, Any] | None = None  # the resolved experiment
    env: Mapping[str, Any] | None = None  # the parent's capture of the machine
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunRecord:
        """The record of one runs row."""
        return cls(run_id=row.get("run_id"), experiment=row.get("experiment"), command=row.get("command"),
                   started_at=row.get("started_at"), spec=_mapping(row.get("spec_json")),
                   env=_mapping(row.get("env_json")), extra={k: v for k, v in row.items() if k not in _RUN_COLUMNS})

    @classmethod
    def of(cls, run: Mapping[str, Any]) -> RunRecord:
        """``run`` itself where it is a record, else the record of a dict row."""
        return run if isinstance(run, RunRecord) else cls.from_row(run)

    def __getitem__(self, name: str) -> Any:
        if name in ("spec_json", "env_json"):
            return _text(getattr(self, name[:-5]))
        if name in _RUN_COLUMNS:
            return getattr(self, name)
        return self.extra[name]

    def __iter__(self) -> Iterator[str]:
        yield from _RUN_COLUMNS
        yield from self.extra

    def __len__(self) -> int:
        return len(_RUN_COLUMNS) + len(self.extra)


#: the runs table's columns, in its order
_RUN_COLUMNS = ("run_id", "experiment", "spec_json", "command", "env_json", "started_at")

_HEAD = tuple(f.name for f in fields(TrialRecord)
              if f.name not in {"settings", "metrics", "sampler", "placement", "extra",
                                *JSON_COLUMNS.values()})


def _column_order() -> tuple[str, ...]:
    from harness.store.schema import TRIAL_COLUMN_NAMES  # the table's order (schema imports records, not this)
    return TRIAL_COLUMN_NAMES


_COLUMN_ORDER = _column_order()
_COLUMN_SET = frozenset(_COLUMN_ORDER)
