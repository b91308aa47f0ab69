"""Prove the GPU path in a few minutes and write a short Markdown summary (for docs/gpu_check.md).

    python benchmarks/gpu_check.py [--out docs/gpu_check.md] [--work DIR]

What it runs, each step in its own subprocess so one failure does not hide the rest:

1. a PyTorch sweep on the GPU (osu_cnn, synthetic 3x32x32, batches 64 and 256, 300 timed steps): step and
   end-to-end throughput, drift, achieved GFLOP/s, MFU, energy per sample, from the results store;
2. the readings' windows and the sampler against ``nvidia-smi`` (``benchmarks/readings_check.py``: the window rule
   on made-up samples and on a trial too short for NVML, the steady phase, then ``benchmarks/compare_nvidia_smi.py``),
   capped at :data:`READINGS_TIMEOUT_S`;
3. ``maxbatch`` on ``deep_cnn`` with PyTorch on the whole card, and under ``--memory-limit-mib 6144``;
4. device resolution (``benchmarks/devices_check.py``): where ``device = "auto"`` puts each installed framework,
   the one-device rule, and a tiny run of them all, capped at :data:`DEVICES_TIMEOUT_S`;
5. end-to-end against step throughput (issue 40): a PyTorch and JAX sweep on the GPU (osu_cnn, synthetic 3x32x32,
   batches 256 and 1024, ``prefetch`` on, the default), each trial's end-to-end / step throughput from the store,
   failed where one is below :data:`E2E_GOAL` (the issue's goal: the next batch prepared while the step runs leaves
   the GPU busy), capped at :data:`E2E_TIMEOUT_S`.

6. the framework's estimate against the measured boundary (issue 41): ``benchmarks/maxbatch_strategies.py`` with
   PyTorch and JAX on ``deep_cnn`` under an emulated 6 GiB card (``--memory-limit-mib 6144``), strategies ``model``
   (the estimate first), ``fitted`` and ``double-bisect``: the predicted size and its error, the answers (which must
   agree within the resolution), probes and wall time per strategy, capped at :data:`ESTIMATE_TIMEOUT_S`. What the
   estimate cannot know (the CUDA context, the caching allocator's rounding and fragmentation) shows in its error.

Without a GPU (no ``nvidia-smi``, or it lists no GPU) it says so and exits 0: nothing to prove here. ``--dry-run``
runs the steps' CPU parts instead (step 2 on the CPU, step 4 as if a GPU were present, step 5 as a short CPU sweep
whose ratios are printed, not judged, step 6 on the CPU with tiny_cnn and the ``model`` strategy only) and writes
their summary, with or without a GPU. ``--only e2e`` runs step 5 alone (with ``--dry-run`` too: what the test suite
runs), ``--only estimate`` step 6.
Exit 1 when a step fails on a machine that has a GPU (the summary says which and why).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEP_TIMEOUT_S = 600
#: the readings step's cap: its short trial (~30 s with the framework's start-up) and a 300-step trial beside
#: nvidia-smi (benchmarks/readings_check.py caps that one at 240 s)
READINGS_TIMEOUT_S = 300
#: the device step's cap: its tiny run starts every installed framework once (benchmarks/devices_check.py caps the
#: run at 240 s)
DEVICES_TIMEOUT_S = 270
#: end-to-end / step throughput each PyTorch and JAX trial of step 5 must reach on a GPU (issue 40)
E2E_GOAL = 0.9
#: step 5's cap: two frameworks' start-up (JAX compiles each batch size) and 4 trials of 320 steps
E2E_TIMEOUT_S = 540
E2E_FRAMEWORKS = ("pytorch", "jax")
#: step 6's cap: 2 frameworks x 3 strategies, ~6 / 8 / 20 probes each at ~10 s a fresh GPU worker, deep_cnn's steps
#: at batches in the thousands
ESTIMATE_TIMEOUT_S = 1500


def estimate_cmd(dry: bool) -> list[str]:
    """Step 6 (issue 41): the strategies against the estimate; in a dry run the CPU path, one model, one strategy."""
    cmd = [sys.executable, "benchmarks/maxbatch_strategies.py", "--frameworks", ",".join(E2E_FRAMEWORKS),
           "--show-probes"]
    if dry:
        return cmd + ["--device", "cpu", "--models", "tiny_cnn", "--strategies", "model"]
    return cmd + ["--device", "gpu", "--models", "deep_cnn", "--budget-mib", "6144",
                  "--strategies", "model,fitted,double-bisect"]


def estimate_check(log: list[str], dry: bool) -> bool:
    """Step 6: run :func:`estimate_cmd`, its table into the summary."""
    title = ("The framework's estimate vs the measured boundary (dry run: CPU, tiny_cnn, model only)" if dry else
             "The framework's estimate vs the measured boundary: deep_cnn, 6 GiB emulated card, PyTorch and JAX")
    return _run(title, estimate_cmd(dry), log, ESTIMATE_TIMEOUT_S)
E2E_TOML = """name = "gpu_check_e2e"
frameworks = {frameworks}
model = "osu_cnn"
dataset = "synthetic"
synthetic_shape = [3, 32, 32]
synthetic_samples = {samples}
batch_sizes = {batches}
epochs = 0
warmup_steps = {warmup}
timed_steps = {timed}
device = "{device}"
"""
SWEEP_TOML = """name = "gpu_check"
frameworks = ["pytorch"]
model = "osu_cnn"
dataset = "synthetic"
synthetic_shape = [3, 32, 32]
synthetic_samples = 4096
batch_sizes = [64, 256]
epochs = 0
warmup_steps = 20
timed_steps = 300
device = "gpu"
sample_interval_ms = 50
"""


def gpu_names(smi: str | None = None) -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists; empty when there is no nvidia-smi or it fails (no driver, no GPU)."""
    smi = smi or shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [line.split(":", 1)[1].split("(")[0].strip() for line in done.stdout.splitlines()
            if line.startswith("GPU ") and ":" in line]


