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
from harness.envs.runtime import FrameworkRuntime
from harness.errors import DoesNotFitError, SearchAborted
from harness.maxbatch.budget import resolve_budget
from harness.maxbatch.request import MaxBatchRequest
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

    def preflight(env: dict[str, Any], runtimes: Mapping[str, FrameworkRuntime]) -> None:
        for framework in exp.frameworks:
            resolve_budget(MaxBatchRequest.from_experiment(exp, framework), list(env.get("gpus") or []),
                           runtimes[framework])

    def searches(ctx: SweepContext, result: SweepResult) -> None:
        max_batch_searches(exp, ctx, result)

    return run_sweep(exp, out_dir, dataclasses.replace(options, preflight=preflight, after_trials=searches), listener)


def max_batch_searches(exp: Experiment, ctx: SweepContext, result: SweepResult) -> None:
    """``max_batch = true``: after the sweep, the max-batch search per framework, stored in ``maxbatch``.

    Each search runs its probes in the framework's runtime as the sweep resolved it (the managed environment or the
    user's ``--python``), here or, on Ray, on a node: the search travels there whole, runtime included. A framework
    whose result is already stored for this experiment is skipped (``--resume``). A search that finds nothing (the
    model does not fit at batch 1) is noted; one that could not search (its probes failed, its task was lost) is
    noted as an error too (``result.maxbatch_errors``: the command exits 1). The other frameworks still run: the
    sweep's own results are never lost to it.
    """
    done = {r.framework for r in ctx.store.maxbatch_answers("experiment = ?", (exp.name,))}
    todo = [f for f in exp.frameworks if f not in done]
    if hasattr(ctx.executor, "map_on_nodes"):  # Ray: one search per framework, side by side
        _searches_on_ray(ctx, result, {f: _search(exp, ctx, f) for f in todo})
        return
    for framework in todo:
        try:
            found = _search(exp, ctx, framework).run(ctx.store, ctx.run_id)
            result.maxbatch.append(found.row)
        except DoesNotFitError as e:
            result.maxbatch_notes.append(f"{framework}: {e}")
        except SearchAborted as e:
            _failed(result, framework, str(e))


def _search(exp: Experiment, ctx: SweepContext, framework: str) -> MaxBatchSearch:
    """The max-batch search of ``framework`` after the sweep: its request from the experiment, in the framework's
    runtime, on the sweep's data and machine."""
    return MaxBatchSearch.build(MaxBatchRequest.from_experiment(exp, framework), ctx.env,
                                runtime=ctx.runtimes[framework], data=ctx.data, log_dir=ctx.out_dir / "logs",
                                monitor_factory=ctx.monitor_factory)


def _failed(result: SweepResult, framework: str, why: str) -> None:
    """A search that gave no answer for a reason other than the model not fitting: said, and an error."""
    line = f"{framework}: the search failed: {why}"
    result.maxbatch_notes.append(line)
    result.maxbatch_errors.append(line)


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


@dataclasses.dataclass(frozen=True)
class NodeSearch:
    """What one search's Ray task sends back: its probes, its maxbatch row, and why it gave no answer ("" when it
    gave one); ``failed``: it could not search (its probes failed), as against finding that nothing fits."""

    trials: list[TrialOutcome]
    row: MaxBatchResult | None
    note: str = ""
    failed: bool = False


def search_on_node(search: MaxBatchSearch, run_id: int) -> NodeSearch:
    """The body of one search's Ray task: the search, built on the driver and sent whole (its runtime says which
    interpreter every probe runs in), run against a store that only collects."""
    collected = _Collected()
    try:
        search.run(cast(Store, collected), run_id)
    except DoesNotFitError as e:
        return NodeSearch(collected.trials, collected.row, str(e))
    except SearchAborted as e:
        return NodeSearch(collected.trials, collected.row, str(e), failed=True)
    return NodeSearch(collected.trials, collected.row)


def _searches_on_ray(ctx: SweepContext, result: SweepResult, searches: Mapping[str, MaxBatchSearch]) -> None:
    """The ``searches`` as Ray tasks side by side (a GPU, or a whole CPU node, each); the driver writes each one's
    probes (with where they ran) and its result as it comes back."""
    on_gpu = any(s.budget.device == "gpu" for s in searches.values())
    calls = [(search, ctx.run_id) for search in searches.values()]
    answers = ctx.executor.map_on_nodes(search_on_node, calls, gpu=on_gpu)  # type: ignore[union-attr]
    for framework, answer in zip(searches, answers, strict=True):
        if isinstance(answer, str):
            _failed(result, framework, answer)
            continue
        found, placement = answer
        for outcome in found.trials:
            outcome.placement = dataclasses.replace(placement, attempt=1)
            ctx.store.write_trial(outcome, ctx.run_id, ctx.env)
        if found.row is not None:
            ctx.store.write_maxbatch(found.row)
        if found.failed or (found.row is None and not found.note):
            _failed(result, framework, found.note or "the search gave no result")
        elif found.note:
            result.maxbatch_notes.append(f"{framework}: {found.note}")
        else:
            assert found.row is not None
            result.maxbatch.append(found.row)
