"""batchscope's max-batch finder beside PyTorch Lightning's, each answer then trained in a fresh plain process.

    .venv/bin/python benchmarks/maxbatch_vs_lightning.py [--budget-mib 520] [--steps 20] [--runs 1]
                                                          [--lightning-python .venv-lightning/bin/python]
    .venv/bin/python benchmarks/maxbatch_vs_lightning.py --repeat-batch N [--repeat-runs 10] [--steps 8]

The same model (tiny_cnn on 3x64x64 noise, SGD momentum 0.9, one thread, CPU) under the same RLIMIT_DATA
budget, three finders: batchscope ``maxbatch`` (strategy ``model``, every probe a fresh worker) and
Lightning's ``Tuner.scale_batch_size`` in modes ``power`` and ``binsearch`` (in one process, as Lightning
runs it; with ``--train-after`` training goes on at the answer in that process). Each answer is then
trained for ``--steps`` steps plus an eval pass in a fresh plain PyTorch loop (benchmarks/maxbatch_child.py)
under the same budget: batchscope's exact boundary and its recommendation with the allocator settings the
command prints (and, for contrast, under glibc's default malloc), Lightning's answers as a Lightning user
would train them (glibc's default malloc). Printed: a Markdown table for docs/maxbatch.md.

Lightning is not a dependency of batchscope. Install it beside the shared environment, reusing its torch:

    python3 -m venv .venv-lightning
    echo "$PWD/.venv/lib/python3.11/site-packages" > .venv-lightning/lib/python3.11/site-packages/shared.pth
    .venv-lightning/bin/pip install pytorch-lightning==2.6.6

Without it the Lightning rows are skipped with a message and batchscope's rows still run.

``--repeat-batch N`` runs no finder: it trains N ``--repeat-runs`` times, each in a fresh plain process under the
budget with the settings batchscope prints, and counts the passes (exit 0 only when all passed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import machine_facts

from harness.data import DataRequest, prepare
from harness.envs.runtime import resolve_runtimes
from harness.errors import BatchscopeError
from harness.maxbatch.advice import train_advice
from harness.maxbatch.request import MaxBatchRequest
from harness.maxbatch.searching import MaxBatchSearch
from harness.store import Store

ROOT = Path(__file__).resolve().parent.parent
CHILD = ROOT / "benchmarks" / "maxbatch_child.py"
SHAPE = (3, 64, 64)
MODES = ("power", "binsearch")


def child(python: str, argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> dict[str, Any]:
    """Run maxbatch_child.py; its JSON line, or what the exit status says when it printed none."""
    import os

    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    t0 = time.monotonic()
    try:
        proc = subprocess.run([python, str(CHILD), *argv], capture_output=True, text=True, env=full_env,
                              cwd=str(cwd), timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "reason": f"no answer in {timeout_s:g} s", "wall_s": timeout_s}
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("RESULT ")), None)
    last = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    crash = {"status": "crashed", "reason": f"exit {proc.returncode}: {last}"}
    out = json.loads(line[len("RESULT "):]) if line else crash
    out["wall_s"] = time.monotonic() - t0
    return out


def lightning_available(python: str) -> str | None:
    """None when ``python`` can import pytorch_lightning, else why not (shown to the user)."""
    if not Path(python).exists():
        return f"{python} does not exist"
    proc = subprocess.run([python, "-c", "import pytorch_lightning"], capture_output=True, text=True, check=False)
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["import failed"])[-1]


def trained(result: dict[str, Any]) -> str:
    """A verification's outcome in a table cell."""
    if result["status"] == "ok":
        return "yes"
    return f"**no**: {result['status']} at step {result.get('step', '?')}"


