"""How a CPU probe's peak grows with the number of training steps: the basis of the confirm run's length.

    .venv/bin/python benchmarks/confirm_growth.py [--batch 440] [--steps 2,8,20,40] [--runs 2]
                                                  [--fixed-threshold]

Runs tiny_cnn on 3x64x64 noise (one thread, SGD with momentum; the max-batch tests' and the Lightning
comparison's setting) at one batch size for each number of timed steps, each in a fresh worker under a
generous RLIMIT_DATA (so every run passes and the watcher samples VmData every millisecond), and prints
the sampled VmData peak per run. Under glibc's own, adaptive mmap threshold (how the probes run since issue 22)
the peak keeps moving over steps, which the recommendation's heap allowance must cover; with
``--fixed-threshold`` (``MALLOC_MMAP_THRESHOLD_=131072``, the "what helps" setting) it should stop growing after
the first steps. The confirm run (MaxBatchRequest.confirm_steps, docs/maxbatch.md) must be at least as long as
the growth lasts.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from common import machine_facts

from harness.data import DataRequest, prepare
from harness.envs.runtime import resolve_runtimes
from harness.maxbatch.budget import resolve_budget
from harness.maxbatch.probes import WorkerProber
from harness.maxbatch.request import MaxBatchRequest
from harness.run.executor import LocalExecutor

SHAPE = (3, 64, 64)


def main(argv: list[str] | None = None) -> int:
    """Run the probes and print each one's peak, by number of steps."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=440)
    parser.add_argument("--steps", default="2,8,20,40", help="comma-separated numbers of timed steps")
    parser.add_argument("--runs", type=int, default=2, help="fresh workers per number of steps")
    parser.add_argument("--limit-mib", type=float, default=4000.0, help="RLIMIT_DATA of every run")
    parser.add_argument("--fixed-threshold", action="store_true",
                        help="run with MALLOC_MMAP_THRESHOLD_=131072 (default: glibc's defaults, as the probes)")
    args = parser.parse_args(argv)
    steps = [int(s) for s in args.steps.split(",")]
    print(machine_facts())
    runtime = resolve_runtimes(["pytorch"], {}, "cpu")["pytorch"]  # its managed environment, as the CLI's probes run
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare(DataRequest(name="synthetic", synthetic_shape=SHAPE, synthetic_samples=512), Path(tmp))
        print(f"batch {args.batch}, limit {args.limit_mib:g} MiB, "
              f"{'fixed mmap threshold' if args.fixed_threshold else 'glibc default malloc'}")
        print(f"{'steps':>6}  peaks (MiB)")
        for n in steps:
            req = MaxBatchRequest(framework="pytorch", model="tiny_cnn", device="cpu",
                                  memory_limit_mib=args.limit_mib, threads=1, momentum=0.9,
                                  synthetic_shape=SHAPE, synthetic_samples=512, confirm_steps=n)
            prober = WorkerProber(req, resolve_budget(req, [], runtime), data,
                                  LocalExecutor(log_dir=Path(tmp) / "logs"), runtime=runtime)
            if args.fixed_threshold:
                prober.env = {**prober.env, "MALLOC_MMAP_THRESHOLD_": "131072"}
            peaks = []
            for _ in range(args.runs):
                outcome = prober._run(args.batch, True, args.limit_mib)
                peak = outcome.metrics.vmdata_peak_mib if outcome.metrics is not None else None
                peaks.append(f"{peak:.1f}" if peak is not None and outcome.status == "ok" else outcome.status)
            print(f"{n:>6}  {' '.join(peaks)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
