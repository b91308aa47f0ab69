"""Cost of one poll, in microseconds: the host probe on a real process tree, the whole sampler tick,
and NVML where a GPU exists (it says "no GPU" otherwise); then the share of one core the sampler
thread uses at its interval, an upper bound on what it can take from a trial.

    PYTHONPATH=. python benchmarks/probe_poll_cost.py [--polls 2000]

The watched tree is a child Python process with one grandchild, like a worker with a helper.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from harness.errors import ProbeError
from harness.monitor import nvml
from harness.monitor.probes import HostProbe, NullGpuProbe, ProcessTree
from harness.monitor.sampler import Sampler


def timeit_us(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """(median, p95) of ``n`` calls, in microseconds."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main() -> int:
    """Run the benchmark and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--polls", type=int, default=2000)
    ap.add_argument("--interval-ms", type=float, default=100.0, help="for the thread's CPU share")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long the thread samples")
    args = ap.parse_args()
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                              "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                              "time.sleep(600)"])
    try:
        time.sleep(1.0)  # let the grandchild start
        tree = ProcessTree(child.pid)
        pids = tree.refresh()
        host = HostProbe()
        print(f"watched tree: {len(pids)} processes; {args.polls} polls each")
        full = ProcessTree(child.pid, relist_every_s=0.0)
        psutil_list = psutil.Process(child.pid)
        rows = [("tree re-list (/proc children files, once a second)", timeit_us(full.refresh, args.polls)),
                ("  the same through psutil (scans every process)",
                 timeit_us(lambda: psutil_list.children(recursive=True), args.polls)),
                ("tree check between re-lists (worker alive?)", timeit_us(tree.refresh, args.polls)),
                ("host probe read (CPU, RSS, system memory)", timeit_us(lambda: host.read(pids), args.polls))]
        sampler = Sampler([HostProbe(), NullGpuProbe()], tree_factory=lambda pid: tree)
        sampler._tree = tree  # a tick without the thread: refresh + every probe + bookkeeping
        rows.append(("sampler tick, no GPU (refresh + host + null GPU)", timeit_us(sampler.tick, args.polls)))
        try:
            nvml.ensure_initialised()
            picked = nvml.worker_device()
        except ProbeError as e:
            picked = None
            gpu_note = f"no GPU ({e})"
        else:
            gpu_note = "no GPU visible (CUDA_VISIBLE_DEVICES)" if picked is None else ""
        if picked is not None:
            probe = nvml.NvmlProbe(*picked)
            rows.append((f"NVML probe read ({picked[1]})", timeit_us(lambda: probe.read(pids), args.polls)))
        for label, (med, p95) in rows:
            print(f"{label:<52} median {med:8.1f} us   p95 {p95:8.1f} us")
        if gpu_note:
            print(f"{'NVML probe read':<52} {gpu_note}")
        # the bound on what sampling can take from a trial: the parent's CPU time while the real thread
        # samples (this process does nothing else meanwhile)
        gpu_probe = nvml.NvmlProbe(*picked) if picked is not None else NullGpuProbe()
        thread = Sampler([HostProbe(), gpu_probe], interval_s=args.interval_ms / 1000.0)
        cpu0, t0 = time.process_time(), time.monotonic()
        thread.start(child.pid)
        time.sleep(args.seconds)
        out = thread.stop()
        share = (time.process_time() - cpu0) / (time.monotonic() - t0) * 100.0
        print(f"sampler thread at {args.interval_ms:g} ms for {args.seconds:g} s: "
              f"{len(out['samples'])} samples, {share:.3f} % of one core")
    finally:
        for p in ProcessTree(child.pid).refresh():
            subprocess.run(["kill", str(p)], check=False)
        child.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
