"""Read everything the report needs out of a results store, and nothing else.

The report is rebuilt from ``results.sqlite`` alone (no framework, no GPU): this module opens the
store through :class:`harness.store.Store`, copies the rows into plain frozen records, and refuses
bad input with a :class:`~harness.errors.StoreError` that says what to do (the CLI turns it into
exit 2). A store that exists but holds no trial is refused the same way, because a report with no
measurement in it would only look like one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cells import Series
from harness.errors import StoreError
from harness.records import MaxBatchResult
from harness.store import STORE_NAME, RunRecord, Store, TrialRecord

#: the max-batch finder's table (written by ``batchscope maxbatch`` and by sweeps with max_batch = true)
MAXBATCH_TABLE = "maxbatch"


def _dict(value: Any) -> dict[str, Any]:
    """A parsed JSON column's value where it is an object; {} where it was NULL, not JSON or not an object (old or
    hand-made rows: the store reads them, :mod:`harness.store.trial_record`)."""
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class StoredExperiment:
    """One experiment as the store holds it: its runs (invocations) and its trials, in store order (the
    experiment's definition, read from its file, is :class:`harness.config.experiment.Experiment`)."""

    name: str
    runs: tuple[RunRecord, ...]
    trials: tuple[TrialRecord, ...]
    maxbatch: tuple[MaxBatchResult, ...] = ()
    #: post-warm-up step times (ms, in order) of each ok sweep trial, by trial hash: the drift figure's data
    step_times: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: each trial's learning curve by trial hash: its ``curve`` rows (dicts of CURVE_COLUMNS), in training order
    curves: Mapping[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    #: each trial's gradient-noise measurements by trial hash: its ``gradient_noise`` rows, in point order
    gradient_noise: Mapping[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # rows given as dicts (a caller's own, as tests and notebooks build) become records: one type inside
        object.__setattr__(self, "runs", tuple(map(RunRecord.of, self.runs)))
        object.__setattr__(self, "trials", tuple(map(TrialRecord.of, self.trials)))

    def _records_latest_run_first(self) -> tuple[RunRecord | TrialRecord, ...]:
        """The runs, latest first, then the trials (each carries a copy of the spec and the machine)."""
        return (*reversed(self.runs), *self.trials)

    @property
    def spec(self) -> dict[str, Any]:
        """The resolved experiment of the latest run (runs of one experiment share it unless overridden)."""
        for record in self._records_latest_run_first():
            spec = _dict(record.spec)
            if spec:
                return spec
        return {}

    @property
    def frameworks(self) -> tuple[str, ...]:
        """Frameworks in the order the experiment lists them (then any other found in the rows)."""
        found = {t.settings.framework for t in self.trials}
        listed = [f for f in self.spec.get("frameworks", []) if f in found]
        extra = sorted(found - set(listed))  # type: ignore[type-var]  # a trial's framework is never NULL
        return tuple(listed + extra)

    @property
    def line_series(self) -> tuple[Series, ...]:
        """The lines the report draws (:attr:`harness.cells.Series.line`: a framework, or a framework under one named
        variant), by framework in :attr:`frameworks`' order, then by variant."""
        order = {fw: i for i, fw in enumerate(self.frameworks)}
        found = {t.series.line for t in self.trials}
        return tuple(sorted(found, key=lambda s: (order.get(s.framework, len(order)), s)))

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """Every batch size with a trial row, ascending."""
        return tuple(sorted({int(t.settings.batch_size) for t in self.trials if t.settings.batch_size is not None}))

    @property
    def ok_trials(self) -> tuple[TrialRecord, ...]:
        """Trials that finished (status ok)."""
        return tuple(t for t in self.trials if t.status == "ok")

    def env(self) -> dict[str, Any]:
        """The machine of the latest run (the parent's capture), falling back to a trial's copy."""
        for record in self._records_latest_run_first():
            env = _dict(record.env)
            if env:
                return env
        return {}

    def versions(self) -> dict[str, dict[str, str]]:
        """Per framework: every library version its workers reported (package -> version(s))."""
        out: dict[str, dict[str, set[str]]] = {}
        for t in self.trials:
            for pkg, ver in _dict(t.versions).items():
                out.setdefault(str(t.settings.framework), {}).setdefault(pkg, set()).add(str(ver))
        return {fw: {pkg: ", ".join(sorted(v)) for pkg, v in pkgs.items()} for fw, pkgs in out.items()}

    def environments(self) -> dict[str, dict[str, str]]:
        """Per framework: the environment(s) and interpreter(s) its workers ran in (issue 38; empty for rows stored
        before those columns existed)."""
        out: dict[str, dict[str, set[str]]] = {}
        for t in self.trials:
            for key, value in (("environment", t.environment), ("python", t.python)):
                if value:
                    out.setdefault(str(t.settings.framework), {}).setdefault(key, set()).add(str(value))
        return {fw: {k: ", ".join(sorted(v)) for k, v in found.items()} for fw, found in out.items()}


@dataclass(frozen=True)
class ReportInput:
    """Everything read from one store."""

    source_dir: Path
    store_path: Path
    experiments: tuple[StoredExperiment, ...]
    has_maxbatch_table: bool = False

    @property
    def trials(self) -> tuple[TrialRecord, ...]:
        """Every trial of every experiment."""
        return tuple(t for e in self.experiments for t in e.trials)


def load(source_dir: str | Path) -> ReportInput:
    """Read the store in ``source_dir``.

    Raises:
        StoreError: no store there, a store of another schema, an unreadable file, or no trial in it.
    """
    source_dir = Path(source_dir)
    if not source_dir.is_dir() and source_dir.name != STORE_NAME:  # the store file itself: Store.open says so
        raise StoreError(f"{source_dir}: no such directory; give the --out directory of a "
                         "`batchscope run` (it holds results.sqlite)")
    path = source_dir / STORE_NAME  # missing, a dangling link, a FIFO...: Store.open says which
    with Store.open(source_dir, create=False, readonly=True) as store:  # writes nothing: a read-only store reads
        try:
            runs = store.runs()
            trials = store.trials()
            has_maxbatch = store.has_table(MAXBATCH_TABLE)
            maxbatch = store.maxbatch_answers()
            step_times: dict[str, list[float]] = {}
            for h, ms in store.conn.execute(
                    "SELECT s.trial_hash, s.time_ms FROM step_times s JOIN trials t USING (trial_hash) "
                    "WHERE t.status = 'ok' AND t.purpose = 'sweep' AND s.phase != 'warmup' "
                    "ORDER BY s.trial_hash, s.step"):
                step_times.setdefault(h, []).append(float(ms))
            curves: dict[str, list[dict[str, Any]]] = {}
            for row in store.curves():  # none in a store made before curves (read-only: not added)
                curves.setdefault(row["trial_hash"], []).append(row)
            noise: dict[str, list[dict[str, Any]]] = {}
            for row in store.gradient_noise():  # none in a store made before the table
                noise.setdefault(row["trial_hash"], []).append(row)
        except sqlite3.Error as e:
            raise StoreError(f"{path}: damaged results store ({e}); re-run the experiment into a new "
                             "--out directory") from e
    if not trials and not maxbatch:
        started = f" ({len(runs)} run(s) started, none finished a trial)" if runs else ""
        raise StoreError(f"{path}: the store holds no trial yet{started}; finish the sweep with "
                         "`batchscope run EXPERIMENT --out DIR --resume`, then build the report")
    names: list[str] = []
    for name in [*(r.experiment or "" for r in runs), *(t.settings.experiment or "" for t in trials),
                 *(m.experiment or "" for m in maxbatch)]:
        if name not in names:
            names.append(name)
    experiments = []
    for name in names:
        mine = [t.trial_hash for t in trials if (t.settings.experiment or "") == name]
        exp = StoredExperiment(
            name=name,
            runs=tuple(r for r in runs if (r.experiment or "") == name),
            trials=tuple(t for t in trials if (t.settings.experiment or "") == name),
            maxbatch=tuple(m for m in maxbatch if (m.experiment or "") == name),
            step_times={h: tuple(step_times[h]) for h in mine if h in step_times},
            curves={h: tuple(curves[h]) for h in mine if h in curves},
            gradient_noise={h: tuple(noise[h]) for h in mine if h in noise},
        )
        if exp.trials or exp.maxbatch:
            experiments.append(exp)
    return ReportInput(source_dir=source_dir, store_path=path, experiments=tuple(experiments),
                       has_maxbatch_table=has_maxbatch)

