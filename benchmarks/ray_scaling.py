"""Issue 23, docs/scaling.md (a) and (b): a 4-trial CPU sweep on a simulated 2-node Ray cluster against the serial
local run, and Ray's per-trial overhead (submit -> worker ready) against the local executor's.

The cluster is ``ray.cluster_utils.Cluster`` on this machine: a head with no CPUs and two nodes of one CPU each, so
two trials run at once (one chain per node). The sweep: PyTorch, tiny_cnn on synthetic 1x8x8 data, 1 thread, 2
sizes x 2 repeats (two chains). Runs alternate serial / cluster, ``--repeats`` times; the wall time of each whole
``run_sweep`` (the store's writes included, the cluster's start not) and the ratio per pair, then the median.

Overhead: one trial of the framework-free fake adapter (tests/fakes/adapter.py: no framework import, so what is left
is the executor's own cost) from the executor's call to the worker's first ``warmup`` phase (the model is built),
``--overhead-n`` times each through LocalExecutor.run and RayExecutor.run on the cluster, medians.

    /work/bin/timed .venv/bin/python benchmarks/ray_scaling.py --repeats 3
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness import registry  # noqa: E402
from harness.config.experiment import parse_experiment  # noqa: E402
from harness.run.executor import LocalExecutor  # noqa: E402
from harness.run.sweep import SweepOptions, run_sweep, unit_for  # noqa: E402


def _experiment(name: str, framework: str, steps: int) -> Any:
    return parse_experiment({"name": name, "frameworks": [framework], "batch_sizes": [16, 32], "repeats": 2,
                             "model": "tiny_cnn", "dataset": "synthetic", "synthetic_shape": [1, 8, 8],
                             "synthetic_samples": 256, "warmup_steps": 2, "timed_steps": steps, "threads": 1,
                             "device": "cpu", "eval": False}, source="benchmarks/ray_scaling.py")


def _sweep_wall(exp: Any, out: Path, cache: Path, executor: Any) -> tuple[float, Any]:
    t0 = time.monotonic()
    result = run_sweep(exp, out, SweepOptions(cache_dir=cache, executor=executor))
    return time.monotonic() - t0, result


def _ready_s(executor: Any, unit: Any) -> float:
    t0 = time.monotonic()
    outcome = executor.run(unit)
    warm = [t for name, t in outcome.phases if name == "warmup"]
    if outcome.status != "ok" or not warm:
        raise SystemExit(f"overhead trial did not run: {outcome.status} {outcome.reason}")
    return float(warm[0]) - t0


def _noop() -> None:
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="pytorch")
    parser.add_argument("--steps", type=int, default=400, help="timed steps per trial (default 400)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--overhead-n", type=int, default=7)
    parser.add_argument("--noop-n", type=int, default=500)
    args = parser.parse_args(argv)

    import ray
    from ray.cluster_utils import Cluster

    from harness.run.ray_executor import RayExecutor

    eps = dict(registry._entry_points())  # the fake adapter, as tests/fakes/registry.py registers it
    eps["fake"] = md.EntryPoint(name="fake", value="tests.fakes.adapter:FakeAdapter", group=registry.GROUP)
    registry._entry_points = lambda: eps  # type: ignore[assignment]

    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    print(f"cluster of 2 one-CPU nodes started in {time.monotonic() - t0:.1f} s (not counted below)")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            cache = base / "cache"
            on_ray = RayExecutor(log_dir=base / "logs")
            local = LocalExecutor(log_dir=base / "logs")
            ratios = []
            for r in range(args.repeats):
                exp = _experiment(f"scale{r}", args.framework, args.steps)
                serial_s, _ = _sweep_wall(exp, base / f"serial{r}", cache, local)
                ray_s, result = _sweep_wall(exp, base / f"ray{r}", cache, on_ray)
                nodes = {o.placement.node_id for o in result.outcomes}
                ratios.append(serial_s / ray_s)
                print(f"repeat {r + 1}: serial {serial_s:.1f} s, 2-node cluster {ray_s:.1f} s "
                      f"(at most {result.peak_in_flight} at once, {len(nodes)} nodes): ratio {ratios[-1]:.2f}")
            print(f"(a) serial / cluster wall, median of {len(ratios)}: {statistics.median(ratios):.2f} "
                  f"(limit 2); all: {', '.join(f'{x:.2f}' for x in ratios)}")

            exp = parse_experiment({"name": "overhead", "frameworks": ["fake"], "batch_sizes": [4],
                                    "model": "tiny_cnn", "dataset": "synthetic", "synthetic_shape": [1, 8, 8],
                                    "synthetic_samples": 32, "warmup_steps": 1, "timed_steps": 1, "threads": 1,
                                    "device": "cpu", "eval": False}, source="benchmarks/ray_scaling.py")
            from harness.data import prepare
            from harness.run.planner import data_request, plan

            data = prepare(data_request(exp), cache)
            unit = unit_for(exp, plan(exp, data)[0], data)
            loc, ray_ = [], []
            for _ in range(args.overhead_n):  # alternated
                loc.append(_ready_s(local, unit))
                ray_.append(_ready_s(on_ray, unit))
            lm, rm = statistics.median(loc), statistics.median(ray_)
            print(f"(b) call -> worker ready (fake adapter), median of {args.overhead_n}: local {lm * 1000:.0f} ms, "
                  f"Ray {rm * 1000:.0f} ms: Ray adds {(rm - lm) * 1000:.0f} ms per trial "
                  f"(local {min(loc) * 1000:.0f}-{max(loc) * 1000:.0f}, Ray {min(ray_) * 1000:.0f}-"
                  f"{max(ray_) * 1000:.0f})")
            # (b2) Ray's own scheduling rate: tasks that do nothing, submitted at once, until all have returned
            noop = ray.remote(num_cpus=0, max_retries=0)(_noop)
            ray.get([noop.remote() for _ in range(20)])  # workers started
            rates = []
            for _ in range(3):
                t1 = time.monotonic()
                ray.get([noop.remote() for _ in range(args.noop_n)])
                rates.append(args.noop_n / (time.monotonic() - t1))
            print(f"(b2) Ray schedules and returns {statistics.median(rates):.0f} no-op tasks/s on this cluster "
                  f"(median of 3 x {args.noop_n}; {', '.join(f'{r:.0f}' for r in rates)})")
    finally:
        ray.shutdown()
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
