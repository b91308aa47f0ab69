"""A max-batch search's answer as the store records it: the :class:`~harness.records.MaxBatchResult` made from what
the search found, the model's size and the probes' outcomes, one part at a time (the answer, the recommendation and
its margin, the memory line, the seed's formula, the framework's estimate, the probes), then the heap settling and the
``--verify`` run added to it (issue 39: typed parts, flattened only by the store).

Pure: it runs nothing (:mod:`harness.maxbatch.probes` runs the workers, :mod:`harness.maxbatch.searching` the search).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from harness.maxbatch.advice import MIB, Formula, Margin, pow2_at_or_below, recommend
from harness.maxbatch.budget import Budget
from harness.maxbatch.request import MaxBatchRequest
from harness.maxbatch.search import SearchResult
from harness.maxbatch.whathelps import setting_label
from harness.records import (
    HeapSettling,
    MaxBatchResult,
    MemoryLine,
    ProbeLog,
    RecommendedBatch,
    SearchAnswer,
    SettleRun,
    StoredEstimate,
    StoredFormula,
    StoredMargin,
    TrialOutcome,
    Verification,
)


@dataclass(frozen=True)
class ModelSize:
    """What the seed's formula needs of the model: its parameters and, from its description, the activation floats
    kept per sample (0: a native model, which has no description, so no analytic size and no analytic formula)."""

    param_count: int
    activation_floats: int = 0


@dataclass(frozen=True)
class Provenance:
    """Where the answer was measured: the store's run, the machine (harness.monitor.environment.capture) and the
    allocator settings the probes ran with, which the answer needs (advice.answer_env)."""

    run_id: int
    env: Mapping[str, Any] = field(default_factory=dict)
    train_env: Mapping[str, str] = field(default_factory=dict)


def answer_record(req: MaxBatchRequest, budget: Budget, result: SearchResult, outcomes: Sequence[TrialOutcome],
                  model: ModelSize, where: Provenance, adapter: type[Any] | None = None) -> MaxBatchResult:
    """The answer of one search, as the store records it (a ``maxbatch`` row), before any settling or verify run.
    ``adapter``: the class that ran the probes (the search's runtime's), for its default options and whether it offers
    an estimate; None (a test's row): no defaults, no estimate offered.

    The margin is memory to leave unused under the budget: at a boundary the search found, all of it comes off the
    answer; at --max-batch-cap (no size failed) what the cap already leaves counts, so a cap far below the budget is
    itself the recommendation (it was 2 for resnet20 capped at 4 with 7.7 GB of 8 GB unused: issue 30).
    """
    fit = result.fit
    # the analytic per-sample size: every layer's output kept for backward, plus its gradient (x2), fp32
    analytic_mib = model.activation_floats * 4 * 2 / MIB
    per_sample = fit.b_mib_per_sample if fit is not None else analytic_mib
    train_env = dict(where.train_env)
    margin = Margin.measure(result.probes, result.max_batch, budget.kind, req.margin_mib, train_env, per_sample,
                            framework=req.framework)
    at_answer = [p.peak_mib for p in result.probes
                 if p.batch == result.max_batch and p.status == "ok" and p.peak_mib is not None]
    still = margin.total_mib
    if result.capped and at_answer:
        still = max(0.0, margin.total_mib - (budget.mib - max(at_answer)))
    rec, rec_pow2, rec_mult8 = recommend(result.max_batch, still, fit, analytic_mib)
    ok_outcome = next((o for o in reversed(outcomes) if o.status == "ok"), None)
    estimate, fit_source = estimate_part(req, result, adapter)
    return MaxBatchResult(
        run_id=where.run_id, experiment=req.experiment, framework=req.framework, model=req.model, dataset=req.dataset,
        device=(ok_outcome.device.get("device") if ok_outcome else None) or budget.device,
        precision=req.precision, math_mode=req.math_mode, strategy=result.strategy, budget_mib=budget.mib,
        budget_kind=budget.kind,
        # issue 14, item 5: which setting this search ran with, so the searches of one "what helps" run (and any
        # other rows) can be told apart; max_batch is the micro-batch, effective_batch what one update trains
        setting=setting_label(req.precision, req.accumulate_steps, req.adapter_options,
                              _default_options(adapter), env=req.env),
        accumulate_steps=req.accumulate_steps, adapter_options=dict(req.adapter_options),
        finished_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        env=dict(where.env), versions=dict(ok_outcome.versions) if ok_outcome else {},
        answer=_answer_part(req, budget, result, outcomes, max(at_answer) if at_answer else None),
        recommendation=RecommendedBatch(batch=rec, pow2=rec_pow2, mult8=rec_mult8, train_env=train_env),
        margin=StoredMargin(user_mib=req.margin_mib, jitter_mib=margin.jitter_mib, growth_mib=margin.growth_mib,
                            heap_mib=margin.heap_mib, total_mib=margin.total_mib),
        line=MemoryLine(a_mib=fit.a_mib if fit else None, b_mib_per_sample=fit.b_mib_per_sample if fit else None,
                        source=fit_source),
        formula=_formula_part(req, budget, result.max_batch, model, per_sample),
        estimate=estimate,
        probes=ProbeLog(n=result.probes_n, wall_s=result.wall_s, confirm_steps=req.confirm_steps,
                        cuda_context_mib=cuda_context_mib(outcomes), items=tuple(result.probes)),
    )


def _answer_part(req: MaxBatchRequest, budget: Budget, result: SearchResult, outcomes: Sequence[TrialOutcome],
                 peak_mib: float | None) -> SearchAnswer:
    """Where the search stopped (issue 31: first_fail - max_batch is within the resolution) and what it measured at
    the answer."""
    fail = result.first_fail
    return SearchAnswer(
        max_batch=result.max_batch, effective_batch=result.max_batch * req.accumulate_steps, capped=result.capped,
        fail_batch=fail.batch if fail else None, fail_status=fail.status if fail else None,
        fail_reason=fail.reason if fail else None, peak_mib=peak_mib,
        samples_per_s=answer_throughput(outcomes, result.max_batch, req.confirm_steps),
        resolution=result.resolution.label, spread_mib=result.spread_mib or None,
        resolution_note="; ".join(n for n in (req.search_cap(budget.device)[1] if result.capped else "",
                                              result.note) if n) or None)


def _formula_part(req: MaxBatchRequest, budget: Budget, answer: int, model: ModelSize,
                  per_sample_mib: float) -> StoredFormula:
    """The seed's formula with the measured per-sample size and with the analytic one (none for a native model: no
    analytic size, so no analytic formula, not a 0 that looks measured)."""
    formula = Formula.compute(model.param_count, req.optimizer, req.momentum, budget.mib, per_sample_mib)
    part = StoredFormula(batch=formula.batch, error_pct=formula.error_pct(answer), param_count=model.param_count,
                         model_state_mib=formula.model_state_mib, per_sample_mib=per_sample_mib)
    if not model.activation_floats:
        return part
    analytic_mib = model.activation_floats * 4 * 2 / MIB
    analytic = Formula.compute(model.param_count, req.optimizer, req.momentum, budget.mib, analytic_mib)
    return replace(part, analytic_batch=analytic.batch, analytic_error_pct=analytic.error_pct(answer),
                   analytic_mib_per_sample=analytic_mib)


def estimate_capable(adapter: type) -> bool:
    """Whether the adapter class offers a step-memory estimate (capability ``step_memory_estimate``: it overrides
    ``estimate_step_memory``; read from its class, no framework imported)."""
    from harness.config.experiment import has_hook

    return has_hook(adapter, "estimate_step_memory")


def estimate_part(req: MaxBatchRequest, result: SearchResult, adapter: type[Any] | None = None
                  ) -> tuple[StoredEstimate, str | None]:
    """Issue 41: the framework's estimate, the boundary predicted from it, its error against the measured answer, and
    a note saying where it came from and what became of it (or why none); and where the memory line's slope came from
    ("estimate", None: measured), known only where there was an estimate."""
    est = result.estimate
    carrier = next((p for p in result.probes if p.estimate_mib or p.estimate_note), None)
    if est is None:
        if result.strategy != "model":
            return StoredEstimate(note=f"not asked for: strategy {result.strategy}"), None
        if carrier is None and not _offers_estimate(adapter):
            return StoredEstimate(note=f"the {req.framework} adapter offers no step-memory estimate (no public one in "
                                       "the framework): the line was fitted from probes"), None
        return StoredEstimate(note=f"none: {result.estimate_note or (carrier.estimate_note if carrier else '')}"), None
    first = carrier.batch if carrier is not None else 1
    measured = carrier.growth_mib if carrier is not None and carrier.growth_mib is not None else (
        carrier.peak_mib if carrier is not None else None)
    predicted = result.predicted_batch
    sizes = ", ".join(str(b) for b, _ in carrier.estimate_mib) if carrier is not None else ""
    return StoredEstimate(
        batch=predicted,
        error_pct=((predicted - result.max_batch) / result.max_batch * 100.0
                   if predicted is not None and result.max_batch > 0 else None),
        mib_per_sample=est.b_mib_per_sample, step_fixed_mib=est.a_mib,
        fixed_cost_mib=(measured - est.memory_mib(first)) if measured is not None else None,
        note=f"{req.framework}'s estimate at batch {sizes}, fixed cost from the probe at {first}: "
             f"{result.estimate_note}"), result.fit_source or None


def _offers_estimate(adapter: type[Any] | None) -> bool:
    """Whether the adapter offers an estimate, for the stored note (none given: no)."""
    return adapter is not None and estimate_capable(adapter)


def _default_options(adapter: type[Any] | None) -> dict[str, Any]:
    """The adapter's default settings (an option at its default is no setting), {} where none is given."""
    return dict(adapter.validate_options({})) if adapter is not None else {}


