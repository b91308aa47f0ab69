"""The results store: one transaction per trial, resume, refusals."""

from __future__ import annotations

import sqlite3

import pytest

from harness.config.experiment import parse_experiment
from harness.errors import StoreError
from harness.records import MonitorResult, TrialOutcome, WorkerMetrics
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import SCHEMA_VERSION, TRIAL_COLUMN_NAMES, Store
from tests.conftest import make_trial
from tests.fakes.registry import register_fake


def outcome(batch_size: int = 4, status: str = "ok") -> TrialOutcome:
    return TrialOutcome(trial=make_trial(batch_size=batch_size), status=status,
                        metrics=WorkerMetrics(step_samples_per_s=100.0, e2e_samples_per_s=80.0,
                                              step_time_ms_median=40.0, maxrss_mib=300.0),
                        step_times_ms=[50.0, 41.0, 40.0, 39.0], phase_steps={"warmup": 1, "timed": 3, "train": 0},
                        monitor=MonitorResult(aggregates={"cpu_util_pct": 180.0},
                                              samples=[{"t_s": 0.1, "phase": "timed", "cpu_util_pct": 170.0}]))


def test_trial_row_step_times_and_samples_are_written(tmp_path):
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {"name": "test"}, "batchscope run x", {"cpu_model": "x"})
        store.write_trial(outcome(), run, {"cpu_model": "x"})
        (row,) = store.trials()
        assert row["status"] == "ok" and row["step_samples_per_s"] == 100.0 and row["rss_peak_mib"] == 300.0
        assert row["cpu_util_pct"] == 180.0 and row["batch_size"] == 4
        steps = store.conn.execute("SELECT phase, time_ms FROM step_times ORDER BY step").fetchall()
        assert [tuple(s) for s in steps] == [("warmup", 50.0), ("timed", 41.0), ("timed", 40.0), ("timed", 39.0)]
        assert store.conn.execute("SELECT count(*) FROM samples").fetchone()[0] == 1
        assert store.finished_hashes() == {make_trial().trial_hash}


def test_units_are_in_column_names():
    for col in ("step_samples_per_s", "e2e_samples_per_s", "gpu_mem_used_peak_mib", "proc_gpu_mem_peak_mib",
                "step_time_ms_median", "step_time_ms_iqr", "framework_peak_mib", "rss_peak_mib",
                "accuracy", "epochs", "elapsed_s", "framework", "batch_size", "repeat", "status"):
        assert col in TRIAL_COLUMN_NAMES


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {}, "", {})
        bad = outcome()
        bad.step_times_ms = [1.0, "not a number", object()]  # type: ignore[list-item]
        with pytest.raises(sqlite3.Error):
            store.write_trial(bad, run, {})
        assert store.trials() == []
        assert store.conn.execute("SELECT count(*) FROM step_times").fetchone()[0] == 0


def test_rewriting_a_trial_replaces_it(tmp_path):
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {}, "", {})
        store.write_trial(outcome(status="timeout"), run, {})
        store.write_trial(outcome(), run, {})
        assert [r["status"] for r in store.trials()] == ["ok"]
        assert store.conn.execute("SELECT count(*) FROM step_times").fetchone()[0] == 4


