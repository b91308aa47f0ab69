"""Issue 29's device resolution, checked on the machine: where ``device = "auto"`` puts each installed framework,
and that a run whose frameworks would land on different devices is refused. One step of
``benchmarks/gpu_check.py``; runs on its own too:

    PYTHONPATH=. python benchmarks/devices_check.py [--dry-run]

1. each installed framework's build (from its metadata, no framework imported) and the device it resolves to with
   the GPUs NVML sees (``--dry-run``: as if a GPU were present, so a CPU machine shows what a GPU machine with
   these builds would do): a CPU-only build resolves to the CPU, a CUDA build to the GPU;
2. the one-device rule on that resolution: mixed devices are refused with the fix, one device is not;
3. on a GPU only (not ``--dry-run``): a tiny ``batchscope run`` of every installed framework (1 batch size,
   2 timed steps): exit 2 with nothing written where the resolution is mixed, else exit 0 with every trial's
   stored ``run_device`` the resolved one and a CPU trial's GPU columns NULL. Capped at :data:`RUN_TIMEOUT_S`.

Prints one line per check and exits 1 when one fails.
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.envs.runtime import unchecked_runtime  # noqa: E402
from harness.errors import ConfigError  # noqa: E402
from harness.monitor import environment  # noqa: E402
from harness.registry import list_adapters  # noqa: E402
from harness.run.devices import ResolvedDevice, build_of, check_one_device, resolve  # noqa: E402

RUN_TIMEOUT_S = 240
TINY_TOML = """name = "devices_check"
frameworks = {frameworks}
model = "osu_cnn"
dataset = "synthetic"
synthetic_shape = [3, 32, 32]
synthetic_samples = 256
batch_sizes = [32]
epochs = 0
warmup_steps = 1
timed_steps = 2
eval = false
steady_s = 0
timeout_s = 200
"""


def check(name: str, ok: bool, detail: str, failed: list[str]) -> None:
    """Print one check's outcome; remember it when it failed."""
    print(f"[{'ok' if ok else 'FAILED'}] {name}: {detail}")
    if not ok:
        failed.append(name)


def installed() -> list[str]:
    """The built-in frameworks installed here (no framework imported)."""
    return [a.name for a in list_adapters() if a.builtin and a.installed and not a.problem]


def resolution(frameworks: list[str], gpu_present: bool, failed: list[str]) -> dict[str, ResolvedDevice]:
    """Step 1: each framework's device, checked against its build."""
    out = {}
    for fw in frameworks:
        runtime = unchecked_runtime(fw)  # this interpreter's build, as the parent reads it
        gpu, _ = build_of(runtime)
        r = resolve(runtime, "auto", gpu_present)
        want = "cpu" if gpu is False or not gpu_present else "gpu"
        check(f"{fw} resolves to its build's device", r.device == want, r.line(), failed)
        out[fw] = r
    return out


def one_device_rule(resolved: dict[str, ResolvedDevice], failed: list[str]) -> bool:
    """Step 2: mixed devices refused with the fix, one device allowed. Returns whether the resolution is mixed."""
    devices = {fw: r.device for fw, r in resolved.items()}
    mixed = len(set(devices.values())) > 1
    try:
        check_one_device(devices, allow_mixed=False, source="devices_check")
        check("one device: not refused", not mixed, f"every framework on {sorted(set(devices.values()))}", failed)
    except ConfigError as e:
        check("mixed devices refused with the fix", mixed and "--allow-mixed-devices" in str(e), str(e), failed)
    check_one_device(devices, allow_mixed=True, source="devices_check")  # allowed: never refused
    return mixed


def real_run(frameworks: list[str], resolved: dict[str, ResolvedDevice], mixed: bool, failed: list[str]) -> None:
    """Step 3: a tiny run of every installed framework, as a user would start it."""
    work = Path(tempfile.mkdtemp(prefix="devices_check_"))
    toml = work / "devices_check.toml"
    toml.write_text(TINY_TOML.format(frameworks=str(frameworks).replace("'", '"')))
    out = work / "out"
    cmd = [sys.executable, "-m", "harness", "run", str(toml), "--out", str(out), "--quiet"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT)
    except subprocess.TimeoutExpired:
        check("tiny run", False, f"timed out after {RUN_TIMEOUT_S} s", failed)
        return
    print("\n".join(line for line in done.stdout.splitlines() if line.startswith("device ")))
    if mixed:
        check("mixed run refused: exit 2, nothing written", done.returncode == 2 and not out.exists(),
              f"exit {done.returncode}; {done.stderr.strip().splitlines()[-1:]}", failed)
        return
    if done.returncode != 0:
        check("tiny run", False, f"exit {done.returncode}: {done.stderr[-400:]}", failed)
        return
    conn = sqlite3.connect(out / "results.sqlite")
    try:
        rows = conn.execute("SELECT framework, status, run_device, gpu_util_pct, power_w FROM trials").fetchall()
    finally:
        conn.close()
    for fw, status, run_device, util, power in rows:
        want = resolved[fw].device
        null_on_cpu = run_device != "cpu" or (util is None and power is None)
        check(f"{fw} ran where it resolved", run_device == want and null_on_cpu,
              f"status {status}, run_device {run_device} (resolved {want}), gpu_util_pct {util}, power_w {power}",
              failed)


def main(argv: list[str] | None = None) -> int:
    """Run the checks; exit 1 when one fails."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="as if a GPU were present; no trial runs")
    args = ap.parse_args(argv)
    failed: list[str] = []
    env = environment.capture()
    gpu_present = bool(env.get("gpus")) or args.dry_run
    frameworks = installed()
    pretend = " (dry run: as if one were present)" if args.dry_run else ""
    print(f"GPU: {env.get('gpu_note') or env.get('gpu_name')}{pretend}")
    resolved = resolution(frameworks, gpu_present, failed)
    mixed = one_device_rule(resolved, failed)
    if env.get("gpus") and not args.dry_run and frameworks:
        real_run(frameworks, resolved, mixed, failed)
    print(f"devices_check: {len(failed)} check(s) failed" if failed else "devices_check: every check passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
