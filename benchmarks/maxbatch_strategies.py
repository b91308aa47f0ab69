"""Probes, wall time and the framework's estimate per max-batch strategy, on CPU under a fixed OS-enforced budget.

    PYTHONPATH=. python benchmarks/maxbatch_strategies.py [--frameworks pytorch,jax]
        [--models tiny_cnn,osu_cnn,deep_cnn,resnet20] [--strategies model,fitted,double-bisect]
        [--env MALLOC_MMAP_THRESHOLD_=131072] [--no-plain] [--out results.jsonl] [--show-probes]

For each framework and model, every strategy searches the same model under the same budget (RLIMIT_DATA on every
probe) to the same resolution (``--granularity``, default 1 %); their answers must agree within it (a disagreement is
printed). ``model`` (issue 41) predicts its first size near the boundary from the framework's own step-memory estimate
(PyTorch: MemTracker under FakeTensorMode; JAX: the compiled step's memory_analysis) and the fixed cost the first probe
measured; ``fitted`` is the search before issue 41 (a line from probes at 1, 16 and 3/4 of its prediction);
``double-bisect`` doubles then bisects (Lightning's binsearch). Printed per search: the answer, the probes (confirm run
included), their wall time, and for ``model`` the predicted size and its error against the measured answer. One JSON
line per search goes to ``--out``; with ``--show-probes`` each probe as ``stage:batch:status@peak``, ``+long`` where a
search probe trained the confirm run's length (``model`` near an estimate's prediction, where the answer's own probe is
its confirm run).

``--env KEY=VALUE`` runs every probe with that variable (``MALLOC_MMAP_THRESHOLD_=131072``: glibc's fixed mmap
threshold, under which a CPU peak repeats to ~1 MiB between processes: a fixed memory law); ``--no-plain`` is accepted
for the command line's spelling (this script runs only the searches with the settings given).

Every probe is a real worker, so the wall time includes each framework's start-up and a loaded machine moves it: quote
probe counts, and the load beside any time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from harness.data import DataRequest, prepare
from harness.envs.runtime import FrameworkRuntime, resolve_runtimes
from harness.envs.spec import chosen_kind
from harness.errors import BatchscopeError
from harness.maxbatch.request import MaxBatchRequest
from harness.maxbatch.search import CPU_RESOLUTION, Resolution
from harness.maxbatch.searching import MaxBatchSearch
from harness.monitor import environment
from harness.store import Store

SHAPE = (3, 32, 32)
#: budgets (MiB of RLIMIT_DATA) that put each boundary at ~100-250 samples of 3x32x32 over each framework's fixed cost
#: (PyTorch ~290 MiB, JAX ~400 MiB at batch 1 here), so that a probe near the boundary takes seconds, not minutes
BUDGETS_MIB = {
    ("pytorch", "tiny_cnn"): 340.0, ("pytorch", "osu_cnn"): 380.0, ("pytorch", "deep_cnn"): 600.0,
    ("pytorch", "resnet20"): 560.0,
    ("jax", "tiny_cnn"): 520.0, ("jax", "osu_cnn"): 600.0, ("jax", "deep_cnn"): 900.0, ("jax", "resnet20"): 720.0,
}


def parse_env(items: list[str]) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` strings as pairs."""
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env {item!r}: give KEY=VALUE")
        pairs.append((key, value))
    return tuple(pairs)


