"""Sampler overhead: a real trial's samples/s with the sampler at its interval against no sampler.

Runs the same trial (a fresh worker each time) alternately without and with the sampler, in ABBA
order so a slow drift of the machine cancels out, and prints every run, the per-pair ratios and
their median (with / without). Target on CPU: median ratio >= 0.995.

    PYTHONPATH=. python benchmarks/sampler_overhead.py [--pairs 6] [--framework pytorch] [--batch-size 64]

Timing on a shared machine is noisy (±10-25 % per run): read the median, not one pair.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.config.experiment import parse_experiment
from harness.data import prepare
from harness.monitor.sampler import monitor_factory_for
from harness.run.executor import LocalExecutor
from harness.run.planner import data_request, plan
from harness.run.sweep import unit_for


def main() -> int:
    """Run the benchmark and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6, help="off/on pairs (>= 5)")
    ap.add_argument("--framework", default="pytorch")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--timed-steps", type=int, default=100)
    ap.add_argument("--device", choices=("cpu", "auto", "gpu"), default="cpu",
                    help="cpu (the target's setting) or gpu/auto to include NVML on a GPU machine")
    ap.add_argument("--interval-ms", type=float, default=100.0, help="sampler interval (default 100)")
    args = ap.parse_args()
    exp = parse_experiment({
        "name": "sampler_overhead", "frameworks": [args.framework], "batch_sizes": [args.batch_size],
        "model": "osu_cnn", "synthetic_shape": [1, 28, 28], "synthetic_samples": 2048, "warmup_steps": 5,
        "timed_steps": args.timed_steps, "eval": False, "device": args.device, "threads": 1,
        "sample_interval_ms": args.interval_ms, "timeout_s": 600})
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare(data_request(exp), Path(tmp))
        trial = plan(exp, data)[0]
        unit = unit_for(exp, trial, data)
        factory, notice = monitor_factory_for(exp)
        print(notice)
        print(f"trial: {args.framework} osu_cnn 1x28x28 bs={args.batch_size}, {args.timed_steps} timed "
              f"steps, 1 thread; {args.pairs} pairs in ABBA order\n")
        runs: dict[str, list[float]] = {"off": [], "on": []}
        parent_cpu_pct: dict[str, list[float]] = {"off": [], "on": []}
        samples_n: list[int] = []
        for i in range(args.pairs):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")
            for mode in order:
                ex = LocalExecutor(monitor_factory=factory if mode == "on" else None,
                                   log_dir=Path(tmp) / "logs")
                cpu0, t0 = time.process_time(), time.monotonic()
                outcome = ex.run(unit)
                parent_cpu_pct[mode].append((time.process_time() - cpu0) / (time.monotonic() - t0) * 100.0)
                if outcome.status != "ok":
                    print(f"trial failed ({outcome.status}): {outcome.reason}", file=sys.stderr)
                    return 1
                sps = float(outcome.metrics.step_samples_per_s or 0.0) if outcome.metrics else 0.0
                runs[mode].append(sps)
                if mode == "on":
                    samples_n.append(int(outcome.monitor.aggregates["samples_n"]))
                print(f"pair {i + 1} sampler {mode:<3}: {sps:9.1f} samples/s", flush=True)
    ratios = [on / off for on, off in zip(runs["on"], runs["off"], strict=True)]
    print(f"\nper-pair ratio (with / without): {', '.join(f'{r:.4f}' for r in ratios)}")
    print(f"median samples/s: without {statistics.median(runs['off']):.1f}, "
          f"with {statistics.median(runs['on']):.1f}")
    print(f"sampler took {min(samples_n)}-{max(samples_n)} samples per trial at {args.interval_ms:g} ms")
    off = sorted(runs["off"])
    q1, q3 = off[len(off) // 4], off[(3 * len(off)) // 4]
    print(f"noise floor: runs without the sampler spread by {(q3 - q1) / statistics.median(off) * 100:.1f} % "
          "(IQR / median); a ratio closer to 1 than that is not resolved by this run")
    print(f"parent process CPU during a trial: {statistics.median(parent_cpu_pct['on']):.2f} % of a core with the "
          f"sampler, {statistics.median(parent_cpu_pct['off']):.2f} % without (the sampler's own cost)")
    median = statistics.median(ratios)
    print(f"MEDIAN RATIO {median:.4f}  (target >= 0.995: {'met' if median >= 0.995 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
