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


def test_a_probes_step_estimate_is_a_record_on_the_wire_and_in_the_store(tmp_path: Path) -> None:
    """Issue 51, item 3: the worker's estimate is a typed part of its result (no JSON text inside the record); the
    wire carries it as an object and the store as JSON text in its column, each parsed where it is read."""
    from harness.records import StepEstimate
    from harness.run.protocol import Result, decode, encode

    estimate = StepEstimate((8, 248), (3.0, 63.0), 0.25)
    sent = Result(metrics=WorkerMetrics(step_samples_per_s=10.0, step_estimate=estimate), step_times_ms=(1.0,),
                  phase_steps={"timed": 1})
    got = decode(encode(sent))
    assert isinstance(got, Result) and got.metrics.step_estimate == estimate
    assert json.loads(encode(sent))["metrics"]["step_estimate"] == {"batches": [8, 248], "mib": [3.0, 63.0],
                                                                    "seconds": 0.25}
    failed = StepEstimate(error="the fake adapter offers no step-memory estimate")
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {"name": "test"}, "x", {})
        for batch, est in ((4, estimate), (8, failed), (16, None)):
            store.write_trial(TrialOutcome(trial=make_trial(batch_size=batch, purpose="probe"), status="ok",
                                           metrics=WorkerMetrics(step_estimate=est)), run, {})
        by = {r.settings.batch_size: r for r in store.trials()}
        text = store.conn.execute("SELECT step_estimate_json FROM trials WHERE batch_size = 4").fetchone()[0]
    assert by[4].metrics.step_estimate == estimate and by[4].step_estimate == estimate
    assert by[8].metrics.step_estimate == failed and by[16].metrics.step_estimate is None
    assert json.loads(text) == estimate.to_dict() and json.loads(by[4]["step_estimate_json"]) == estimate.to_dict()
    assert by[16]["step_estimate_json"] is None


def test_an_unreadable_stored_estimate_reads_as_one_that_says_so(tmp_path: Path) -> None:
    path = _store(tmp_path)
    conn = sqlite3.connect(path / "results.sqlite")
    conn.execute("""UPDATE trials SET step_estimate_json = '{"batches": [8], "mib": []}'""")
    conn.commit()
    conn.close()
    with Store.open(path, create=False, readonly=True) as store:
        (rec,) = store.trials()
    assert rec.metrics.step_estimate is not None and "unreadable stored estimate" in (rec.metrics.step_estimate.error
                                                                                       or "")


def test_a_schedules_figures_are_records_on_the_wire_and_in_the_store(tmp_path: Path) -> None:
    """Issue 51, item 3, for issue 52's figures per size: typed stretches in the worker's result and the stored
    record; one JSON list on the wire and in the ``schedule_json`` column, parsed where it is read."""
    from harness.records import ScheduleStretch
    from harness.run.protocol import Result, decode, encode

    schedule = (ScheduleStretch(batch=4, lr=0.01, first_step=0, first_sample=0, steps=16, step_ms_median=2.0,
                                step_samples_per_s=2000.0),
                ScheduleStretch(batch=16, lr=0.04, first_step=16, first_sample=64, steps=4, switch_s=0.5))
    sent = Result(metrics=WorkerMetrics(schedule=schedule), step_times_ms=(1.0,), phase_steps={"timed": 1})
    got = decode(encode(sent))
    assert isinstance(got, Result) and got.metrics.schedule == schedule
    assert json.loads(encode(sent))["metrics"]["schedule"][1] == {
        "batch": 16, "lr": 0.04, "first_step": 16, "first_sample": 64, "steps": 4, "step_ms_median": None,
        "step_samples_per_s": None, "switch_s": 0.5}
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {"name": "test"}, "x", {})
        for batch, figures in ((4, schedule), (8, None)):
            store.write_trial(TrialOutcome(trial=make_trial(batch_size=batch), status="ok",
                                           metrics=WorkerMetrics(schedule=figures)), run, {})
        store.conn.execute("""UPDATE trials SET schedule_json = '[{"batch": 4}]' WHERE batch_size = 8""")
        by = {r.settings.batch_size: r for r in store.trials()}
        text = store.conn.execute("SELECT schedule_json FROM trials WHERE batch_size = 4").fetchone()[0]
    assert by[4].metrics.schedule == schedule and json.loads(text) == [s.to_dict() for s in schedule]
    assert json.loads(by[4]["schedule_json"]) == json.loads(text)
    assert by[8].metrics.schedule is None  # unreadable (a stretch without its figures): no figures, no crash


def test_no_record_carries_json_text_for_its_reader_to_parse() -> None:
    """The seam records (harness/records.py, and the gradient-noise row it carries, harness.noise.NoiseRecord) hold
    parsed values; JSON text lives only in the store's own row (``TrialHead``, whose ``*_json`` fields are columns)
    and on the wire."""
    import dataclasses
    import typing

    from harness import noise, records

    found = []
    classes = [c for c in vars(records).values() if getattr(c, "__module__", None) == records.__name__]
    for cls in [*classes, noise.NoiseRecord]:
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            continue
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name.endswith("_json") or (f.name.endswith("json") and hints[f.name] in (str, str | None)):
                found.append(f"{cls.__name__}.{f.name}")
    assert not found, found
