"""The worker's gradient-noise measurement: drawn at the evaluation points, stored one row per point, refused where
it could not run. No framework: the fake adapter's "gradient" is the batch's mean input (tests/fakes/adapter.py)."""

from __future__ import annotations

import importlib.metadata as md
import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness import registry
from harness.config.experiment import has_hook, parse_experiment
from harness.errors import ConfigError
from harness.noise import BIG_FACTOR, NoiseRecord, estimate_from_rows, noise_scale
from harness.records import WorkerMetrics
from harness.run.protocol import PROTOCOL_VERSION, Result
from harness.run.worker.evaluation import PointContext
from harness.run.worker.noise import measure_noise
from harness.store import Store
from harness.store.export import export
from tests.conftest import make_trial
from tests.fakes.registry import register_fake
from tests.helpers.fake_trial import run_fake

LEGACY = "tests.contract.legacy.pytorch_v1:PyTorchV1Adapter"


class _MeanOfInputs:
    """Each example's gradient is its input row: G = the rows' mean, Σ their (population) covariance."""

    def flat_gradient(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64).reshape(len(x), -1).mean(axis=0)


def test_the_measurement_recovers_the_noise_scale_of_its_data():
    rng = np.random.default_rng(0)
    n, d, b = 20_000, 12, 8
    x = (rng.normal(size=(n, d)) * rng.uniform(0.5, 2.0, size=d) + 0.3).astype(np.float32)
    mean, cov_trace = x.astype(np.float64).mean(axis=0), float(x.astype(np.float64).var(axis=0).sum())
    # batches without replacement from n examples: the noise term is scaled by (n - b) / (n - 1)
    want = cov_trace * (n - b) / (n - 1) / float(mean @ mean)
    ctx = PointContext(point=0, step=10, samples_seen=80, final=False, trial=make_trial(batch_size=b),
                       adapter=_MeanOfInputs(), x_train=x.reshape(n, 1, 3, 4), y_train=np.zeros(n, np.int64),
                       order=np.zeros((1, n), np.int64))  # type: ignore[arg-type]
    record = measure_noise(ctx, groups=2500)
    assert (record.b_small, record.b_big, record.small_n, record.big_n) == (b, BIG_FACTOR * b, 10_000, 2500)
    assert record.x_small_mean is not None and record.x_big_mean is not None and record.noise_s > 0
    got = noise_scale(record.b_small, record.x_small_mean, record.b_big, record.x_big_mean).b_simple
    assert got is not None and abs(got - want) / want < 0.10, (got, want)
    again = measure_noise(ctx, groups=3)
    assert again.x_small_mean == measure_noise(ctx, groups=3).x_small_mean  # drawn from (seed, step): repeatable


@pytest.mark.process
def test_a_trial_measures_at_every_point_and_the_rows_are_stored_and_exported(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, tmp_path, eval_points=2, gradient_noise=3)
    assert outcome.status == "ok", outcome.reason
    noise = outcome.gradient_noise
    assert [r.step for r in noise] == [p.step for p in outcome.curve] and len(noise) == 3
    assert all((r.b_small, r.b_big, r.small_n, r.big_n) == (8, 32, 12, 3) for r in noise)
    assert all(r.x_small_mean and r.x_big_mean and r.x_small_mean > r.x_big_mean > 0 for r in noise)
    assert outcome.metrics is not None and outcome.metrics.eval_total_s is not None
    assert outcome.metrics.eval_total_s >= sum(r.noise_s for r in noise) > 0  # off the training clock, recorded
    out = tmp_path / "out"
    with Store.open(out) as store:
        store.write_trial(outcome, store.begin_run("test", {"name": "test"}, "", {}), {})
        rows = store.gradient_noise(outcome.trial.trial_hash)
    assert [NoiseRecord.from_dict(r) for r in rows] == noise
    assert all(r.groups is not None and len(r.groups) == 3 for r in noise)
    est = estimate_from_rows(rows)
    assert est is not None and est.points_n == 3 and est.trials_n == 1 and est.b_simple is not None
    assert est.b_simple > 0
    export(out, "csv")
    exported = pd.read_csv(out / "export" / "gradient_noise.csv")
    assert len(exported) == 3 and set(exported["b_big"]) == {32}


@pytest.mark.process
def test_a_trial_without_the_key_measures_nothing(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, tmp_path, eval_points=2)
    assert outcome.status == "ok" and outcome.gradient_noise == []
    assert "gradient_noise" not in make_trial().to_dict() or make_trial().gradient_noise == 0
    assert make_trial().trial_hash == make_trial(gradient_noise=0).trial_hash  # old stores keep their hashes
    assert make_trial().trial_hash != make_trial(gradient_noise=2).trial_hash


def test_the_result_carries_the_rows_and_the_protocol_version_says_so():
    assert PROTOCOL_VERSION >= 4  # 4 brought the noise rows; later versions carry them still
    record = NoiseRecord(point=0, step=5, samples_seen=40, b_small=8, b_big=32, x_small_mean=2.0, x_big_mean=1.0,
                         small_n=4, big_n=1, noise_s=0.1)
    raw = {"metrics": {}, "step_times_ms": [1.0], "phase_steps": {}, "gradient_noise": [record.to_dict()], "t": 0.0}
    assert Result.from_dict(raw).gradient_noise == (record,)
    assert Result.from_dict({**raw, "gradient_noise": []}).gradient_noise == ()


