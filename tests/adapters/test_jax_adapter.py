"""JAX adapter specifics: settings validated in the parent; compilation, threads and devices in a subprocess.

JAX runs in a fresh interpreter of its managed environment (``run_snippet``), never in the pytest process; `make test`
builds that environment first, so these tests never skip.
"""

from __future__ import annotations

import pytest

from harness.config.experiment import parse_experiment
from harness.errors import ConfigError
from tests.helpers.snippet import run_snippet

BASE = {"name": "t", "frameworks": ["jax"], "batch_sizes": [4]}


def test_memory_mode_is_validated_in_the_parent():
    exp = parse_experiment({**BASE, "adapters": {"jax": {}}})
    assert exp.adapters["jax"].options == {"memory_mode": "growth"}
    with pytest.raises(ConfigError) as err:
        parse_experiment({**BASE, "adapters": {"jax": {"memory_mode": "greedy"}}}, source="exp.toml")
    assert "'greedy'" in str(err.value) and "'preallocate'" in str(err.value)


def test_amp_is_refused_for_jax():
    with pytest.raises(ConfigError, match="'amp' is not run by the jax adapter on any device"):
        parse_experiment({**BASE, "precision": "amp"})


@pytest.mark.slow
def test_a_short_last_batch_compiles_in_prepare_batch_not_in_the_step():
    out = run_snippet("""
        import json, time
        import numpy as np
        from adapters.jax import JAXAdapter
        from adapters.base import OptimizerSpec, RuntimeConfig
        from harness.models import build_description, init_weights

        a = JAXAdapter()
        facts = a.setup(RuntimeConfig(device="cpu", threads=1))
        d = build_description("tiny_cnn", (1, 8, 8), 3)
        a.build(d, init_weights(d, 0), OptimizerSpec(name="sgd", lr=0.01, momentum=0.9))
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(20, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, 20)
        steps = []
        for xb, yb in ((x[:8], y[:8]), (x[8:16], y[8:16]), (x[16:], y[16:])):   # 8, 8, then a short 4
            batch = a.prepare_batch(xb, yb)
            t0 = time.perf_counter(); a.train_step(batch); steps.append(time.perf_counter() - t0)
        compiled_after_train = a.trace_count
        ev = a.evaluate(x, y, 16)        # eval batches (16, 4) compile no train step
        print(json.dumps({"traces": compiled_after_train, "traces_after_eval": a.trace_count,
                          "facts": facts, "samples": ev.samples, "mem": a.memory_stats().source}))
    """)
    assert out["traces"] == 2, out  # batch 8 and the short batch 4, each compiled once, in prepare_batch
    assert out["traces_after_eval"] == 2 and out["samples"] == 20, out
    assert out["facts"]["threads"] == 1 and out["facts"]["cpus"] and out["facts"]["platform"] == "cpu", out
    assert "none: XLA's CPU client" in out["mem"]


@pytest.mark.slow
def test_device_gpu_without_a_gpu_is_refused_naming_the_check():
    out = run_snippet("""
        import json
        from adapters.jax import JAXAdapter
        from adapters.base import RuntimeConfig
        from harness.errors import ConfigError
        try:
            JAXAdapter().setup(RuntimeConfig(device="gpu"))
            print(json.dumps({"error": None}))
        except ConfigError as e:
            print(json.dumps({"error": str(e)}))
    """)
    if out["error"] is None:
        pytest.skip("this machine has a GPU that JAX sees: the refusal cannot be shown here")
    assert "JAX sees no GPU (jax.devices('gpu') finds none" in out["error"], out


COMPILE_SNIPPET = """
    import json
    import numpy as np
    from adapters.jax import JAXAdapter
    from adapters.base import OptimizerSpec, RuntimeConfig
    from harness.models import build_description, init_weights

    a = JAXAdapter()
    a.setup(RuntimeConfig(device="cpu", threads=1, compile_cache_dir=CACHE_DIR))
    d = build_description("tiny_cnn", (1, 8, 8), 3)
    a.build(d, init_weights(d, 0), OptimizerSpec(name="sgd", lr=0.01, momentum=0.9))
    x, y = np.zeros((8, 1, 8, 8), np.float32), np.zeros(8, np.int64)
    a.prepare_batch(x, y)
    s = a.compile_stats()
    print(json.dumps({"compile_s": s.compile_s, "cache": s.cache, "cold_s": s.cold_s}))
"""


@pytest.mark.slow
def test_a_second_process_compiles_from_the_warm_persistent_cache(tmp_path):
    code = COMPILE_SNIPPET.replace("CACHE_DIR", repr(str(tmp_path / "compile")))
    first, second = run_snippet(code), run_snippet(code)
    assert first["cache"] == "cold" and second["cache"] == "warm", (first, second)
    assert first["compile_s"] > 0 and second["compile_s"] > 0
    # a warm trial states what a fresh process would have compiled: its own time plus what JAX says the cache saved
    assert second["cold_s"] > second["compile_s"], second
    assert any((tmp_path / "compile").iterdir())
    off = run_snippet(COMPILE_SNIPPET.replace("CACHE_DIR", "None"))
    assert off["cache"] == "off" and off["cold_s"] == off["compile_s"], off
