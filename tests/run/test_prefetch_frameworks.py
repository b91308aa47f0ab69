"""Prefetching changes no batch: the same seed trains the same batches, so the same losses, with ``prefetch`` on and
off, in every framework (real frameworks; issue 31, item 7). The per-thread mechanism is in test_prefetch.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.experiment import parse_experiment
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import Store

pytestmark = pytest.mark.slow  # every test here starts a real framework

#: the frameworks whose adapter converts (and on a GPU copies) the batch on the prefetch thread too
AHEAD = {"pytorch", "tensorflow", "jax"}


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet", "jax"])
def test_the_same_seed_gives_the_same_losses_with_prefetch_on_and_off(framework: str, tmp_path: Path,
                                                                      cache_dir: Path) -> None:
    finals = {}
    for prefetch in (False, True):
        exp = parse_experiment({
            "name": f"prefetch{prefetch}", "frameworks": [framework], "model": "tiny_cnn", "dataset": "synthetic",
            "synthetic_shape": [3, 8, 8], "synthetic_samples": 40, "batch_sizes": [8], "epochs": 2,
            "warmup_steps": 1, "timed_steps": 2, "threads": 1, "device": "cpu", "eval_points": 1,
            "eval_batch_size": 16, "augment": "crop_flip", "augment_pad_px": 2, "prefetch": prefetch,
        }, source="inline")
        out = tmp_path / str(prefetch)
        (outcome,) = run_sweep(exp, out, SweepOptions(cache_dir=cache_dir)).outcomes
        assert outcome.status == "ok", outcome.reason
        with Store.open(out, create=False) as store:
            (row,) = store.trials()
        assert row["prefetch"] == int(prefetch) and row["prefetch_device"] == int(prefetch and framework in AHEAD)
        finals[prefetch] = [(p.eval_loss, p.accuracy) for p in outcome.curve]
    assert finals[True] == finals[False]  # bit for bit, at the middle point and the end