def _run(title: str, cmd: Sequence[str], log: list[str], timeout_s: float = STEP_TIMEOUT_S) -> bool:
    """Run one step (killed after ``timeout_s``), append its outcome and output tail to ``log``; True when it
    exited 0."""
    t0 = time.monotonic()
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
        code, out = done.returncode, (done.stdout + done.stderr)
    except subprocess.TimeoutExpired as e:
        out_text = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        code, out = -1, f"timed out after {timeout_s:g} s\n{out_text}"
    verdict = "ok" if code == 0 else f"FAILED (exit {code})"
    log += [f"### {title}: {verdict} ({time.monotonic() - t0:.0f} s)", "", "```", f"$ {' '.join(cmd)}",
            *out.strip().splitlines()[-40:], "```", ""]
    return code == 0


def sweep_table(store: Path) -> list[str]:
    """The GPU sweep's figures per trial, as Markdown rows (read straight from the store)."""
    cols = ("batch_size", "step_samples_per_s", "e2e_samples_per_s", "drift_change_pct", "drift_flagged",
            "achieved_gflop_per_s", "mfu_pct", "gpu_util_pct", "proc_gpu_mem_peak_mib", "j_per_sample", "status")
    conn = sqlite3.connect(store)
    try:
        rows = conn.execute(f"SELECT {', '.join(cols)} FROM trials ORDER BY batch_size").fetchall()
    finally:
        conn.close()
    fmt = [lambda v: str(v)] + [lambda v: "-" if v is None else f"{v:.4g}" for _ in cols[1:-1]] + [str]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(f(v) for f, v in zip(fmt, row, strict=True)) + " |" for row in rows]
    return out


