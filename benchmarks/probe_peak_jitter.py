"""How far a max-batch probe's CPU peak moves between fresh workers at the same batch size.

    .venv/bin/python benchmarks/probe_peak_jitter.py [--framework pytorch] [--batch 380] [--runs 16]
                                                     [--model tiny_cnn] [--shape 3,64,64] [--env PYTHONHASHSEED=0]

Runs the same confirm-length probe (by default tiny_cnn on 3x64x64 noise; one thread, SGD with momentum) in
``--runs`` fresh workers one after another, under a generous RLIMIT_DATA so every run passes, and prints
how often each sampled VmData peak (what the limit counts) and each end-of-trial VmData were seen. The
spread is what separates two runs' boundaries (docs/maxbatch.md, "What is left"); the max-batch finder's
warning and the recommendation's margin use ``harness.maxbatch.advice.cpu_peak_jitter_mib(framework)`` (the
framework's floor), which should stay at or above the spread printed here.
``--env KEY=VALUE`` adds a variable to the probes' environment (e.g. to test a suspected cause).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

from common import machine_facts

from harness.cli.maxbatch import shape_arg
from harness.data import DataRequest, prepare
from harness.envs.runtime import resolve_runtimes
from harness.maxbatch.advice import cpu_peak_jitter_mib
from harness.maxbatch.budget import resolve_budget
from harness.maxbatch.probes import WorkerProber
from harness.maxbatch.request import MaxBatchRequest
from harness.run.executor import LocalExecutor

SHAPE = (3, 64, 64)


def main(argv: list[str] | None = None) -> int:
    """Run the probes and print the distribution of their peaks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="pytorch")
    parser.add_argument("--batch", type=int, default=380)
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--limit-mib", type=float, default=4000.0, help="RLIMIT_DATA of every run")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--model", default="tiny_cnn", help="a catalogue model")
    parser.add_argument("--shape", type=shape_arg, default=SHAPE, help="C,H,W of the synthetic samples")
    args = parser.parse_args(argv)
    if bad := [item for item in args.env if "=" not in item]:
        parser.error(f"--env takes KEY=VALUE, not {bad[0]!r}")
    extra = dict(item.split("=", 1) for item in args.env)
    print(machine_facts())
    # the framework's managed environment, as `batchscope maxbatch` runs it
    runtime = resolve_runtimes([args.framework], {}, "cpu")[args.framework]
    with tempfile.TemporaryDirectory(prefix="batchscope-jitter-") as tmp:
        data = prepare(DataRequest(name="synthetic", synthetic_shape=args.shape, synthetic_classes=10,
                                   synthetic_samples=512), Path(tmp) / "cache")
        req = MaxBatchRequest(framework=args.framework, model=args.model, device="cpu",
                              memory_limit_mib=args.limit_mib, threads=1, momentum=0.9, synthetic_shape=args.shape,
                              synthetic_samples=512, timeout_s=300.0, experiment="jitter")
        prober = WorkerProber(req, resolve_budget(req, [], runtime), data, LocalExecutor(log_dir=Path(tmp) / "logs"),
                              runtime=runtime)
        prober.env = {**prober.env, **extra}
        peaks: collections.Counter[float] = collections.Counter()
        ends: collections.Counter[float] = collections.Counter()
        for i in range(args.runs):
            result = prober(args.batch, True)
            metrics = prober.outcomes[-1].metrics
            if result.status != "ok" or metrics is None or metrics.vmdata_peak_mib is None:
                print(f"run {i}: {result.status} {result.reason[:200]}", file=sys.stderr)
                return 1
            peaks[round(metrics.vmdata_peak_mib, 1)] += 1
            ends[round(metrics.vmdata_end_mib or 0.0, 1)] += 1
    print(f"{args.framework} {args.model} {'x'.join(map(str, args.shape))}, batch {args.batch}, {args.runs} fresh "
          f"workers, env {prober.env}")
    for title, counts in (("VmData peak (MiB)", peaks), ("VmData at the end (MiB)", ends)):
        print(f"  {title}: " + ", ".join(f"{v:.1f} x{n}" for v, n in sorted(counts.items())))
    spread = max(peaks) - min(peaks)
    floor = cpu_peak_jitter_mib(args.framework)
    print(f"  spread of the peak: {spread:.1f} MiB ({args.framework}'s floor in the finder's margin: {floor:g} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
