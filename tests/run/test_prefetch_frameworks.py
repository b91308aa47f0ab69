"""Prefetching changes no batch: the same seed trains the same batches, so the same losses, with ``prefetch`` on and
off, in every framework (real frameworks; issue 31, item 7; MXNet's conversion ahead and its queued steps, issue
40). The per-thread mechanism is in test_prefetch.py."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from tests import ROOT
from tests.helpers.envs import python_for

pytestmark = pytest.mark.slow  # every test here starts a real framework

#: the frameworks whose adapter converts (and on a GPU copies) the batch on the prefetch thread too
AHEAD = {"pytorch", "tensorflow", "mxnet", "jax"}
#: the frameworks whose adapter queues steps (``queued_steps``): their step clock is read over windows of steps
QUEUED = {"mxnet"}


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet", "jax"])
def test_the_same_seed_gives_the_same_losses_with_prefetch_on_and_off(framework: str, framework_sweep) -> None:
    """The framework's shared sweep (tests/run/conftest.py): two trials alike but for ``prefetch``, augmented."""
    trials = framework_sweep(framework)
    finals = {}
    for name in ("points", "prefetched"):
        outcome, row = trials[name].outcome, trials[name].row
        assert outcome.status == "ok", outcome.reason
        prefetch = bool(row["prefetch"])
        assert row["prefetch_device"] == int(prefetch and framework in AHEAD)
        # MXNet queues its post-warm-up steps in windows where batches are prepared ahead (issue 40): the same losses
        assert row["step_clock_window"] == (10 if prefetch and framework in QUEUED else 1)
        assert row["augment"] == "crop_flip"
        finals[prefetch] = [(p.eval_loss, p.accuracy) for p in outcome.curve]
    assert sorted(finals) == [False, True] and len(finals[True]) > 1
    assert finals[True] == finals[False]  # bit for bit, at the middle points and the end


def test_mxnet_converts_ahead_on_one_openmp_thread_and_the_same_batch() -> None:
    """MXNet's ``prepare_batch_ahead`` on a second thread starts no OpenMP team of its own (the pitfall of issue 12:
    a copy over MXNet's parallel size, 200,000 floats, on a thread not told otherwise starts ``OMP_NUM_THREADS`` - 1
    more threads beside the engine's), and gives the batch ``prepare_batch`` gives. The same copy through
    ``prepare_batch`` on a fresh thread is the control: it does start one, so the count can see it."""
    code = textwrap.dedent("""
        import json, os, threading
        import numpy as np
        from adapters.base import OptimizerSpec, RuntimeConfig
        from adapters.mxnet import MXNetAdapter
        from harness.models import build_description, init_weights

        a = MXNetAdapter()
        a.setup(RuntimeConfig(device="cpu", threads=2))
        d = build_description("osu_cnn", (3, 32, 32), 10)
        a.build(d, init_weights(d, 0), OptimizerSpec())
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(256, 3, 32, 32)), rng.integers(0, 10, 256)  # 786,432 floats: a parallel copy
        a.train_step(a.prepare_batch(x, y))

        def tasks():  # the process's threads (ids): threads started during a call are the new ones
            return set(os.listdir("/proc/self/task"))

        def on_a_fresh_thread(prepare):
            seen = {}
            def run():
                before = tasks()
                seen["batch"] = [b.asnumpy() for b in prepare(x, y)]
                seen["extra"] = len(tasks() - before)  # not a difference of counts: others may end meanwhile
            t = threading.Thread(target=run)
            t.start()
            t.join()
            return seen

        ahead, control = on_a_fresh_thread(a.prepare_batch_ahead), on_a_fresh_thread(a.prepare_batch)
        again = on_a_fresh_thread(a.prepare_batch_ahead)  # a second prefetch thread is told too
        same = all(np.array_equal(p, q) and p.dtype == q.dtype for p, q in zip(ahead["batch"], control["batch"]))
        print(json.dumps({"ahead": ahead["extra"], "again": again["extra"], "control": control["extra"],
                          "same": same}))
    """)
    done = subprocess.run([python_for("mxnet"), "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"ahead": 0, "again": 0, "control": 1, "same": True}
