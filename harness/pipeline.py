"""The whole of ``batchscope run``: the sweep (:mod:`harness.run`), then the max-batch searches
(:mod:`harness.maxbatch`).

It sits above both: the sweep knows nothing of the max-batch search, and the search nothing of sweeps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from harness.config.experiment import Experiment
from harness.data import PreparedData
from harness.errors import DoesNotFitError, SearchAborted
from harness.maxbatch.request import MaxBatchRequest, resolve_budget
from harness.maxbatch.searching import MaxBatchSearch
from harness.records import MaxBatchResult, TrialOutcome
from harness.run.listener import SweepListener
from harness.run.sweep import SweepContext, SweepOptions, SweepResult, run_sweep
from harness.store import Store


def run_experiment(exp: Experiment, out_dir: Path, options: SweepOptions | None = None,
                   listener: SweepListener | None = None) -> SweepResult:
    """Run the sweep of ``exp`` and, with ``max_batch = true``, one max-batch search per framework after it.

    The arguments are those of :func:`harness.run.sweep.run_sweep`. A budget that cannot be enforced
    is refused before anything is written.
    """
    options = options or SweepOptions()
    if not exp.max_batch:
        return run_sweep(exp, out_dir, options, listener)

    def preflight(env: dict[str, Any]) -> None:
        for framework in exp.frameworks:
            resolve_budget(MaxBatchRequest.from_experiment(exp, framework), list(env.get("gpus") or []))

    def searches(ctx: SweepContext, result: SweepResult) -> None:
        max_batch_searches(exp, ctx, result)

    return run_sweep(exp, out_dir, dataclasses.replace(options, preflight=preflight, after_trials=searches), listener)


def max_batch_searches(exp: Experiment, ctx: SweepContext, result: SweepResult) -> None:
    """``max_batch = true``: after the sweep, the max-batch search per framework, stored in ``maxbatch``.

    A framework whose result is already stored for this experiment is skipped (``--resume``). A search
    that finds nothing (the model does not fit at batch 1, a probe keeps crashing) is noted, and the
    other frameworks still run: the sweep's own results are never lost to it.
    """
    done = {r.framework for r in ctx.store.maxbatch_answers("experiment = ?", (exp.name,))}
    if hasattr(ctx.executor, "map_on_nodes"):  # Ray: one search per framework, side by side
        _searches_on_ray(exp, ctx, result, [f for f in exp.frameworks if f not in done])
        return
    for framework in exp.frameworks:
        if framework in done:
            continue
        try:
            found = MaxBatchSearch.build(MaxBatchRequest.from_experiment(exp, framework), ctx.env, data=ctx.data,
                                         log_dir=ctx.out_dir / "logs", monitor_factory=ctx.monitor_factory)
            result.maxbatch.append(found.run(ctx.store, ctx.run_id).row)
        except (DoesNotFitError, SearchAborted) as e:
            result.maxbatch_notes.append(f"{framework}: {e}")


class _Collected:
    """What a search on a Ray node would have written: kept, and sent back to the driver, which alone writes the
    store (a store on a node's disk is neither shared nor locked with the driver's)."""

    def __init__(self) -> None:
        self.trials: list[TrialOutcome] = []
        self.row: MaxBatchResult | None = None

    def write_trial(self, outcome: TrialOutcome, run_id: int, env: Mapping[str, Any]) -> None:
        self.trials.append(outcome)

    def write_maxbatch(self, result: MaxBatchResult) -> int:
        self.row = result
        return 0


def _search_on_node(req: MaxBatchRequest, run_id: int, data: PreparedData, log_dir: Path,
                    monitor_factory: Any, env: dict[str, Any]) -> tuple[list[TrialOutcome], MaxBatchResult | None, str]:
    """The body of one search's Ray task: (its probes, its maxbatch row, why it gave no answer or "")."""
    collected = _Collected()
    note = ""
    try:
        found = MaxBatchSearch.build(req, env, data=data, log_dir=log_dir, monitor_factory=monitor_factory)
        found.run(cast(Store, collected), run_id)
    except (DoesNotFitError, SearchAborted) as e:
        note = str(e)
    return collected.trials, collected.row, note


def _searches_on_ray(exp: Experiment, ctx: SweepContext, result: SweepResult, frameworks: list[str]) -> None:
    """The searches of ``frameworks`` as Ray tasks side by side (a GPU, or a whole CPU node, each); the driver
    writes each one's probes (with where they ran) and its result as it comes back."""
    gpus = list(ctx.env.get("gpus") or [])
    reqs = [MaxBatchRequest.from_experiment(exp, f) for f in frameworks]
    on_gpu = any(r.device == "gpu" or (r.device == "auto" and gpus) for r in reqs)
    calls = [(req, ctx.run_id, ctx.data, ctx.out_dir / "logs", ctx.monitor_factory, ctx.env) for req in reqs]
    answers = ctx.executor.map_on_nodes(_search_on_node, calls, gpu=on_gpu)  # type: ignore[union-attr]
    for framework, answer in zip(frameworks, answers, strict=True):
        if isinstance(answer, str):
            result.maxbatch_notes.append(f"{framework}: {answer}")
            continue
        (probes, row, note), placement = answer
        for outcome in probes:
            outcome.placement = dataclasses.replace(placement, attempt=1)
            ctx.store.write_trial(outcome, ctx.run_id, ctx.env)
        if row is not None:
            ctx.store.write_maxbatch(row)
        if note or row is None:
            result.maxbatch_notes.append(f"{framework}: {note or 'the search gave no result'}")
        else:
            result.maxbatch.append(row)