def one_run(args: argparse.Namespace, run: int, data_dir: str, probe_data: Any, work: Path) -> list[str]:
    """One round: the three finders and the verification of each answer; the table rows."""
    rows: list[str] = []
    budget = args.budget_mib

    def verify(batch: int, env: dict[str, str]) -> dict[str, Any]:
        return child(sys.executable, ["train", "--data", data_dir, "--batch", str(batch), "--steps",
                                      str(args.steps), "--limit-mib", f"{budget:g}"], env, work, args.timeout_s)

    req = MaxBatchRequest(framework="pytorch", model="tiny_cnn", device="cpu", memory_limit_mib=budget, threads=1,
                          momentum=0.9, synthetic_shape=SHAPE, synthetic_samples=512, experiment=f"vs-lightning-{run}")
    t0 = time.monotonic()
    with Store.open(work / f"batchscope-{run}") as store:
        try:
            runtime = resolve_runtimes(["pytorch"], {}, "cpu")["pytorch"]  # its managed environment, as the CLI's
            found = MaxBatchSearch.build(req, {}, runtime=runtime, data=probe_data, log_dir=work / "logs").run(store, 1)
        except BatchscopeError as e:
            rows.append(f"| {run} | batchscope maxbatch | - | - | failed: {e} | - |")
            found = None
    if found is not None:
        row, wall = found.row, time.monotonic() - t0
        env = dict(row.recommendation.train_env or {})
        words = " ".join(f"{k}={v}" for k, v in env.items())
        print(f"search {run}: boundary {row.answer.max_batch}, slope {row.line.b_mib_per_sample} MiB/sample; "
              f"{train_advice(row)}; settling runs {row.settling.runs}", file=sys.stderr, flush=True)
        for label, batch in (("exact boundary", row.answer.max_batch),
                             ("recommended", row.recommendation.batch or 0)):
            default = verify(batch, {})  # the printed settings are glibc's defaults unless the user set some
            how = f"{trained(verify(batch, env))} (with {words}); " if env else ""
            rows.append(f"| {run} | batchscope maxbatch, {label} | {batch} | {row.probes.n} probes, {wall:.0f} s "
                        f"| never | {how}{trained(default)} (glibc default) |")
    reason = None if args.no_lightning else lightning_available(args.lightning_python)
    if args.no_lightning or reason is not None:
        print(f"Lightning: skipped ({'--no-lightning' if args.no_lightning else reason}); install it as this "
              "script's docstring says to compare", file=sys.stderr)
        return rows
    for mode in MODES:
        out = child(args.lightning_python, ["lightning", "--data", data_dir, "--mode", mode, "--limit-mib",
                                            f"{budget:g}", "--train-after", str(args.steps)], {}, work, args.timeout_s)
        answer = out.get("answer")
        crashed = "no" if out["status"] == "ok" else f"**yes**: {out.get('reason', out['status'])[:120]}"
        after = out.get("train_after")
        same = "" if after is None else ("; training on in the same process: " +
                                         ("yes" if after == "ok" else f"**no**: {after[:80]}"))
        fresh = trained(verify(int(answer), {})) if answer else "-"
        rows.append(f"| {run} | Lightning `{mode}` | {answer if answer else '-'} | {out['wall_s']:.0f} s | "
                    f"{crashed} | {fresh} (glibc default){same} |")
    return rows


def repeat(args: argparse.Namespace) -> int:
    """Train ``--repeat-batch`` ``--repeat-runs`` times in fresh plain processes; 0 when every run passed."""
    env = dict(kv.split("=", 1) for kv in args.repeat_env)  # none: glibc's defaults, as batchscope's probes run
    print(machine_facts())
    words = " ".join(f"{k}={v}" for k, v in env.items()) or "no allocator settings (glibc's defaults)"
    print(f"batch {args.repeat_batch}, {args.steps} steps + eval, RLIMIT_DATA {args.budget_mib:g} MiB, {words}")
    passed = 0
    with tempfile.TemporaryDirectory(prefix="mb-repeat-") as tmp:
        data = prepare(DataRequest(name="synthetic", synthetic_shape=SHAPE, synthetic_samples=2048), Path(tmp))
        for run in range(1, args.repeat_runs + 1):
            out = child(sys.executable, ["train", "--data", data.directory, "--batch", str(args.repeat_batch),
                                         "--steps", str(args.steps), "--limit-mib", f"{args.budget_mib:g}"],
                        env, Path(tmp), args.timeout_s)
            passed += out["status"] == "ok"
            print(f"run {run}: {trained(out)} ({out['wall_s']:.0f} s)", flush=True)
    print(f"{passed} of {args.repeat_runs} runs trained")
    return 0 if passed == args.repeat_runs else 1


def main(argv: list[str] | None = None) -> int:
    """Run ``--runs`` rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-mib", type=float, default=520.0, help="RLIMIT_DATA of every process")
    parser.add_argument("--steps", type=int, default=20, help="training steps of each verification (then eval)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per child process")
    parser.add_argument("--lightning-python", default=str(ROOT / ".venv-lightning" / "bin" / "python"))
    parser.add_argument("--no-lightning", action="store_true", help="batchscope's rows only")
    parser.add_argument("--repeat-batch", type=int, default=0,
                        help="no finders: train this size --repeat-runs times, each in a fresh plain process, with "
                             "the settings batchscope prints (--repeat-env), and count the passes")
    parser.add_argument("--repeat-runs", type=int, default=10)
    parser.add_argument("--repeat-env", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting to train with (repeatable; default none: glibc's defaults, as the probes run)")
    args = parser.parse_args(argv)
    if args.repeat_batch:
        return repeat(args)
    print(machine_facts())
    with tempfile.TemporaryDirectory(prefix="mb-vs-lightning-") as tmp:
        work = Path(tmp)
        probe_data = prepare(DataRequest(name="synthetic", synthetic_shape=SHAPE, synthetic_samples=512), work)
        # Lightning's finder stops at the data set's size: give the finders and the loops 2048 samples
        # (memory-mapped from a file, outside RLIMIT_DATA, like the probes' 512)
        big = prepare(DataRequest(name="synthetic", synthetic_shape=SHAPE, synthetic_samples=2048), work)
        print(f"tiny_cnn {'x'.join(map(str, SHAPE))}, SGD momentum 0.9, 1 thread, CPU, RLIMIT_DATA "
              f"{args.budget_mib:g} MiB; each answer trained {args.steps} steps + eval in a fresh plain PyTorch loop\n")
        print("| run | finder | answer | cost | crashed | answer trains in a fresh process |")
        print("|---|---|---|---|---|---|")
        for run in range(1, args.runs + 1):
            for line in one_run(args, run, big.directory, probe_data, work):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
