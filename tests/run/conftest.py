"""Fixtures of the run tests: the real sweep several tests read, one per framework (issue 42)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.shared import once
from tests.tiers import ran

#: the shared sweep's trials, by name: the settings each changes from the base. ``plain`` against ``points`` shows
#: evaluation points leave the training as it was; ``points`` against ``prefetched`` shows prefetching changes no
#: batch (at every point of the curve)
TRIALS: dict[str, dict[str, Any]] = {
    "plain": {"eval_points": 0, "prefetch": False},
    "points": {"eval_points": 3, "prefetch": False},
    "prefetched": {"eval_points": 3, "prefetch": True},
    # a one-stretch batch-size schedule against the same constant size (issue 52): batch 10 leaves each epoch's last
    # batch short (96 = 9 x 10 + 6), which the schedule must cut as the constant size does; 2 points, at 64 and 128
    # samples, fall after steps 7 and 14 by the one rule, where spread over the steps they fell after 7 and 13
    # (test_schedule_frameworks)
    "batch10": {"eval_points": 2, "prefetch": True, "batch_sizes": [10]},
    "schedule10": {"eval_points": 2, "prefetch": True, "batch_sizes": [], "batch_schedule": [[0, 10]]},
}
#: deep_cnn has BatchNorm, so a running statistic an evaluation touched shows in the final figures; the augmentation
#: (crop and flip, drawn per seed, epoch and sample) is done on the prefetch thread when it is on
BASE: dict[str, Any] = {
    "model": "deep_cnn", "dataset": "synthetic", "synthetic_shape": [3, 8, 8], "synthetic_samples": 96,
    "batch_sizes": [8], "epochs": 2, "warmup_steps": 2, "timed_steps": 3, "threads": 1, "device": "cpu",
    "eval_batch_size": 16, "augment": "crop_flip", "augment_pad_px": 2,
}


@dataclass(frozen=True)
class SharedTrial:
    """One trial of a framework's shared sweep: what ``run_sweep`` returned and the row it stored."""

    outcome: Any  # harness.records.TrialOutcome
    row: dict[str, Any]


@pytest.fixture(scope="session")
def framework_sweep(tmp_path_factory: pytest.TempPathFactory,
                    cache_dir: Path) -> Callable[[str], dict[str, SharedTrial]]:
    """``framework_sweep(name)``: the framework's shared trials (:data:`TRIALS`), run once per session, however many
    tests read them (their modules are one unit of work: ``SHARED_UNITS`` in tests/scheduling.py)."""
    from harness.config.experiment import parse_experiment
    from harness.run.sweep import SweepOptions, run_sweep
    from harness.store import Store

    cache: dict[str, dict[str, SharedTrial]] = {}

    def get(framework: str) -> dict[str, SharedTrial]:
        if framework not in cache:
            trials = {}
            with once(f"framework_sweep[{framework}]"):
                for name, settings in TRIALS.items():
                    fields = {"name": name, "frameworks": [framework], **BASE, **settings}
                    if not fields["batch_sizes"]:  # a schedule's sizes are its own: batch_sizes beside it is refused
                        del fields["batch_sizes"]
                    exp = parse_experiment(fields, source="inline")
                    out = tmp_path_factory.mktemp(f"sweep-{framework}-{name}")
                    (outcome,) = run_sweep(exp, out, SweepOptions(cache_dir=cache_dir)).outcomes
                    with Store.open(out, create=False) as store:
                        (row,) = store.trials()
                    trials[name] = SharedTrial(outcome, row)
            ran(framework, "shared sweep")  # tests/tiers.py: make test lists the frameworks that really ran
            if all(str(t.row.get("environment") or "").startswith("managed ") for t in trials.values()):
                ran(framework, "environment")  # its trials ran in its managed environment
            cache[framework] = trials
        return cache[framework]

    return get
