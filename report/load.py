"""Read everything the report needs out of a results store, and nothing else.

The report is rebuilt from ``results.sqlite`` alone (no framework, no GPU): this module opens the
store through :class:`harness.store.Store`, copies the rows into plain frozen records, and refuses
bad input with a :class:`~harness.errors.StoreError` that says what to do (the CLI turns it into
exit 2). A store that exists but holds no trial is refused the same way, because a report with no
measurement in it would only look like one.
"""

from __future__ import annotations

import json
import sqlite3
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cells import Series
from harness.errors import StoreError
from harness.records import MaxBatchResult
from harness.store import STORE_NAME, Store, TrialRecord

#: the max-batch finder's table (written by ``batchscope maxbatch`` and by sweeps with max_batch = true)
MAXBATCH_TABLE = "maxbatch"


def parse_json(text: Any) -> Any:
    """A ``*_json`` column's value, or an empty dict when it is NULL or not JSON (old or hand-made rows)."""
    if not text:
        return {}
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return {}


@dataclass(frozen=True)
class StoredExperiment:
    """One experiment as the store holds it: its runs (invocations) and its trials, in store order (the
    experiment's definition, read from its file, is :class:`harness.config.experiment.Experiment`)."""

    name: str
    runs: tuple[dict[str, Any], ...]
    trials: tuple[TrialRecord, ...]
    maxbatch: tuple[MaxBatchResult, ...] = ()
    #: post-warm-up step times (ms, in order) of each ok sweep trial, by trial hash: the drift figure's data
    step_times: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: each trial's learning curve by trial hash: its ``curve`` rows (dicts of CURVE_COLUMNS), in training order
    curves: Mapping[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    #: each trial's gradient-noise measurements by trial hash: its ``gradient_noise`` rows, in point order
    gradient_noise: Mapping[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)

    @property
    def spec(self) -> dict[str, Any]:
        """The resolved experiment of the latest run (runs of one experiment share it unless overridden)."""
        for run in reversed(self.runs):
            spec = parse_json(run.get("spec_json"))
            if spec:
                return spec  # type: ignore[no-any-return]
        for trial in self.trials:
            spec = parse_json(trial.get("spec_json"))
            if spec:
                return spec  # type: ignore[no-any-return]
        return {}

    @property
    def frameworks(self) -> tuple[str, ...]:
        """Frameworks in the order the experiment lists them (then any other found in the rows)."""
        listed = [f for f in self.spec.get("frameworks", []) if any(t["framework"] == f for t in self.trials)]
        extra = sorted({t["framework"] for t in self.trials} - set(listed))
        return tuple(listed + extra)

    @property
    def line_series(self) -> tuple[Series, ...]:
        """The lines the report draws (:attr:`harness.cells.Series.line`: a framework, or a framework under one named
        variant), by framework in :attr:`frameworks`' order, then by variant."""
        order = {fw: i for i, fw in enumerate(self.frameworks)}
        found = {Series.of(t).line for t in self.trials}
        return tuple(sorted(found, key=lambda s: (order.get(s.framework, len(order)), s)))

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """Every batch size with a trial row, ascending."""
        return tuple(sorted({int(t["batch_size"]) for t in self.trials if t.get("batch_size") is not None}))

    @property
    def ok_trials(self) -> tuple[TrialRecord, ...]:
        """Trials that finished (status ok)."""
        return tuple(t for t in self.trials if t.get("status") == "ok")

    def env(self) -> dict[str, Any]:
        """The machine of the latest run (the parent's capture), falling back to a trial's copy."""
        for run in reversed(self.runs):
            env = parse_json(run.get("env_json"))
            if env:
                return env  # type: ignore[no-any-return]
        for trial in self.trials:
            env = parse_json(trial.get("env_json"))
            if env:
                return env  # type: ignore[no-any-return]
        return {}

    def versions(self) -> dict[str, dict[str, str]]:
        """Per framework: every library version its workers reported (package -> version(s))."""
        out: dict[str, dict[str, set[str]]] = {}
        for t in self.trials:
            for pkg, ver in (parse_json(t.get("versions_json")) or {}).items():
                out.setdefault(t["framework"], {}).setdefault(pkg, set()).add(str(ver))
        return {fw: {pkg: ", ".join(sorted(v)) for pkg, v in pkgs.items()} for fw, pkgs in out.items()}

    def environments(self) -> dict[str, dict[str, str]]:
        """Per framework: the environment(s) and interpreter(s) its workers ran in (issue 38; empty for rows stored
        before those columns existed)."""
        out: dict[str, dict[str, set[str]]] = {}
        for t in self.trials:
            for key in ("environment", "python"):
                if t.get(key):
                    out.setdefault(t["framework"], {}).setdefault(key, set()).add(str(t[key]))
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
    for name in [*(row.get("experiment") or "" for row in [*runs, *trials]), *(m.experiment or "" for m in maxbatch)]:
        if name not in names:
            names.append(name)
    experiments = []
    for name in names:
        exp = StoredExperiment(
            name=name,
            runs=tuple(r for r in runs if (r.get("experiment") or "") == name),
            trials=tuple(t for t in trials if (t.get("experiment") or "") == name),
            maxbatch=tuple(m for m in maxbatch if (m.experiment or "") == name),
            step_times={t["trial_hash"]: tuple(step_times[t["trial_hash"]]) for t in trials
                        if (t.get("experiment") or "") == name and t["trial_hash"] in step_times},
            curves={t["trial_hash"]: tuple(curves[t["trial_hash"]]) for t in trials
                    if (t.get("experiment") or "") == name and t["trial_hash"] in curves},
            gradient_noise={t["trial_hash"]: tuple(noise[t["trial_hash"]]) for t in trials
                            if (t.get("experiment") or "") == name and t["trial_hash"] in noise},
        )
        if exp.trials or exp.maxbatch:
            experiments.append(exp)
    return ReportInput(source_dir=source_dir, store_path=path, experiments=tuple(experiments),
                       has_maxbatch_table=has_maxbatch)


def __getattr__(name: str) -> Any:
    """``report.load.Experiment``, this class's name before 0.9 (one name per class: the experiment file's is
    ``harness.config.experiment.Experiment``), still found, with a warning."""
    if name == "Experiment":
        warnings.warn("report.load.Experiment is now report.load.StoredExperiment; import it by that name",
                      DeprecationWarning, stacklevel=2)
        return StoredExperiment
    raise AttributeError(f"module 'report.load' has no attribute {name!r}")
