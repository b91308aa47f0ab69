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
        facts = a.setup(RuntimeConfig(device="cpu", threads=1)).to_dict()
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
    d = build_description("resnet20", (3, 32, 32), 10)
    a.build(d, init_weights(d, 0), OptimizerSpec(name="sgd", lr=0.01, momentum=0.9))
    x, y = np.zeros((8, 3, 32, 32), np.float32), np.zeros(8, np.int64)
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
    # a warm trial states what a fresh process would have compiled: its own time plus what JAX says the cache saved.
    # JAX stores a cache entry's compile time in whole seconds (int(compile_time_secs), jax/_src/compiler.py), so a
    # step that compiles in under a second saves "0 s" by JAX's account: resnet20 (~3 s cold here), not tiny_cnn
    # (~0.9 s, which passed or failed with the machine's speed)
    assert second["cold_s"] > second["compile_s"], second
    assert any((tmp_path / "compile").iterdir())
    off = run_snippet(COMPILE_SNIPPET.replace("CACHE_DIR", "None"))
    assert off["cache"] == "off" and off["cold_s"] == off["compile_s"], off


def test_aligned_copy_starts_at_64_bytes_keeps_the_values_and_copies_only_when_it_must():
    """The host arrays the JAX adapter hands XLA on a CPU (issue 40): aligned, C-contiguous, the dtype asked for."""
    import numpy as np

    from adapters.jax.convert import HOST_ALIGN, aligned_copy

    raw = np.arange(64 * 784 + 4, dtype=np.float32)
    for offset in range(4):  # data at every 4-byte offset modulo 16
        x = raw[offset:offset + 64 * 784].reshape(64, 1, 28, 28)
        out = aligned_copy(x, np.float32)
        assert out.ctypes.data % HOST_ALIGN == 0 and out.flags.c_contiguous and out.dtype == np.float32
        assert np.array_equal(out, x)
        assert aligned_copy(out, np.float32) is out  # already aligned: no copy
    labels = aligned_copy(np.arange(7, dtype=np.int64), np.int32)
    assert labels.dtype == np.int32 and labels.tolist() == list(range(7)) and labels.ctypes.data % HOST_ALIGN == 0
    assert aligned_copy(np.ones((2, 3), np.float64).T, np.float32).flags.c_contiguous  # from a strided float64 view
    assert aligned_copy(np.zeros((0, 1, 2, 2), np.float32), np.float32).shape == (0, 1, 2, 2)


def test_a_thread_made_after_the_narrowing_inherits_it_and_the_prefetch_thread_is_released(monkeypatch):
    """``threads`` narrows XLA's pools by narrowing the CPUs (Linux: of the calling thread, and every thread it makes
    after); the prefetch thread is given them back, so the batch gathering does not share the step's one CPU. Run in
    threads of this process: the test process's own thread keeps its CPUs."""
    import os
    import threading

    from adapters.jax import threads

    cpus = sorted(os.sched_getaffinity(0))
    assert len(cpus) >= 2, "this check needs two CPUs to tell narrowed from released (the project's machines have 2)"
    monkeypatch.setattr(threads, "_BEFORE", [])
    monkeypatch.setenv("XLA_FLAGS", "")  # limit_threads(1) adds XLA's single-thread flags to the environment
    seen: dict[str, list[int]] = {}

    def worker_main_thread() -> None:  # as the worker's training thread: narrowed, then makes the prefetch thread
        seen["chosen"] = threads.limit_threads(1)
        threads.limit_threads(1)  # a second setup in the same process (the contract probe builds several)

        def prefetch_thread() -> None:
            seen["inherited"] = sorted(os.sched_getaffinity(0))
            seen["released"] = threads.release_this_thread()
            seen["after"] = sorted(os.sched_getaffinity(0))

        t = threading.Thread(target=prefetch_thread)
        t.start()
        t.join()
        seen["training_after"] = sorted(os.sched_getaffinity(0))

    t = threading.Thread(target=worker_main_thread)
    t.start()
    t.join()
    assert seen["chosen"] == cpus[:1] and seen["inherited"] == cpus[:1]  # what the prefetch thread had before
    assert seen["released"] == cpus and seen["after"] == cpus
    assert seen["training_after"] == cpus[:1]  # XLA's side stays as narrow as asked
    assert sorted(os.sched_getaffinity(0)) == cpus  # this thread never was narrowed
    monkeypatch.setattr(threads, "_BEFORE", [])
    assert threads.release_this_thread() == []  # nothing narrowed: nothing to release


@pytest.mark.slow
def test_on_a_cpu_xla_takes_the_batch_without_a_copy_on_either_thread():
    """A CPU batch reaches XLA as the host buffer itself (no copy task queued behind a running step, issue 40): the
    device array's buffer is the aligned host array's, from ``prepare_batch`` and from ``prepare_batch_ahead``."""
    import json
    import os
    import subprocess
    import textwrap

    from tests import ROOT
    from tests.helpers.envs import python_for

    code = textwrap.dedent("""
        import json
        import numpy as np
        import adapters.jax.adapter as module
        from adapters.base import OptimizerSpec, RuntimeConfig
        from adapters.jax.adapter import JAXAdapter
        from harness.models import build_description, init_weights

        handed = []  # the host arrays the adapter gives XLA
        def recording(array, dtype, real=module.aligned_copy):
            handed.append(real(array, dtype))
            return handed[-1]
        module.aligned_copy = recording

        a = JAXAdapter()
        a.setup(RuntimeConfig(device="cpu", threads=1))
        d = build_description("osu_cnn", (1, 28, 28), 10)
        a.build(d, init_weights(d, 0), OptimizerSpec())
        rng = np.random.default_rng(0)
        x = rng.normal(size=(65, 1, 28, 28)).astype(np.float32)[1:]  # 16 bytes past an aligned start at best
        y = rng.integers(0, 10, 64)
        out = {}
        for name in ("prepare_batch", "prepare_batch_ahead"):
            handed.clear()
            xb, yb = getattr(a, name)(x, y)
            out[name] = {"zero_copy": [int(h.ctypes.data) for h in handed] == [int(xb.unsafe_buffer_pointer()),
                                                                                int(yb.unsafe_buffer_pointer())],
                         "aligned": int(xb.unsafe_buffer_pointer()) % 64 == 0,
                         "same": bool(np.array_equal(np.asarray(xb), x) and np.array_equal(np.asarray(yb), y))}
            a.train_step((xb, yb))
        print(json.dumps(out))
    """)
    done = subprocess.run([python_for("jax"), "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {name: {"zero_copy": True, "aligned": True, "same": True}
                   for name in ("prepare_batch", "prepare_batch_ahead")}