def search_once(framework: str, model: str, strategy: str, budget: float, env: tuple[tuple[str, str], ...],
                granularity: str, data: object, cache: Path, device: str = "cpu",
                runtime: FrameworkRuntime | None = None) -> dict[str, object]:
    """One search; its figures as a JSON-able dict (``error`` set where it failed)."""
    req = MaxBatchRequest(framework=framework, model=model, device=device, strategy=strategy, memory_limit_mib=budget,
                          threads=1 if device == "cpu" else 0, momentum=0.9, synthetic_shape=SHAPE,
                          synthetic_samples=512, experiment=f"bench-{framework}-{model}-{strategy}",
                          granularity=granularity, env=dict(env))
    out_row: dict[str, object] = {"framework": framework, "model": model, "strategy": strategy, "budget_mib": budget,
                                  "env": dict(env), "load_1min": os.getloadavg()[0]}
    with Store.open(cache / f"{framework}-{model}-{strategy}") as store:
        t0 = time.monotonic()
        try:
            # on a GPU the machine's environment (its GPUs decide the budget's kind); on CPU none is needed
            machine = environment.capture() if device == "gpu" else {"gpus": []}
            out = MaxBatchSearch.build(req, machine, runtime=runtime, data=data,  # type: ignore[arg-type]
                                       log_dir=cache / "logs").run(store, 0)
        except BatchscopeError as e:
            out_row.update(error=str(e)[:500], wall_s=round(time.monotonic() - t0, 1))
            return out_row
        wall = time.monotonic() - t0
    r, row = out.result, out.row
    out_row.update(answer=r.max_batch, first_fail=row.answer.fail_batch, probes=r.probes_n, wall_s=round(wall, 1),
                   # ``+long``: a search probe that trained the confirm run's length (issue 41)
                   probes_trail=[f"{p.stage}:{p.batch}:{p.status}" + ("+long" if p.confirm and p.stage != "confirm"
                                                                      else "")
                                 + (f"@{p.peak_mib:.1f}" if p.peak_mib else "") for p in r.probes],
                   fit_a_mib=row.line.a_mib, fit_b_mib_per_sample=row.line.b_mib_per_sample,
                   predicted=row.estimate.batch, predicted_error_pct=row.estimate.error_pct,
                   estimate_mib_per_sample=row.estimate.mib_per_sample,
                   estimate_fixed_cost_mib=row.estimate.fixed_cost_mib, estimate_note=row.estimate.note,
                   formula=row.formula.batch, formula_error_pct=row.formula.error_pct,
                   load_1min_end=os.getloadavg()[0])
    return out_row


def main(argv: list[str] | None = None) -> int:
    """Run every strategy per framework and model and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="pytorch,jax")
    parser.add_argument("--models", default="tiny_cnn,osu_cnn,deep_cnn,resnet20")
    parser.add_argument("--strategies", default="model,fitted,double-bisect")
    parser.add_argument("--budget-mib", type=float, help="one budget for every search (default: BUDGETS_MIB)")
    parser.add_argument("--granularity", default="", help="the searches' resolution (default: 1%%; 'exact')")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-plain", action="store_true", help="accepted for the command line's spelling")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="gpu: the budget is an emulated card (--budget-mib; benchmarks/gpu_check.py)")
    parser.add_argument("--out", type=Path, help="append one JSON line per search here")
    parser.add_argument("--show-probes", action="store_true", help="print each search's probes")
    args = parser.parse_args(argv)
    env = parse_env(args.env)
    # each framework's managed environment (built on first use), of the kind the device needs
    runtimes = resolve_runtimes(args.frameworks.split(","), {}, chosen_kind(args.device == "gpu"))
    cache = Path(tempfile.mkdtemp(prefix="mb-bench-"))
    data = prepare(DataRequest(name="synthetic", synthetic_shape=SHAPE, synthetic_samples=512), cache)
    where = ("CPU, one thread, RLIMIT_DATA on each probe" if args.device == "cpu" else
             "GPU, an emulated card of the budget on each probe")
    print(f"max-batch strategies on {'x'.join(map(str, SHAPE))} synthetic input, {where}; env {dict(env) or 'none'}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'framework':<8} {'model':<9} {'budget':>6} {'strategy':<13} {'answer':>6} {'probes':>6} {'wall s':>7} "
          f"{'predicted (error)':>18}", flush=True)
    for framework in args.frameworks.split(","):
        for model in args.models.split(","):
            budget = args.budget_mib or BUDGETS_MIB.get((framework, model), 700.0)
            answers = {}
            for strategy in args.strategies.split(","):
                row = search_once(framework, model, strategy, budget, env, args.granularity, data, cache,
                                  args.device, runtimes[framework])
                if args.out:
                    with args.out.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                if "error" in row:
                    print(f"{framework:<8} {model:<9} {budget:>6.0f} {strategy:<13} failed: {row['error']}", flush=True)
                    continue
                answers[strategy] = int(row["answer"])  # type: ignore[call-overload]
                pred = "-" if row["predicted"] is None else (
                    f"{row['predicted']} ({float(row['predicted_error_pct']):+.1f}%)")  # type: ignore[arg-type]
                print(f"{framework:<8} {model:<9} {budget:>6.0f} {strategy:<13} {row['answer']:>6} {row['probes']:>6} "
                      f"{row['wall_s']:>7} {pred:>18}", flush=True)
                if args.show_probes:
                    print(f"    {' '.join(row['probes_trail'])}  ({row['estimate_note']})", flush=True)  # type: ignore[arg-type]
            if answers:
                res = Resolution.parse(args.granularity) if args.granularity else CPU_RESOLUTION
                low = min(answers.values())
                if max(answers.values()) - low > res.allowed(low):
                    print(f"{framework} {model}: the strategies disagree beyond the resolution: {answers} (probes in "
                          f"{cache})", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
