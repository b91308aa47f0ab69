"""Wall time of the README's main job, ``batchscope run experiments/quick.toml``, per framework and in total.

Target: at most 10 minutes in total on a 2-core CPU machine with no GPU. The command runs exactly as
a user runs it (a subprocess of the real CLI) with a fresh data cache, so the total includes
preparing the embedded data set. Per framework: the sum of its trials' wall times (worker start-up,
framework import, training, evaluation), read back from the results store. Also prints the accuracy
(mean ± sd over repeats) of every framework and batch size, so the figures say what the time bought.

Usage::

    python benchmarks/quick_walltime.py [--experiment experiments/quick.toml] [--keep DIR]

Timing on a shared machine is noisy (±10-25 %): run it alone, and once.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 600.0


def main(argv: list[str] | None = None) -> int:
    """Run the experiment once and print its wall times and accuracies."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default=str(ROOT / "experiments" / "quick.toml"))
    parser.add_argument("--keep", help="write the results here (default: a temporary directory)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from harness.store import Store
    from report.answer.thesis import side_by_side

    with tempfile.TemporaryDirectory(prefix="bs-quick-") as tmp:
        out = Path(args.keep) if args.keep else Path(tmp) / "out"
        env = dict(os.environ, BATCHSCOPE_CACHE=str(Path(tmp) / "cache"),
                   PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
        cmd = [sys.executable, "-m", "harness", "run", args.experiment, "--out", str(out)]
        print("$ " + " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        total_s = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n", file=sys.stderr)
            print(f"batchscope run failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        with Store.open(out, create=False) as store:
            trials = store.trials()

    per_fw: dict[str, list[float]] = {}
    statuses: dict[str, list[str]] = {}
    for t in trials:
        per_fw.setdefault(t["framework"], []).append(float(t["elapsed_s"] or 0.0))
        statuses.setdefault(t["framework"], []).append(t["status"])
    print(f"\nwall time of {Path(args.experiment).name} ({len(trials)} trials, fresh data cache):")
    print(f"  {'framework':<11} {'trials':>6} {'wall s':>8} {'min':>6}  statuses")
    for fw in sorted(per_fw):
        s = sum(per_fw[fw])
        print(f"  {fw:<11} {len(per_fw[fw]):>6} {s:>8.1f} {s / 60:>6.2f}  "
              f"{', '.join(f'{st} x{statuses[fw].count(st)}' for st in sorted(set(statuses[fw])))}")
    in_trials = sum(sum(v) for v in per_fw.values())
    print(f"  {'(harness: data, planning, store)':<32} {total_s - in_trials:>6.1f}")
    verdict = "within" if total_s <= TARGET_S else "OVER"
    print(f"  {'total':<11} {'':>6} {total_s:>8.1f} {total_s / 60:>6.2f}  "
          f"({verdict} the {TARGET_S / 60:.0f}-minute target)")

    print("\naccuracy on the held-out split, % (mean ± sd over repeats):")
    rows = [r for r in side_by_side(trials) if r["metric"] == "accuracy_pct"]
    sizes = sorted({r["batch_size"] for r in rows})
    print(f"  {'framework':<11}" + "".join(f"{'bs ' + str(b):>14}" for b in sizes))
    for fw in sorted({r["framework"] for r in rows}):
        cells = []
        for b in sizes:
            r = next((r for r in rows if r["framework"] == fw and r["batch_size"] == b), None)
            if r is None or r["ours"] is None:
                cells.append(f"{'-':>14}")
            else:
                sd = f" ± {r['ours_sd']:.1f}" if r["ours_sd"] is not None else ""
                cells.append(f"{r['ours']:.1f}{sd}".rjust(14))
        print(f"  {fw:<11}" + "".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
