"""TensorFlow and MXNet adapter specifics, the per-adapter interpreter, and a real three-framework sweep.

Framework code runs in subprocesses (a snippet interpreter or the real worker): the pytest process
imports no framework, so TensorFlow, MXNet and PyTorch never meet in one process.
"""

from __future__ import annotations

import json
import stat

import pytest

from harness.config.experiment import parse_experiment
from harness.errors import ConfigError
from harness.records import TrialUnit
from harness.registry import adapter_target
from harness.run.executor import LocalExecutor
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import Store
from tests.conftest import make_trial
from tests.helpers.envs import python_for
from tests.helpers.snippet import run_snippet

BASE = {"name": "t", "frameworks": ["tensorflow"], "batch_sizes": [4]}

pytestmark = pytest.mark.slow  # every test here starts a real framework


# ---- settings, validated in the parent -------------------------------------------------------------


def test_unknown_memory_mode_is_refused_with_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        parse_experiment({**BASE, "adapters": {"tensorflow": {"memory_mode": "greedy"}}}, source="exp.toml")
    text = str(err.value)
    assert "exp.toml" in text and "memory_mode" in text and "'greedy'" in text
    assert "'growth'" in text and "'preallocate'" in text


def test_memory_mode_default_and_choice_are_resolved():
    exp = parse_experiment({**BASE, "adapters": {"tensorflow": {}}})
    assert exp.adapters["tensorflow"].options == {"memory_mode": "growth"}
    exp = parse_experiment({**BASE, "adapters": {"tensorflow": {"memory_mode": "preallocate"}}})
    assert exp.adapters["tensorflow"].options == {"memory_mode": "preallocate"}


def test_mxnet_has_no_memory_mode():
    with pytest.raises(ConfigError, match="no setting 'memory_mode'"):
        parse_experiment({**BASE, "frameworks": ["mxnet"], "adapters": {"mxnet": {"memory_mode": "growth"}}})


def test_missing_interpreter_is_refused(tmp_path):
    missing = tmp_path / "no-such-env" / "bin" / "python"
    with pytest.raises(ConfigError) as err:
        parse_experiment({**BASE, "adapters": {"mxnet": {"python": str(missing)}}}, source="exp.toml")
    assert str(missing) in str(err.value) and "adapters.mxnet.python" in str(err.value)


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "jax", "mxnet"])
def test_adapter_modules_import_no_framework(framework: str) -> None:
    """In each framework's own environment (where the framework is installed, so an import would load it), importing
    every adapter module and listing the adapters loads none; MXNet's numpy patch is applied only when it imports."""
    out = run_snippet("""
        import json, sys
        import adapters.tensorflow, adapters.mxnet, adapters.pytorch, adapters.jax
        from harness.registry import list_adapters
        list_adapters()
        print(json.dumps({m: m in sys.modules for m in ("tensorflow", "mxnet", "torch", "keras", "jax")}
                         | {"numpy.bool": "bool" in vars(sys.modules["numpy"])}))
    """, framework=framework)
    assert {k: v for k, v in out.items() if k != "numpy.bool"} == dict.fromkeys(
        ("tensorflow", "mxnet", "torch", "keras", "jax"), False)
    if framework == "mxnet":  # numpy 1.26 there has no numpy.bool until MXNet's import puts it back
        assert out["numpy.bool"] is False


# ---- TensorFlow ------------------------------------------------------------------------------------


def test_tensorflow_step_is_traced_once_for_every_batch_size():
    out = run_snippet("""
        import json
        import numpy as np
        from adapters.base import OptimizerSpec, RuntimeConfig
        from adapters.tensorflow import TensorFlowAdapter
        from harness.models import build_description, init_weights
        a = TensorFlowAdapter()
        facts = a.setup(RuntimeConfig(device="cpu", threads=1, options={"memory_mode": "preallocate"})).to_dict()
        d = build_description("osu_cnn", (1, 8, 8), 3)
        a.build(d, init_weights(d, 0), OptimizerSpec())
        rng = np.random.default_rng(0)
        for n in (8, 8, 5, 8, 1):  # an epoch's short last batch must not retrace
            x = rng.normal(size=(n, 1, 8, 8)).astype(np.float32)
            a.train_step(a.prepare_batch(x, rng.integers(0, 3, n)))
        mem = a.memory_stats()
        out = {"traces": a.trace_count, "facts": facts, "peak": mem.peak_mib, "source": mem.source}
        print(json.dumps(out))
    """)
    assert out["traces"] == 1
    assert out["facts"]["memory_mode"].startswith("preallocate")
    assert out["facts"]["intra_op_threads"] == 1
    assert out["peak"] is None and out["source"].startswith("none:")


