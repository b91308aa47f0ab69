"""The adapters' step-memory estimates (issue 41): PyTorch's MemTracker under FakeTensorMode and JAX's compiled
memory_analysis, each in a fresh interpreter of its managed environment (``run_snippet``), on a small model.

What is checked is what the max-batch search relies on: the estimate is a positive size that grows with the batch,
nearly linearly (the search takes a line through two sizes), nothing of the batch's size is allocated to get it (the
process's peak RSS stays far below the estimate at a large batch), and the trial's own state is left as it was (the
weights after an estimate are those before it, and a training step still runs).
"""

from __future__ import annotations

import pytest

from tests.helpers.snippet import run_snippet

SNIPPET = """
    import json, resource
    import numpy as np
    from adapters.{module} import {cls}
    from adapters.base import OptimizerSpec, RuntimeConfig
    from harness.models import build_description, init_weights

    a = {cls}()
    a.setup(RuntimeConfig(device="cpu", threads=1))
    d = build_description("osu_cnn", (3, 32, 32), 10)
    a.build(d, init_weights(d, 0), OptimizerSpec(name="sgd", lr=0.01, momentum=0.9))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, 4)
    a.train_step(a.prepare_batch(x, y))
    before = [w.copy() for w in a.get_weights()]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mib = {{n: a.estimate_step_memory(n) / 2**20 for n in (1, 64, 256, 4096)}}
    same = all(np.array_equal(p, q) for p, q in zip(before, a.get_weights()))
    a.train_step(a.prepare_batch(x, y))
    print(json.dumps({{"mib": mib, "same": same, "maxrss_growth_mib":
                      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss_before,
                      "seen": str(a.precision_seen())}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(("module", "cls"), [("pytorch", "PyTorchAdapter"), ("jax", "JAXAdapter")])
def test_the_step_memory_estimate_grows_linearly_with_the_batch_and_allocates_none_of_it(module, cls):
    out = run_snippet(SNIPPET.format(module=module, cls=cls), framework=module)
    mib = {int(k): v for k, v in out["mib"].items()}
    assert 0 < mib[1] < mib[64] < mib[256] < mib[4096], mib
    slope = (mib[256] - mib[64]) / 192
    far = mib[256] + slope * (4096 - 256)  # the line through two sizes, 16x beyond the larger one
    assert abs(mib[4096] - far) <= 0.1 * mib[4096], (mib, far)
    # batch 4096 of 3x32x32 through osu_cnn is over a GiB of activations: a process that allocated it would have grown
    # by that much, not by a tenth of it (the estimates and the last step together)
    assert out["maxrss_growth_mib"] < 0.1 * mib[4096], out
    assert out["same"], "the estimate changed the trial's weights"
    assert "float32" in out["seen"], out  # the trial's own reading of its forward pass survived the fake trace