def answer_throughput(outcomes: Sequence[TrialOutcome], answer: int, confirm_steps: int) -> float | None:
    """Step throughput (samples/s, every sample of an update counted) at the answer: the confirm run's, which ran
    the most steps there, else the short probe's; None when no probe at the answer measured it."""
    at_answer = [o for o in outcomes if o.status == "ok" and o.trial.batch_size == answer and o.metrics is not None
                 and o.metrics.step_samples_per_s is not None and o.trial.purpose == "probe"]
    at_answer.sort(key=lambda o: o.trial.timed_steps == confirm_steps)  # stable: the confirm runs last
    return float(at_answer[-1].metrics.step_samples_per_s) if at_answer else None  # type: ignore[union-attr,arg-type]


def cuda_context_mib(outcomes: Sequence[TrialOutcome]) -> float | None:
    """The most any probe's worker held on the GPU outside its framework's allocator (None: none measured it)."""
    held = [o.metrics.cuda_context_mib for o in outcomes
            if o.metrics is not None and o.metrics.cuda_context_mib is not None]
    return max(held) if held else None


def settled(row: MaxBatchResult, runs: Sequence[SettleRun], steps: int) -> MaxBatchResult:
    """The answer with the recommendation after the heap settling (probes.settle_heap), the heap allowance it leaves
    (in MiB by the fitted slope, on top of jitter and growth), and the runs that decided it."""
    size = runs[-1].batch if runs else 0
    per_sample = float(row.line.b_mib_per_sample or row.formula.per_sample_mib or 0.0)
    before = int(row.recommendation.batch or 0)
    old_heap = float(row.margin.heap_mib or 0.0)
    heap = old_heap + max(0, before - size) * per_sample
    total = float(row.margin.total_mib or 0.0) - old_heap + heap
    return replace(
        row, recommendation=replace(row.recommendation, batch=size, pow2=pow2_at_or_below(size),
                                    mult8=(size // 8 * 8) or None),
        margin=replace(row.margin, heap_mib=heap, total_mib=total),
        settling=HeapSettling(steps=steps, runs=tuple(runs)))


def verified(row: MaxBatchResult, outcome: TrialOutcome, peak_mib: float | None) -> MaxBatchResult:
    """The answer with its verification run: ``pass`` only when every step and the eval ran (``peak_mib``: its peak
    in the budget's units, where it passed)."""
    ok = outcome.status == "ok"
    return replace(row, verification=Verification(
        steps=outcome.trial.timed_steps, status="pass" if ok else "fail",
        reason="" if ok else f"{outcome.status}: {outcome.reason}", peak_mib=peak_mib if ok else None))