@pytest.mark.no_gpu
@pytest.mark.slow
@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_gpu_asked_without_a_gpu_is_a_clear_error_not_a_cpu_run(framework, tiny_data, tmp_path):
    trial = make_trial(framework, device="gpu")
    unit = TrialUnit(
        trial=trial,
        data=tiny_data,
        order_path=str(tiny_data.write_order(0, 0)),
        adapter_target=adapter_target(framework),
        python=python_for(framework),
    )
    outcome = LocalExecutor(log_dir=tmp_path).run(unit)
    assert outcome.status == "error"
    assert (
        "ConfigError" in outcome.reason
        and "sees no GPU" in outcome.reason
        and outcome.phases[-1][0] == "setup"
    )


# ---- MXNet -----------------------------------------------------------------------------------------


def test_mxnet_patch_stays_in_the_worker_and_threads_are_applied():
    out = run_snippet("""
        import json, os
        from adapters.base import RuntimeConfig
        from adapters.mxnet import MXNetAdapter
        a = MXNetAdapter()
        versions = a.versions()
        import sys
        before = "mxnet" in sys.modules
        facts = a.setup(RuntimeConfig(device="cpu", threads=1)).to_dict()
        print(json.dumps({"versions": versions, "imported_before_setup": before, "facts": facts,
                          "omp": os.environ.get("OMP_NUM_THREADS"), "mem": a.memory_stats().source}))
    """)
    assert out["versions"]["mxnet"] == "1.9.1"
    assert out["imported_before_setup"] is False  # versions() reads metadata: threads can still be set
    assert out["omp"] == "1" and out["facts"]["device"] == "cpu(0)"
    assert out["mem"].startswith("none:")


# ---- the interpreter of an adapter -----------------------------------------------------------------


def test_trial_runs_through_the_configured_interpreter(tmp_path, cache_dir):
    marker = tmp_path / "wrapper-was-used"
    wrapper = tmp_path / "env" / "bin" / "python"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f'#!/bin/sh\necho "$@" > "{marker}"\nexec "{python_for("pytorch")}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    exp = parse_experiment(
        {
            "name": "interp",
            "frameworks": ["pytorch"],
            "batch_sizes": [4],
            "device": "cpu",
            "threads": 1,
            "synthetic_shape": [1, 8, 8],
            "synthetic_classes": 3,
            "synthetic_samples": 32,
            "warmup_steps": 1,
            "timed_steps": 2,
            "eval": False,
            "adapters": {"pytorch": {"python": str(wrapper)}},
        }
    )
    result = run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    [outcome] = result.outcomes
    assert outcome.status == "ok", outcome.reason
    assert marker.read_text().startswith("-m harness.run.worker"), "the worker was not started by the wrapper"


# ---- a real sweep over all three frameworks --------------------------------------------------------


def test_sweep_stores_comparable_rows_for_all_three_frameworks(tmp_path, cache_dir):
    exp = parse_experiment(
        {
            "name": "three",
            "frameworks": ["pytorch", "tensorflow", "mxnet"],
            "batch_sizes": [16],  # 40 samples: two full batches and a short one (8) to compare too
            "model": "tiny_cnn",
            "device": "cpu",
            "threads": 1,
            "synthetic_shape": [1, 8, 8],
            "synthetic_classes": 3,
            "synthetic_samples": 40,
            "epochs": 1,
            "warmup_steps": 1,
            "timed_steps": 2,
            "momentum": 0.9,
            "eval_batch_size": 16,
            "adapters": {"tensorflow": {"memory_mode": "growth"}},
        }
    )
    result = run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    assert [o.status for o in result.outcomes] == ["ok"] * 3, [o.reason for o in result.outcomes]
    with Store.open(tmp_path / "out", create=False) as store:
        rows = store.trials()
    assert {(r["framework"], r["batch_size"]) for r in rows} == {
        (f, 16) for f in exp.frameworks
    }
    for batch_size in (16,):
        same = [r for r in rows if r["batch_size"] == batch_size]
        assert len({r["param_count"] for r in same}) == 1
        assert all(r["epochs_done"] == 1.0 for r in same)
        assert len({r["train_steps_n"] for r in same}) == 1  # the same batches, short last one included
        assert all(0 <= r["accuracy"] <= 1 and r["step_samples_per_s"] > 0 for r in same)
        losses = [r["eval_loss"] for r in same]
        # Same data, order, init and optimizer: after one epoch the frameworks end up close (BN running
        # variance is biased in Keras/MXNet, unbiased in PyTorch: measured within 0.01 %, asked within 1 %).
        assert max(losses) - min(losses) < 0.01 * max(losses), losses
    tf_row = next(r for r in rows if r["framework"] == "tensorflow")
    assert json.loads(tf_row["device_json"])["memory_mode"] == "growth"
    assert json.loads(tf_row["spec_json"])["adapter_options"] == {"memory_mode": "growth"}
