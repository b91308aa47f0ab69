"""Store.trials() hands back typed records (issue 39): typed parts, no JSON text inside, and the row they came from
still readable by column name for code written against the dict rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.cells import Series
from harness.records import MonitorResult, Placement, TrialOutcome, WorkerMetrics
from harness.store import TRIAL_COLUMN_NAMES, Store, TrialRecord
from tests.conftest import make_trial


def _store(tmp_path: Path) -> Path:
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {"name": "test"}, "batchscope run x", {"cpu_model": "x"})
        store.write_trial(TrialOutcome(
            trial=make_trial(batch_size=4), status="ok", versions={"numpy": "2.0"}, device={"device": "cpu"},
            metrics=WorkerMetrics(step_samples_per_s=100.0, maxrss_mib=300.0, cpu_denormals="flush"),
            placement=Placement(host="h1", attempt=1), monitor=MonitorResult(aggregates={"cpu_util_pct": 180.0})),
            run, {"cpu_model": "x"})
    return tmp_path


def test_a_trial_comes_back_as_typed_parts(tmp_path: Path) -> None:
    with Store.open(_store(tmp_path), create=False, readonly=True) as store:
        (rec,) = store.trials()
    assert isinstance(rec, TrialRecord)
    assert rec.status == "ok" and rec.settings.batch_size == 4 and rec.settings.framework == "fake"
    assert rec.metrics.step_samples_per_s == 100.0 and rec.metrics.cpu_denormals == "flush"
    assert rec.placement.host == "h1" and rec.sampler["cpu_util_pct"] == 180.0
    assert rec.versions["numpy"] == "2.0" and rec.env == {"cpu_model": "x"} and rec.setup["device"] == "cpu"
    assert isinstance(rec.spec, dict) and rec.spec["batch_size"] == 4
    assert not any(isinstance(getattr(rec, f), str) and f.endswith("_json") for f in vars(rec))
    assert rec.series == Series.of(rec) and rec.series.framework == "fake"


def test_a_record_reads_as_the_row_it_came_from(tmp_path: Path) -> None:
    with Store.open(_store(tmp_path), create=False, readonly=True) as store:
        (rec,) = store.trials()
        (row,) = store._trial_rows("", ())  # the row as the table holds it
    assert set(rec) == set(row) == set(TRIAL_COLUMN_NAMES) and len(rec) == len(row)
    for column, value in row.items():
        if column.endswith("_json") and value is not None:
            assert json.loads(rec[column]) == json.loads(value), column
        else:
            assert rec[column] == value, column
    assert rec.get("no_such_column", "absent") == "absent" and "batch_size" in rec
    assert (rec | {"purpose": "x"})["purpose"] == "x" and dict(rec)["status"] == "ok"
    with pytest.raises(KeyError):
        rec["no_such_column"]


def test_a_column_the_store_lacks_reads_as_none_and_an_unknown_one_is_kept(tmp_path: Path) -> None:
    path = _store(tmp_path)
    conn = sqlite3.connect(path / "results.sqlite")
    conn.execute("ALTER TABLE trials ADD COLUMN newer_writer_col REAL")
    conn.execute("UPDATE trials SET newer_writer_col = 1.5, host = NULL, versions_json = NULL")
    conn.commit()
    conn.close()
    with Store.open(path, create=False, readonly=True) as store:
        (rec,) = store.trials()
    assert rec.extra == {"newer_writer_col": 1.5} and rec["newer_writer_col"] == 1.5
    assert rec.placement.host is None and rec.versions is None and rec["versions_json"] is None


def test_a_run_comes_back_parsed_and_still_reads_as_its_row(tmp_path: Path) -> None:
    with Store.open(_store(tmp_path), create=False, readonly=True) as store:
        (run,) = store.runs()
    assert run.spec == {"name": "test"} and run.env == {"cpu_model": "x"} and run.command == "batchscope run x"
    assert json.loads(run["spec_json"]) == {"name": "test"} and run.get("experiment") == "test"
    assert list(run) == ["run_id", "experiment", "spec_json", "command", "env_json", "started_at"]