def e2e_toml(dry: bool) -> str:
    """Step 5's experiment: on the GPU batches 256 and 1024 (the issue's), in a dry run a short CPU sweep."""
    fws = "[" + ", ".join(f'"{f}"' for f in E2E_FRAMEWORKS) + "]"
    if dry:
        return E2E_TOML.format(frameworks=fws, samples=256, batches="[16, 32]", warmup=2, timed=8, device="cpu")
    return E2E_TOML.format(frameworks=fws, samples=8192, batches="[256, 1024]", warmup=20, timed=300, device="gpu")


def e2e_rows(store: Path) -> list[tuple[str, int, float | None, float | None, str, int | None]]:
    """(framework, batch, step samples/s, e2e samples/s, status, prefetch_device) of each trial in ``store``."""
    conn = sqlite3.connect(store)
    try:
        return conn.execute("SELECT framework, batch_size, step_samples_per_s, e2e_samples_per_s, status, "
                            "prefetch_device FROM trials ORDER BY framework, batch_size").fetchall()
    finally:
        conn.close()


def e2e_verdict(rows: Sequence[tuple[str, int, float | None, float | None, str, int | None]], judged: bool,
                goal: float = E2E_GOAL) -> tuple[bool, list[str]]:
    """Whether every expected trial ran and (``judged``: on a GPU) reached ``goal``; the Markdown table saying so."""
    lines = ["| framework | batch | step samples/s | e2e samples/s | e2e / step | prefetched to the device | verdict |",
             "|---|---|---|---|---|---|---|"]
    ok = {fw for fw, *_ in rows} == set(E2E_FRAMEWORKS) and len(rows) >= 2 * len(E2E_FRAMEWORKS)
    for fw, batch, step, e2e, status, device_ahead in rows:
        ratio = e2e / step if step and e2e else None
        if status != "ok" or ratio is None:
            verdict, ok = f"FAILED: {status}", False
        elif not judged:
            verdict = "not judged (CPU dry run)"
        elif ratio >= goal:
            verdict = f"holds (>= {goal})"
        else:
            verdict, ok = f"FAILED: below {goal}", False
        cells = [fw, str(batch), "-" if step is None else f"{step:.1f}", "-" if e2e is None else f"{e2e:.1f}",
                 "-" if ratio is None else f"{ratio:.3f}", "-" if device_ahead is None else str(bool(device_ahead)),
                 verdict]
        lines.append("| " + " | ".join(cells) + " |")
    return ok, lines


def e2e_check(work: Path, log: list[str], dry: bool) -> bool:
    """Step 5: the PyTorch and JAX sweep, then end-to-end / step per trial against :data:`E2E_GOAL`."""
    toml = work / "gpu_check_e2e.toml"
    toml.write_text(e2e_toml(dry))
    out = work / "e2e"
    where = "CPU, dry run" if dry else "GPU"
    ran = _run(f"End-to-end / step throughput, PyTorch and JAX ({where})",
               [sys.executable, "-m", "harness", "run", str(toml), "--out", str(out), "--quiet"], log, E2E_TIMEOUT_S)
    store = out / "results.sqlite"
    if not store.exists():
        return False
    ok, table = e2e_verdict(e2e_rows(store), judged=not dry)
    log += [f"End-to-end / step per trial (goal on a GPU: >= {E2E_GOAL}; step: batch / median step, e2e: the steps' "
            "samples / their wall time, batch preparation included):", "", *table, ""]
    print("\n".join(table))
    return ran and ok


