"""Check the sampler against nvidia-smi on a GPU machine: one PyTorch trial on the GPU, nvidia-smi logging
beside it, and the timed phase's figures side by side (printed as a Markdown table for docs/).

    PYTHONPATH=. python benchmarks/compare_nvidia_smi.py [--batch-size 256] [--timed-steps 300]

nvidia-smi runs as ``nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw
--format=csv,noheader,nounits -lms 100 -i <index>``. Its timestamps are wall-clock; the worker's phase
times are monotonic, so the script maps one onto the other with an offset taken at the start (both
clocks tick at the same rate over a trial). Where there is no nvidia-smi (no GPU), it says so and
exits 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import interpreter
from harness.config.experiment import parse_experiment
from harness.data import prepare
from harness.monitor.sampler import monitor_factory_for
from harness.run.executor import LocalExecutor
from harness.run.planner import data_request, plan
from harness.run.sweep import unit_for

QUERY = "timestamp,utilization.gpu,memory.used,power.draw"


def parse_smi(text: str) -> list[tuple[float, float, float, float]]:
    """(wall-clock s, util %, memory used MiB, power W) per nvidia-smi line; lines it could not read
    (a "[N/A]" power, a cut last line) are skipped."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            wall = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append((wall, float(parts[1]), float(parts[2]), float(parts[3])))
        except ValueError:
            continue
    return rows


def main() -> int:
    """Run the comparison and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--timed-steps", type=int, default=300)
    ap.add_argument("--interval-ms", type=float, default=100.0)
    args = ap.parse_args()
    smi = shutil.which("nvidia-smi")
    if smi is None:
        print("no GPU: nvidia-smi not found, nothing to compare")
        return 0
    exp = parse_experiment({
        "name": "smi_check", "frameworks": ["pytorch"], "batch_sizes": [args.batch_size], "model": "osu_cnn",
        "synthetic_shape": [3, 32, 32], "synthetic_samples": 4096, "warmup_steps": 20,
        "timed_steps": args.timed_steps, "eval": False, "device": "gpu", "sample_interval_ms": args.interval_ms,
        "timeout_s": 600})
    factory, notice = monitor_factory_for(exp)
    print(notice)
    index = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    if index.isdigit():  # CUDA's index (PCI bus order for the worker): nvidia-smi is told the GPU by its UUID
        from harness.monitor import nvml

        nvml.ensure_initialised()
        index = nvml.device_identity(nvml.cuda_index_handle(int(index))[0])["uuid"] or index
    command = [smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", str(int(args.interval_ms)),
               "-i", index]
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare(data_request(exp), Path(tmp))
        trial = plan(exp, data)[0]
        unit = unit_for(exp, trial, data, interpreter=interpreter(trial.framework))
        offset_s = time.time() - time.monotonic()  # wall = monotonic + offset
        log = Path(tmp) / "smi.csv"
        with open(log, "w") as out:
            logger = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            try:
                outcome = LocalExecutor(monitor_factory=factory, log_dir=Path(tmp) / "logs").run(unit)
            finally:
                logger.terminate()
                logger.wait(timeout=10)
        smi_rows = parse_smi(log.read_text())
    if outcome.status != "ok":
        print(f"trial {outcome.status}: {outcome.reason}", file=sys.stderr)
        return 1
    starts = dict(outcome.phases)
    following = [t for _, t in outcome.phases if t > starts["timed"]]
    t0 = starts["timed"] + offset_s
    t1 = (min(following) if following else time.monotonic()) + offset_s
    inside = [r for r in smi_rows if t0 <= r[0] < t1]
    agg = outcome.monitor.aggregates
    timed = outcome.monitor.phases["timed"]
    print(f"\n`{' '.join(command)}` beside `python benchmarks/compare_nvidia_smi.py --batch-size "
          f"{args.batch_size} --timed-steps {args.timed_steps}`; timed phase {t1 - t0:.2f} s, "
          f"{timed['samples_n']} sampler samples, {len(inside)} nvidia-smi lines\n")
    print("| figure (timed phase) | batchscope sampler | nvidia-smi |")
    print("| --- | --- | --- |")
    if not inside:
        print("| (no nvidia-smi line inside the timed phase: give more --timed-steps) | | |")
        return 1
    util = statistics.mean(r[1] for r in inside)
    mem_peak = max(r[2] for r in inside)
    power = statistics.mean(r[3] for r in inside)
    series = timed["series"]
    if timed.get("readings_note"):
        print(f"| (the timed phase is too short for NVML: {timed['readings_note']}; give more --timed-steps) | | |")
    print(f"| GPU utilisation, mean % | {_fmt(agg.get('gpu_util_pct'))} | {util:.1f} |")
    print(f"| device memory used, peak MiB | {series['gpu_mem_used_mib']['max']:.0f} | {mem_peak:.0f} |")
    readings_w = series.get("power_w", {}).get("mean")
    print(f"| power, mean W ({agg.get('power_method')}) | {_fmt(agg.get('power_w'))} | {power:.1f} |")
    print(f"| power, mean of NVML's readings W | {_fmt(readings_w)} | {power:.1f} |")
    energy = agg.get("energy_j")
    print(f"| energy, J ({timed['energy_method']}) | {_fmt(energy)} | {power * (t1 - t0):.1f} (mean power x time) |")
    if readings_w is not None:
        print(f"| energy, J (sampler's mean power reading x time) | {readings_w * (t1 - t0):.1f} | |")
    print(f"\nGPU: {agg.get('gpu_used')}. On Ampere and newer, NVML's power reading (and nvidia-smi's power.draw) is a "
          "1 s trailing mean; the counter is the integral over the phase itself (docs/sampler.md).")
    return 0 if not timed.get("readings_note") else 1


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    sys.exit(main())
