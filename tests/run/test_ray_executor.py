"""Trials as tasks on a (local) Ray cluster: same outcomes as the local executor, stored the same way."""

from __future__ import annotations

import pytest

from harness.config.experiment import parse_experiment
from harness.run.ray_executor import RayExecutor
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import Store
from tests.fakes.registry import register_fake


@pytest.fixture(scope="module")
def ray_executor(tmp_path_factory):
    executor = RayExecutor(init_kwargs={"num_cpus": 2, "configure_logging": False},
                           log_dir=tmp_path_factory.mktemp("raylogs"))
    yield executor
    executor.shutdown()


@pytest.mark.slow
def test_sweep_on_ray_stores_ok_and_failed_trials(tmp_path, monkeypatch, cache_dir, ray_executor):
    register_fake(monkeypatch)
    exp = parse_experiment({"name": "onray", "frameworks": ["fake", "pytorch"], "batch_sizes": [2, 4],
                            "model": "tiny_cnn", "dataset": "synthetic", "synthetic_shape": [1, 8, 8],
                            "synthetic_samples": 32, "warmup_steps": 1, "timed_steps": 2, "threads": 1,
                            "adapters": {"fake": {"behaviour": "error"}}}, source="inline")
    result = run_sweep(exp, tmp_path, SweepOptions(cache_dir=cache_dir, executor=ray_executor))
    by = {(o.trial.framework, o.trial.batch_size): o for o in result.outcomes}
    assert by[("pytorch", 2)].status == "ok" and by[("pytorch", 4)].status == "ok"
    assert by[("pytorch", 4)].metrics.step_samples_per_s > 0
    assert by[("fake", 2)].status == "error" and "ValueError" in by[("fake", 2)].reason
    with Store.open(tmp_path) as store:
        assert len(store.trials()) == 4


def test_without_an_address_the_executor_starts_a_ray_of_its_own(monkeypatch):
    """--ray-address says "default: start a local one": ray.init() with no address joins the latest cluster `ray start`
    left on the machine (and fails there on num_cpus), so the executor asks for "local"; RAY_ADDRESS, Ray's own
    variable, and an address given are passed on."""
    import ray

    asked: list[object] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda address=None, **kwargs: asked.append(address))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    RayExecutor()
    RayExecutor(address="auto")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    RayExecutor()
    assert asked == ["local", "auto", "10.0.0.1:6379"]