def dry_run(out: Path, only: str | None = None) -> int:
    """The steps' CPU parts, each capped as on a GPU, their summary written to ``out``."""
    log = [f"# GPU check, dry run on the CPU, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", ""]
    ok = True
    if only == "estimate":
        ok &= estimate_check(log, dry=True)
        out.write_text("\n".join(log) + "\n", encoding="utf-8")
        print(f"gpu_check --dry-run --only estimate: {'passed' if ok else 'FAILED'}; summary in {out}")
        return 0 if ok else 1
    if only is None:
        ok &= _run("Readings' windows (dry run)", [sys.executable, "benchmarks/readings_check.py", "--dry-run"], log,
                   READINGS_TIMEOUT_S)
        ok &= _run("Device resolution (dry run: as if a GPU were present)",
                   [sys.executable, "benchmarks/devices_check.py", "--dry-run"], log, DEVICES_TIMEOUT_S)
    ok &= e2e_check(Path(tempfile.mkdtemp(prefix="gpu_check_dry_")), log, dry=True)
    if only is None:
        ok &= estimate_check(log, dry=True)
    out.write_text("\n".join(log) + "\n", encoding="utf-8")
    print(f"gpu_check --dry-run: {'every step passed' if ok else 'a step FAILED'}; summary in {out}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Run every step (or say there is no GPU) and write the summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "gpu_check.md"), help="where to write the summary")
    ap.add_argument("--work", help="directory for the stores (default: a temporary one)")
    ap.add_argument("--dry-run", action="store_true", help="run the steps' CPU parts (no GPU needed)")
    ap.add_argument("--only", choices=("e2e", "estimate"),
                    help="run one step only: e2e, end-to-end / step (step 5); estimate, the estimate (step 6)")
    args = ap.parse_args(argv)
    gpus = gpu_names()
    if args.dry_run:
        return dry_run(Path(args.out), args.only)
    if not gpus:
        print("gpu_check: no GPU here (no nvidia-smi, or it lists no GPU): nothing to check; exit 0")
        return 0
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu_check_"))
    work.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    log = [f"# GPU check, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
           f"GPU(s): {', '.join(gpus)}. Written by `python benchmarks/gpu_check.py`.", ""]
    if args.only == "estimate":
        ok = estimate_check(log, dry=False)
        Path(args.out).write_text("\n".join(log) + "\n", encoding="utf-8")
        print(f"gpu_check --only estimate: {'passed' if ok else 'FAILED'}; summary in {args.out}")
        return 0 if ok else 1
    if args.only == "e2e":
        ok = e2e_check(work, log, dry=False)
        Path(args.out).write_text("\n".join(log) + "\n", encoding="utf-8")
        print(f"gpu_check --only e2e: {'passed' if ok else 'FAILED'}; summary in {args.out}")
        return 0 if ok else 1
    toml = work / "gpu_check.toml"
    toml.write_text(SWEEP_TOML)
    ok = _run("PyTorch sweep on the GPU", [py, "-m", "harness", "run", str(toml), "--out", str(work / "sweep")], log)
    if ok:
        log += ["Figures per trial (step: batch / median step; e2e: incl. batch preparation):", "",
                *sweep_table(work / "sweep" / "results.sqlite"), ""]
    ok &= _run("Readings' windows and the sampler against nvidia-smi", [py, "benchmarks/readings_check.py"], log,
               READINGS_TIMEOUT_S)
    for limit in (0, 6144):
        title = "maxbatch deep_cnn, whole card" if not limit else f"maxbatch deep_cnn, --memory-limit-mib {limit}"
        cmd = [py, "-m", "harness", "maxbatch", "--framework", "pytorch", "--model", "deep_cnn", "--device", "gpu",
               "--out", str(work / f"maxbatch_{limit}")]
        ok &= _run(title, cmd + (["--memory-limit-mib", str(limit)] if limit else []), log)
    ok &= _run("Device resolution: each framework's device, the one-device rule, a tiny run",
               [py, "benchmarks/devices_check.py"], log, DEVICES_TIMEOUT_S)
    ok &= e2e_check(work, log, dry=False)
    ok &= estimate_check(log, dry=False)
    Path(args.out).write_text("\n".join(log) + "\n", encoding="utf-8")
    print(f"gpu_check: {'every step passed' if ok else 'a step FAILED'}; summary in {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
