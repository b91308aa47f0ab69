"""``make bench`` runs its harness trials with exactly the sweep's worker environment (issue 22).

A fixed glibc mmap threshold once reached every sweep worker through a constant the benchmarks did not use, so
``make bench`` reported PyTorch at 1.10x of a bare loop while the sweep ran it at 0.6x. The benchmarks now build
their trials' environment with the sweep's own function; these tests fail if either side goes its own way.
"""

from __future__ import annotations

import sys

from harness.data import DataRequest, prepare
from harness.run import sweep
from tests import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import common


def _unit(tmp_path, **kw):
    data = prepare(DataRequest(name="synthetic", synthetic_shape=(1, 8, 8), synthetic_samples=64), tmp_path)
    return common.bench_unit("pytorch", data, 8, 1, 1, 2, **kw)


def test_the_bench_trial_gets_the_sweeps_worker_env(tmp_path):
    unit = _unit(tmp_path)
    assert unit.env == sweep.worker_env(unit.trial, {"gpus": []})
    assert not any(key.startswith("MALLOC_") for key in unit.env)  # the allocator users train with


def test_a_setting_the_sweep_gives_its_workers_reaches_the_bench_too(tmp_path, monkeypatch):
    # whatever the sweep's function starts to add, the bench's trials get it: there is no second copy to forget
    from harness.envs.runtime import FrameworkRuntime

    monkeypatch.setattr(FrameworkRuntime, "worker_env", lambda *a: {"MALLOC_ARENA_MAX": "2"})
    unit = _unit(tmp_path)
    assert unit.env == {"MALLOC_ARENA_MAX": "2"} == sweep.worker_env(unit.trial, {})


def test_a_compared_setting_is_added_on_top_only_when_asked(tmp_path):
    unit = _unit(tmp_path, extra_env={"MALLOC_MMAP_THRESHOLD_": "131072"})
    assert unit.env == sweep.worker_env(unit.trial, {}) | {"MALLOC_MMAP_THRESHOLD_": "131072"}
