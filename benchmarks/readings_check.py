"""Issue 29's readings, checked on the machine: the window rule on made-up samples and on a real trial, the steady
phase, and the sampler against nvidia-smi. One step of ``benchmarks/gpu_check.py``; runs on its own too:

    PYTHONPATH=. python benchmarks/readings_check.py [--dry-run]

1. the rule on made-up samples: a 48 ms timed phase (JAX at batch 64 on an H100) publishes no utilisation, power or
   energy and says why; a 2 s one publishes them;
2. a PyTorch trial whose timed phase is far too short for NVML (osu_cnn, batch 64, 5 timed steps): on a GPU its
   utilisation, power and energy must be NULL with the reason, and the steady phase after the final evaluation
   must have measured utilisation, power and J/sample; on the CPU (``--dry-run``, or no GPU) it has no GPU figures,
   no reason to give and no steady phase;
3. on a GPU only, ``benchmarks/compare_nvidia_smi.py``: a 300-step trial with nvidia-smi logging beside it.

Prints one line per check and exits 1 when one fails.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.monitor.windows import Aggregator, trial_aggregates  # noqa: E402

SMI_TIMEOUT_S = 240


def check(name: str, ok: bool, detail: str, failed: list[str]) -> None:
    """Print one check's outcome; remember it when it failed."""
    print(f"[{'ok' if ok else 'FAILED'}] {name}: {detail}")
    if not ok:
        failed.append(name)


def rule_on_made_up_samples(failed: list[str]) -> None:
    """Step 1: the window rule on a made-up 200 W stream sampled every 100 ms."""
    def aggregates(timed_s: float) -> dict[str, Any]:
        agg = Aggregator(0.1)
        for i in range(60):
            agg.add(i * 0.1, {"gpu_util_pct": 50.0, "power_w": 200.0, "energy_mj": 20_000 * i})
        return trial_aggregates(agg.summarise([("warmup", 0.5), ("timed", 1.0), ("eval", 1.0 + timed_s)]))

    short, long = aggregates(0.048), aggregates(2.0)
    check("48 ms timed phase publishes nothing", short["gpu_util_pct"] is None and short["energy_j"] is None
          and bool(short["readings_note"]), str(short["readings_note"]), failed)
    check("2 s timed phase publishes", abs(long["gpu_util_pct"] - 50.0) < 1e-6 and abs(long["energy_j"] - 400.0) < 1e-6
          and long["readings_note"] is None, f"util {long['gpu_util_pct']} %, energy {long['energy_j']} J", failed)


def short_trial(device: str, work: Path) -> tuple[str, dict[str, Any], dict[str, int]]:
    """Step 2's trial: (status and reason, the sampler's aggregates, the steps of each phase)."""
    from harness.config.experiment import parse_experiment
    from harness.data import prepare
    from harness.monitor.sampler import monitor_factory_for
    from harness.run.executor import LocalExecutor
    from harness.run.planner import data_request, plan
    from harness.run.sweep import unit_for

    exp = parse_experiment({
        "name": "readings_check", "frameworks": ["pytorch"], "batch_sizes": [64], "model": "osu_cnn",
        "synthetic_shape": [3, 32, 32], "synthetic_samples": 1024, "warmup_steps": 3, "timed_steps": 5,
        "eval_points": 0, "device": device, "timeout_s": 120})
    factory, _ = monitor_factory_for(exp)
    data = prepare(data_request(exp), work)
    outcome = LocalExecutor(monitor_factory=factory, log_dir=work / "logs").run(unit_for(exp, plan(exp, data)[0],
                                                                                          data))
    return f"{outcome.status} {outcome.reason}".strip(), dict(outcome.monitor.aggregates), dict(outcome.phase_steps)


def rule_on_a_trial(gpu: bool, failed: list[str]) -> None:
    """Step 2 on the GPU, or on the CPU (a dry run)."""
    with tempfile.TemporaryDirectory() as tmp:
        status, agg, steps = short_trial("gpu" if gpu else "cpu", Path(tmp))
    if not status.startswith("ok"):
        check("short trial ran", False, status, failed)
        return
    if gpu:
        check("short timed phase: no utilisation, power or energy, and why", agg.get("gpu_util_pct") is None
              and agg.get("energy_j") is None and str(agg.get("readings_note") or "").startswith("timed phase"),
              str(agg.get("readings_note")), failed)
        check("steady phase measured", bool(steps.get("steady")) and agg.get("steady_gpu_util_pct") is not None
              and agg.get("steady_energy_j") is not None,
              f"{steps.get('steady')} steps over {agg.get('steady_window_s')} s: {agg.get('steady_gpu_util_pct')} %, "
              f"{agg.get('steady_power_w')} W, {agg.get('steady_energy_j')} J; GPU {agg.get('gpu_used')}", failed)
    else:
        check("CPU trial: no GPU figures, no reason to give, no steady phase",
              agg.get("gpu_util_pct") is None and agg.get("readings_note") is None and "steady" not in steps,
              f"readings_note {agg.get('readings_note')!r}, phase steps {steps}", failed)


def main(argv: list[str] | None = None) -> int:
    """Run the checks (the GPU ones where there is a GPU and it is not a dry run)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU only: the rule, and a CPU trial")
    args = ap.parse_args(argv)
    gpu = not args.dry_run and shutil.which("nvidia-smi") is not None
    failed: list[str] = []
    rule_on_made_up_samples(failed)
    rule_on_a_trial(gpu, failed)
    if gpu:
        try:
            done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_nvidia_smi.py")], cwd=ROOT,
                                  capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
            print(done.stdout + done.stderr)
            check("sampler against nvidia-smi", done.returncode == 0, f"exit {done.returncode}", failed)
        except subprocess.TimeoutExpired:
            check("sampler against nvidia-smi", False, f"timed out after {SMI_TIMEOUT_S} s", failed)
    else:
        print("sampler against nvidia-smi: skipped (dry run, or no nvidia-smi)")
    print(f"readings_check: {'every check passed' if not failed else 'FAILED: ' + ', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