def test_a_rows_groups_are_a_record_on_the_wire_and_parsed_by_the_store(tmp_path: Path):
    """Issue 51, item 3: the groups (the uncertainty's units, issue 52) are pairs in the record, a list on the wire
    and JSON text in the ``groups_json`` column, parsed by the store (``groups``) for harness.noise to read."""
    from harness.records import TrialOutcome
    from harness.run.protocol import decode, encode

    groups = ((3.0, 1.5), (None, 2.0))  # a figure that was not finite is None
    record = NoiseRecord(point=0, step=5, samples_seen=40, b_small=8, b_big=32, x_small_mean=3.0, x_big_mean=1.5,
                         small_n=8, big_n=2, noise_s=0.1, groups=groups)
    got = decode(encode(Result(metrics=WorkerMetrics(), step_times_ms=(1.0,), phase_steps={},
                               gradient_noise=(record,))))
    assert isinstance(got, Result) and got.gradient_noise == (record,)
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {"name": "test"}, "", {})
        old = NoiseRecord(**{**record.to_dict(), "groups": None, "step": 6, "point": 1})
        store.write_trial(TrialOutcome(trial=make_trial(), status="ok", gradient_noise=[record, old]), run, {})
        rows = store.gradient_noise()
    assert json.loads(rows[0]["groups_json"]) == [[3.0, 1.5], [None, 2.0]] and rows[0]["groups"] == groups
    assert rows[1]["groups_json"] is None and rows[1]["groups"] is None
    assert [NoiseRecord.from_dict(r) for r in rows] == [record, old]


def test_an_old_store_without_the_table_reads_as_no_rows(tmp_path: Path):
    with Store.open(tmp_path):
        pass
    conn = sqlite3.connect(tmp_path / "results.sqlite")
    conn.execute("DROP TABLE gradient_noise")
    conn.commit()
    conn.close()
    with Store.open(tmp_path, create=False, readonly=True) as store:
        assert store.gradient_noise() == []
    written = export(tmp_path, "csv")
    assert "gradient_noise" in {p.stem for p in written}  # exported empty, with its columns


BASE: dict[str, Any] = {"name": "t", "frameworks": ["fake"], "batch_sizes": [8]}


def test_the_key_is_refused_where_it_would_record_nothing(monkeypatch):
    register_fake(monkeypatch)
    assert parse_experiment({**BASE, "gradient_noise": 4}).gradient_noise == 4
    with pytest.raises(ConfigError, match=r"gradient_noise: 4: the measurement runs at the evaluation points"):
        parse_experiment({**BASE, "gradient_noise": 4, "eval": False})
    with pytest.raises(ConfigError, match=r"gradient_noise: -1 must be >= 0"):
        parse_experiment({**BASE, "gradient_noise": -1})
    real = dict(registry._entry_points())
    legacy = md.EntryPoint(name="pytorch_v1", value=LEGACY, group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real, "pytorch_v1": legacy})
    with pytest.raises(ConfigError, match=r"the pytorch_v1 adapter has no flat_gradient\(\) \(the capability "
                                          r"`flat_gradient`\)"):
        parse_experiment({**BASE, "frameworks": ["fake", "pytorch_v1"], "gradient_noise": 2})
    assert parse_experiment({**BASE, "frameworks": ["pytorch_v1"]}).gradient_noise == 0  # off: it runs as before


def test_the_parents_hook_check_agrees_with_the_capability_table():
    from adapters.base import capabilities
    from tests.contract.legacy.pytorch_v1 import PyTorchV1Adapter
    from tests.fakes.adapter import FakeAdapter

    for cls in (*(registry.adapter_class(n) for n in ("pytorch", "tensorflow", "mxnet", "jax")), PyTorchV1Adapter,
                FakeAdapter):
        assert has_hook(cls, "flat_gradient") == ("flat_gradient" in capabilities(cls)), cls
    assert not has_hook(SimpleNamespace, "flat_gradient")  # a class that has none at all


def test_the_small_batch_is_the_trials_up_to_the_cap():
    from harness.noise import B_SMALL_MAX

    x = np.ones((1000, 1, 2, 2), np.float32)
    for batch, want in ((8, 8), (B_SMALL_MAX, B_SMALL_MAX), (1024, B_SMALL_MAX)):
        ctx = PointContext(point=0, step=1, samples_seen=batch, final=False, trial=make_trial(batch_size=batch),
                           adapter=_MeanOfInputs(), x_train=x, y_train=np.zeros(1000, np.int64),
                           order=np.zeros((1, 1000), np.int64))  # type: ignore[arg-type]
        record = measure_noise(ctx, groups=1)
        assert (record.b_small, record.b_big) == (want, BIG_FACTOR * want), batch


def test_the_cli_refuses_it_for_a_plugin_without_the_capability_and_writes_nothing(monkeypatch, tmp_path, capsys):
    from harness.cli import main

    real = dict(registry._entry_points())
    legacy = md.EntryPoint(name="pytorch_v1", value=LEGACY, group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real, "pytorch_v1": legacy})
    exp = tmp_path / "noise.toml"
    exp.write_text('name = "n"\nframeworks = ["pytorch_v1"]\nbatch_sizes = [8]\ngradient_noise = 2\n')
    assert main(["run", str(exp), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "pytorch_v1 adapter has no flat_gradient()" in err and "`flat_gradient`" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()  # refused before anything was written
