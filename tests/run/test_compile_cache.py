"""Compilation measured apart (issue 31, item 4): the ``compile_cache`` key, the worker's ``compile_*`` figures from
an adapter that compiles (a fake one), none from one that does not, and the full batch prepared before the clock."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from adapters.base import CompileStats
from harness.config.experiment import parse_experiment
from harness.records import WorkerMetrics
from harness.run.worker.steps import StepRunner
from harness.run.worker.trial import compile_cache_dir, compile_fields
from harness.store.schema import METRIC_COLUMNS
from tests.conftest import make_trial
from tests.fakes.adapter import FakeAdapter

BASE = {"name": "c", "frameworks": ["jax"], "batch_sizes": [4]}


class CompilingAdapter(FakeAdapter):
    """Compiles per shape, as JAX does: records the sizes it was asked to prepare."""

    compiles_per_shape = True

    def __init__(self) -> None:
        super().__init__()
        self.prepared: list[int] = []

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        self.prepared.append(len(x))
        return x, y

    def compile_stats(self) -> CompileStats | None:
        return CompileStats(compile_s=0.5, cache="warm", cold_s=4.5) if self.prepared else None


def test_the_key_defaults_on_turns_off_and_leaves_the_hash_alone():
    from harness.run.planner import _trial

    assert parse_experiment(BASE).compile_cache is True
    exp = parse_experiment({**BASE, "compile_cache": False})

    class Data:
        key = "k"

    assert _trial(exp, "", "jax", 4, 0, {}, Data()).compile_cache is False  # type: ignore[arg-type]
    with pytest.raises(Exception, match="compile_cache"):
        parse_experiment({**BASE, "compile_cache": "no"})
    # what the cache did is stored with each trial; the trial itself is the same one
    assert make_trial(compile_cache=False).trial_hash == make_trial().trial_hash


def test_the_cache_lives_in_the_cache_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path))
    assert compile_cache_dir() == tmp_path / "compile"


def test_the_figures_come_from_an_adapter_that_compiles_and_none_from_one_that_does_not():
    runner = StepRunner(adapter := CompilingAdapter(), make_trial(batch_size=4, epochs=1), np.zeros((10, 1, 2, 2)),
                        np.zeros(10, np.int64), 10)
    runner.warm_shapes()
    # the full batch and the epoch's short last one (10 = 4 + 4 + 2), both before the training clock
    assert adapter.prepared == [4, 2], adapter.prepared
    assert compile_fields(adapter) == {"compile_s": 0.5, "compile_cache": "warm", "compile_cold_s": 4.5}
    plain = FakeAdapter()
    StepRunner(plain, make_trial(batch_size=4, epochs=1), np.zeros((10, 1, 2, 2)), np.zeros(10, np.int64),
               10).warm_shapes()
    assert compile_fields(plain) == {}


def test_a_batch_larger_than_the_data_is_prepared_whole():
    adapter = CompilingAdapter()
    StepRunner(adapter, make_trial(batch_size=16), np.zeros((10, 1, 2, 2)), np.zeros(10, np.int64), 10).warm_shapes()
    assert adapter.prepared == [16]


def test_the_figures_are_trials_columns():
    names = {name for name, _ in METRIC_COLUMNS}
    assert {"compile_s", "compile_cache", "compile_cold_s"} <= names
    assert WorkerMetrics.from_dict(WorkerMetrics(compile_s=1.0, compile_cache="cold").to_dict()).compile_cache == "cold"