def test_store_refusals(tmp_path):
    with pytest.raises(StoreError, match="no results store"):
        Store.open(tmp_path / "empty", create=False)
    other = tmp_path / "other"
    other.mkdir()
    conn = sqlite3.connect(other / "results.sqlite")
    conn.execute("CREATE TABLE stuff (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not a batchscope results store"):
        Store.open(other)
    old = tmp_path / "old"
    Store.open(old).close()
    conn = sqlite3.connect(old / "results.sqlite")
    conn.execute("UPDATE meta SET value='0' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="older batchscope"):
        Store.open(old)
    conn = sqlite3.connect(old / "results.sqlite")
    conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer batchscope"):
        Store.open(old)


def _fake_experiment(**kw):
    data = {"name": "fakesweep", "frameworks": ["fake"], "batch_sizes": [2, 4, 8], "model": "tiny_cnn",
            "dataset": "synthetic", "synthetic_shape": [1, 8, 8], "synthetic_samples": 32, "warmup_steps": 1,
            "timed_steps": 2, "timeout_s": 60, **kw}
    return parse_experiment(data, source="fake.toml")


@pytest.mark.process
def test_resume_skips_finished_trials_and_runs_the_rest(tmp_path, monkeypatch, cache_dir):
    register_fake(monkeypatch)
    exp = _fake_experiment()
    first = run_sweep(exp.with_overrides(batch_sizes=(2, 4)), tmp_path, SweepOptions(cache_dir=cache_dir))
    assert [o.status for o in first.outcomes] == ["ok", "ok"]
    with Store.open(tmp_path) as store:
        before = {r["trial_hash"]: r["finished_at"] for r in store.trials()}
    with pytest.raises(StoreError, match="--resume"):
        run_sweep(exp, tmp_path, SweepOptions(cache_dir=cache_dir))
    second = run_sweep(exp, tmp_path, SweepOptions(resume=True, cache_dir=cache_dir))
    assert second.already_done == 2
    assert [o.trial.batch_size for o in second.outcomes] == [8]
    with Store.open(tmp_path) as store:
        rows = store.trials()
        assert sorted(r["batch_size"] for r in rows) == [2, 4, 8]
        assert all(before[h] == f for h, f in ((r["trial_hash"], r["finished_at"]) for r in rows) if h in before)
        assert len(store.runs()) == 2


@pytest.mark.process
def test_a_failing_trial_does_not_stop_the_sweep_and_larger_sizes_are_skipped(tmp_path, monkeypatch, cache_dir):
    register_fake(monkeypatch)
    exp = _fake_experiment(adapters={"fake": {"behaviour": "oom"}}, batch_sizes=[2, 4, 8])
    result = run_sweep(exp, tmp_path, SweepOptions(cache_dir=cache_dir))
    assert [o.status for o in result.outcomes] == ["oom", "skipped", "skipped"]
    assert "larger than batch size 2" in result.outcomes[1].reason
    crash = _fake_experiment(name="crashy", adapters={"fake": {"behaviour": "sigkill"}}, batch_sizes=[2, 4])
    result = run_sweep(crash, tmp_path / "c", SweepOptions(cache_dir=cache_dir))
    assert [o.status for o in result.outcomes] == ["crashed", "crashed"]  # a crash is not an oom: no skipping


@pytest.mark.process
def test_no_skip_larger_runs_every_size(tmp_path, monkeypatch, cache_dir):
    register_fake(monkeypatch)
    exp = _fake_experiment(adapters={"fake": {"behaviour": "oom"}}, skip_larger_after_oom=False,
                           batch_sizes=[2, 4])
    result = run_sweep(exp, tmp_path, SweepOptions(cache_dir=cache_dir))
    assert [o.status for o in result.outcomes] == ["oom", "oom"]


def test_every_worker_metric_is_a_trials_column_typed_by_its_field(tmp_path):
    """Derived, not restated: a WorkerMetrics field is a column of the SQL type of its field's type (a record of its
    own, the step estimate or a schedule's stretches, is the JSON column its metadata names)."""
    import dataclasses

    from harness.store.schema import METRIC_COLUMNS, TRIAL_COLUMNS

    types = dict(TRIAL_COLUMNS)
    assert len(types) == len(TRIAL_COLUMNS), "a column is listed twice"
    columns = [f.metadata.get("column", f.name) for f in dataclasses.fields(WorkerMetrics)]
    for column in columns:
        assert column in types, column
    assert types["step_samples_per_s"] == "REAL" and types["measured_steps_n"] == "INTEGER"
    assert types["drift_flagged"] == "INTEGER" and types["cpu_denormals"] == "TEXT"
    assert types["step_estimate_json"] == "TEXT" and "step_estimate" not in types
    assert [n for n, _ in METRIC_COLUMNS] == columns
    with Store.open(tmp_path) as store:  # what the worker sent is what the row holds, field by field
        run = store.begin_run("test", {}, "", {})
        metrics = WorkerMetrics(step_samples_per_s=1.5, measured_steps_n=7, drift_flagged=True, cpu_denormals="flush",
                                vmdata_peak_mib=12.5, eval_samples=100)
        store.write_trial(dataclasses.replace(outcome(), metrics=metrics), run, {})
        (row,) = store.trials()
    records = {f.name for f in dataclasses.fields(WorkerMetrics) if "column" in f.metadata}
    assert records == {"step_estimate", "schedule"} and types["schedule_json"] == "TEXT"
    for name, value in metrics.to_dict().items():
        assert getattr(row.metrics, name) == getattr(metrics, name), name
        if name not in records:  # a record's column is its JSON text (test_trial_record.py)
            assert row[name] == value, name


def test_a_field_type_the_store_cannot_hold_is_refused():
    import dataclasses

    from harness.store.schema import record_columns

    @dataclasses.dataclass(frozen=True)
    class Odd:
        ok: float | None = None
        bad: list[float] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="no SQLite column type for a field of type"):
        record_columns(Odd)


def test_an_older_store_opens_and_gains_the_new_metric_columns_empty(tmp_path):
    """A store made before a WorkerMetrics field existed keeps its rows and gains the column, NULL in old rows."""
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {}, "", {})
        store.write_trial(outcome(), run, {})
    conn = sqlite3.connect(tmp_path / "results.sqlite")
    conn.execute("ALTER TABLE trials DROP COLUMN vmdata_peak_mib")  # as a store from before the column was made
    conn.commit()
    conn.close()
    with Store.open(tmp_path) as store:
        (row,) = store.trials()
        assert row["vmdata_peak_mib"] is None and row["step_samples_per_s"] == 100.0
        store.write_trial(outcome(batch_size=8), run, {})
        assert len(store.trials()) == 2


def test_where_a_trial_ran_is_stored_and_a_lost_trial_is_not_finished(tmp_path):
    """Issue 23: the placement columns come from the Placement record; a ``lost`` row (its node died) is run again
    by --resume, and the re-run replaces it: never dropped, never doubled."""
    from harness.records import Placement
    from harness.store.schema import PLACEMENT_COLUMNS

    assert [n for n, _ in PLACEMENT_COLUMNS] == ["host", "node_id", "device_index", "concurrent_n", "attempt"]
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {}, "", {})
        lost = outcome(status="lost")
        lost.placement = Placement(host="n1", node_id="abc", attempt=1)
        store.write_trial(lost, run, {})
        assert store.finished_hashes() == set()
        rerun = outcome()
        rerun.placement = Placement(host="n2", node_id="def", device_index=1, concurrent_n=2, attempt=2)
        store.write_trial(rerun, run, {})
        (row,) = store.trials()
        assert (row["status"], row["host"], row["node_id"], row["device_index"], row["concurrent_n"],
                row["attempt"]) == ("ok", "n2", "def", 1, 2, 2)
        assert store.finished_hashes() == {make_trial().trial_hash}
