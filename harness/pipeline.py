"""The whole of ``batchscope run``: the sweep (:mod:`harness.run`), then the max-batch searches
(:mod:`harness.maxbatch`).

It sits above both: the sweep knows nothing of the max-batch search, and the search nothing of sweeps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.experiment import Experiment
from harness.errors import DoesNotFitError, SearchAborted
from harness.maxbatch.prober import run_maxbatch
from harness.maxbatch.request import MaxBatchRequest, resolve_budget
from harness.run.sweep import SweepContext, SweepResult, run_sweep


def run_experiment(exp: Experiment, out_dir: Path, **kwargs: Any) -> SweepResult:
    """Run the sweep of ``exp`` and, with ``max_batch = true``, one max-batch search per framework after it.

    Keyword arguments are those of :func:`harness.run.sweep.run_sweep`. A budget that cannot be enforced
    is refused before anything is written.
    """
    if not exp.max_batch:
        return run_sweep(exp, out_dir, **kwargs)

    def preflight(env: dict[str, Any]) -> None:
        for framework in exp.frameworks:
            resolve_budget(MaxBatchRequest.from_experiment(exp, framework), list(env.get("gpus") or []))

    def searches(ctx: SweepContext, result: SweepResult) -> None:
        max_batch_searches(exp, ctx, result)

    return run_sweep(exp, out_dir, preflight=preflight, after_trials=searches, **kwargs)


def max_batch_searches(exp: Experiment, ctx: SweepContext, result: SweepResult) -> None:
    """``max_batch = true``: after the sweep, the max-batch search per framework, stored in ``maxbatch``.

    A framework whose result is already stored for this experiment is skipped (``--resume``). A search
    that finds nothing (the model does not fit at batch 1, a probe keeps crashing) is noted, and the
    other frameworks still run: the sweep's own results are never lost to it.
    """
    done = {r["framework"] for r in ctx.store.maxbatch_results("experiment = ?", (exp.name,))}
    for framework in exp.frameworks:
        if framework in done:
            continue
        try:
            found = run_maxbatch(MaxBatchRequest.from_experiment(exp, framework), ctx.store, ctx.run_id,
                                 data=ctx.data, log_dir=ctx.out_dir / "logs", monitor_factory=ctx.monitor_factory,
                                 gpus=list(ctx.env.get("gpus") or []), env=ctx.env)
            result.maxbatch.append(found.row)
        except (DoesNotFitError, SearchAborted) as e:
            result.maxbatch_notes.append(f"{framework}: {e}")
