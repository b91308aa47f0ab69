"""The max-batch search's probes: each one a fresh worker, its peak in the budget's units, and the heap settling.

Every probe is a trial of its own (``purpose = "probe"``) run by :class:`~harness.run.executor.LocalExecutor`
in a fresh worker: a probe that runs out of memory takes nothing down with it and leaves no cached
allocator state behind for the next one. The search logic lives in :mod:`harness.maxbatch.search`, the search as one
object in :mod:`harness.maxbatch.searching`, the answer as the store records it in :mod:`harness.maxbatch.answer`.

Budgets are real, never numbers compared in the parent:

* ``gpu-card``: the card's own memory (the framework fails when it is full);
* ``gpu-emulated``: a smaller card, enforced by the framework (PyTorch: per-process memory fraction,
  TensorFlow: a logical device with a memory limit; MXNet cannot, and says so);
* ``cpu-rlimit-data``: on CPU, ``RLIMIT_DATA`` on the worker (:mod:`harness.run.executor`): the kernel
  refuses allocations past the limit, and the framework's allocation fails inside the probe.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness.config.limits import MAX_TIMEOUT_S
from harness.config.trial import OptimizerSpec, TrialSpec
from harness.data import PreparedData
from harness.envs.runtime import FrameworkRuntime, unchecked_runtime
from harness.maxbatch.advice import CPU_HEAP_ALLOWANCE, NONE_SETTLED, NOT_SETTLED
from harness.maxbatch.answer import cuda_context_mib as cuda_context_mib  # its home; the probes read it here too
from harness.maxbatch.answer import estimate_capable as estimate_capable
from harness.maxbatch.budget import Budget
from harness.maxbatch.request import MaxBatchRequest
from harness.maxbatch.search import GPU_CENSOR_PCT, ProbeResult, SearchSettings
from harness.records import SettleRun, TrialOutcome, TrialUnit, WorkerMetrics
from harness.run import gpufaults
from harness.run.executor import LocalExecutor

MIB = 1024.0 * 1024.0
#: a failure to load the framework's libraries for want of memory: an ImportError, not a MemoryError
SETUP_MEMORY_ERRORS = ("failed to map segment from shared object", "Cannot allocate memory",
                       "cannot allocate memory")
CONTROL_FACTOR = 2  # a CPU probe that fails without saying "memory" is run again with this much more,
CONTROL_FLOOR_MIB = 1024.0  # and at least this much more: a budget below the framework's start-up needs more than 2x
#: the recommendation under glibc's default malloc must train this many fresh runs of this many timed steps in a row
#: (settle_heap); each failure lowers it by CPU_HEAP_ALLOWANCE of itself, at most this many times (issue 22)
HEAP_SETTLE_RUNS = 3
HEAP_SETTLE_ROUNDS = 8
#: issue 41: the search's first probe asks the adapter's step-memory estimate at its own size (JAX reuses the step it
#: compiled for it) and this many samples more: far enough for a slope, compiled once (JAX: seconds; PyTorch's
#: fake-tensor trace costs the same at any size)
ESTIMATE_SPAN = 240


def estimate_batches(batch: int) -> tuple[int, ...]:
    """The sizes a probe at ``batch`` asks the estimate at (its own, then ESTIMATE_SPAN more)."""
    return (batch, batch + ESTIMATE_SPAN)


def parse_estimate(outcome: TrialOutcome) -> tuple[tuple[tuple[int, float], ...], str]:
    """The estimate a probe's worker reported (``metrics.step_estimate``): ((batch, MiB), ...) and why none ("")."""
    estimate = outcome.metrics.step_estimate if outcome.metrics is not None else None
    if estimate is None:
        return (), (f"the probe ended {outcome.status} before its estimate" if outcome.status != "ok" else
                    "the worker reported no estimate")
    if estimate.error is not None:
        return (), estimate.error
    points = estimate.points
    if not points:
        return (), "the worker reported an estimate at no size"
    if not all(math.isfinite(m) and m > 0 for _, m in points):
        return (), f"the estimate is not a positive size: {points}"
    return points, ""


def probe_peak_mib(outcome: TrialOutcome, budget_kind: str) -> float | None:
    """A successful probe's peak memory, in the units its budget counts.

    GPU: what the framework's allocator reserved (what a per-process cap counts), else its peak, plus what the
    worker held outside the allocator (the CUDA context: a card of the budget's size holds it too; issue 31) where
    the adapter measured it; else the sampler's NVML figure for the worker (which counts the context already). CPU:
    the highest VmData the worker sampled while training (what RLIMIT_DATA counts); without that, VmData when
    training began plus the RSS it grew by afterwards (RLIMIT_DATA counts private writable memory, not the shared
    libraries inside RSS); just the peak RSS when the worker did not report those.
    """
    m = outcome.metrics or WorkerMetrics()
    if budget_kind.startswith("gpu"):
        mon = outcome.monitor.aggregates
        for value in (m.framework_reserved_mib, m.framework_peak_mib):
            if value is not None:
                return float(value) + float(m.cuda_context_mib or 0.0)
        for value in (mon.get("proc_gpu_mem_peak_mib"), mon.get("proc_gpu_mem_mib")):
            if value is not None:
                return float(value)
        return None
    sampled = m.vmdata_peak_mib
    if sampled is not None:
        # VmData itself, sampled every millisecond while training (harness/run/worker/memory.py VmDataWatcher): the very
        # figure the limit counts, including mappings that come and go within a step. It replaces the RSS
        # estimate below rather than topping it up: maxrss is the whole process's high-water mark, so a
        # start-up spike can lift the estimate of every small probe alike (a flat line, no fit: seen in CI)
        return float(sampled)
    rss, ready_data, ready_rss = m.maxrss_mib, m.vmdata_ready_mib, m.rss_ready_mib
    if rss is None:
        return None
    if ready_data is None or ready_rss is None:
        return float(rss)
    growth = float(rss) - float(ready_rss)
    file_ready, file_end = m.rss_file_ready_mib, m.rss_file_end_mib
    if file_ready is not None and file_end is not None:
        # pages of the memory-mapped data set and of lazily loaded libraries that training touched are
        # in RSS but not in RLIMIT_DATA; they stay resident, so the end-of-trial figure counts them
        growth -= max(0.0, float(file_end) - float(file_ready))
    peak = float(ready_data) + max(0.0, growth)
    data_end, anon_ready = m.vmdata_end_mib, m.rss_anon_ready_mib
    anon_end = m.rss_anon_end_mib
    if data_end is not None and anon_ready is not None and anon_end is not None:
        # private memory mapped during training but never touched (new threads' stacks, allocator arenas)
        # counts against RLIMIT_DATA and not in RSS; what is still mapped at the end is a lower bound of it
        peak += max(0.0, (float(data_end) - float(ready_data)) - (float(anon_end) - float(anon_ready)))
    return peak


def probe_growth_mib(outcome: TrialOutcome, budget_kind: str) -> float | None:
    """What grows with the batch, where the framework reports it apart from what its pool holds: on a GPU the
    allocator's allocated peak (PyTorch's max_memory_allocated, JAX's peak_bytes_in_use) when a reserved figure is
    reported beside it; it keeps growing where the reserved one fills the budget and stays there (issue 31). None
    elsewhere: on CPU the peak is what the limit counts; TensorFlow's GPU peak is its allocated figure already, and
    MXNet's is the device's used memory (a pool figure, censored near the budget by the search)."""
    m = outcome.metrics
    if not budget_kind.startswith("gpu") or m is None or m.framework_peak_mib is None:
        return None
    if m.framework_reserved_mib is None:
        return None
    return float(m.framework_peak_mib)


def search_settings(req: MaxBatchRequest, budget: Budget, runtime: FrameworkRuntime | None = None) -> SearchSettings:
    """How ``req`` is searched under ``budget``: its strategy, its resolution (the device's default unless asked),
    and on a GPU a reserved figure within GPU_CENSOR_PCT of the budget taken as censored. ``runtime``: the framework
    as the command resolved it (whether its adapter offers an estimate); without one, a test's, read by name."""
    runtime = runtime or unchecked_runtime(req.framework, req.python)
    # on CPU a probe's peak is what RLIMIT_DATA counts, so fresh processes' peaks out of order are the boundary
    # moving between processes: the search stops at that spread (issue 43); a GPU figure's noise moves no boundary
    return SearchSettings(strategy=req.strategy, budget_mib=budget.mib,
                          max_batch_cap=req.search_cap(budget.device)[0],
                          resolution=req.resolution(budget.device),
                          censor_pct=GPU_CENSOR_PCT if budget.device == "gpu" else 0.0,
                          spread_from_peaks=budget.device == "cpu",
                          expect_estimate=req.strategy == "model" and estimate_capable(runtime.adapter_class),
                          # the answer's own confirm-length probe confirms it only where a fresh process's boundary
                          # repeats: never on CPU, where it moves between fresh processes by more than the resolution
                          # even under a fixed mmap threshold (measured 2026-11-28, docs/maxbatch.md: PyTorch tiny_cnn's
                          # 277 and JAX deep_cnn's 68 and 69 each fitted one process and ran out of memory in the
                          # next); under glibc's adaptive threshold it moves by tens of MiB
                          probe_is_confirm=budget.device != "cpu")


def control_limit_mib(budget_mib: float) -> float:
    """The limit of a control run: generous enough that a failure there is not the budget's.

    Twice the budget, and at least CONTROL_FLOOR_MIB more: under a small budget the framework's own
    start-up (PyTorch: ~200-300 MiB of VmData) can crash the worker (seen: SIGSEGV while importing torch
    under 120 MiB) and would crash again at twice that budget.
    """
    return max(budget_mib * CONTROL_FACTOR, budget_mib + CONTROL_FLOOR_MIB)


class WorkerProber:
    """The probe function of :func:`harness.maxbatch.search.search`: each call is a fresh worker, in the interpreter
    of ``runtime`` (the framework as the command resolved it: the managed environment or the user's ``--python``;
    without one, a test's or a benchmark's, the request's ``python`` unchecked or this interpreter)."""

    def __init__(self, req: MaxBatchRequest, budget: Budget, data: PreparedData, executor: LocalExecutor,
                 on_outcome: Callable[[TrialOutcome], None] | None = None,
                 on_event: Callable[[TrialSpec, Any], None] | None = None,
                 runtime: FrameworkRuntime | None = None) -> None:
        self.req, self.budget, self.data, self.executor = req, budget, data, executor
        self.runtime = runtime or unchecked_runtime(req.framework, req.python)
        self.on_outcome, self.on_event = on_outcome, on_event
        self.outcomes: list[TrialOutcome] = []
        self.order_path = str(data.write_order(req.seed, 0))
        # Nothing of the probes' own (issue 22): they run under the allocator the user trains with (on CPU glibc's
        # defaults, whose heap variation the recommendation's margin covers: advice.Margin); only what the adapter's
        # settings need at import (PyTorch's CUDA allocator settings) and a "what helps" setting's variables
        # (``--env``), each part of the answer, stored and printed with it (advice.answer_env)
        self.env: dict[str, str] = self.runtime.worker_env(req.adapter_options, budget.device)
        self.env |= dict(req.env)
        #: issue 41: the next (short) probe asks the adapter for its step-memory estimate; only the search's first
        self.estimate_pending = req.strategy == "model" and estimate_capable(self.runtime.adapter_class)
        self._carry_estimate = False

    def trial(self, batch: int, confirm: bool) -> TrialSpec:
        """The probe's trial: a warm-up step, a few timed steps (more to confirm), then eval at ``batch``."""
        r = self.req
        return TrialSpec(
            experiment=r.experiment, framework=r.framework, model=r.model, dataset=r.dataset,
            batch_size=batch, repeat=0, seed=r.seed, epochs=0, warmup_steps=1,
            timed_steps=r.confirm_steps if confirm else r.probe_steps,
            optimizer=OptimizerSpec(name=r.optimizer, lr=r.learning_rate, momentum=r.momentum),
            # k micro-batches per update are k times a plain probe's training: the timeout scales with them, so the
            # plain and the accumulated searches of a "what helps" run get the same time per micro-batch
            device=self.budget.device, threads=r.threads,  # type: ignore[arg-type]
            timeout_s=min(r.timeout_s * r.accumulate_steps, MAX_TIMEOUT_S),
            precision=r.precision, math_mode=r.math_mode, adapter_options=dict(r.adapter_options),
            memory_limit_mib=self.budget.trial_limit_mib, eval=True, eval_batch_size=batch,
            train_samples=r.train_samples, data_key=self.data.key, purpose="probe",
            accumulate_steps=r.accumulate_steps,  # k micro-batches of ``batch`` per update: the micro-batch
            estimate_batches=estimate_batches(batch) if self._carry_estimate else (),
            # no batch gathered ahead: the answer is the model's and one update's batch, whatever the input pipeline
            # (with prefetch the next update's batch, k micro-batches of it, would be held too)
            prefetch=False,
            # every probe compiles in its own process, as a user's first training run does: a program read back
            # from the persistent compilation cache (JAX) skips the compiler's memory, which on a CPU is part of the
            # peak (deep_cnn at 66: 901 MiB compiling, 662 MiB read back over 11 fresh workers; docs/maxbatch.md),
            # so with the cache a size compiled before, by this search or an earlier one, would fit where it fails
            compile_cache=False,
            # an emulated card: the context earlier probes measured, for the adapters that cap before theirs exists
            context_hint_mib=(cuda_context_mib(self.outcomes) or 0.0) if self.budget.kind == "gpu-emulated" else 0.0)

    def _run(self, batch: int, confirm: bool, os_limit_mib: float | None,
             control: bool = False) -> TrialOutcome:
        unit = self._unit(self.trial(batch, confirm), os_limit_mib)
        on_event = self.on_event
        relay = None if on_event is None else (lambda msg: on_event(unit.trial, msg))
        # without a listener, the plain call: executors written before live progress take no on_event
        outcome = self.executor.run(unit) if relay is None else self.executor.run(unit, on_event=relay)
        before = next((min(f) for o in self.outcomes if (f := gpufaults.foreign_mib(o.monitor.samples))), None)
        if before is not None:  # another process took the GPU's memory since the first probe (issue 32)
            status, reason = gpufaults.judge(outcome.status, outcome.reason, outcome.monitor.samples, before)
            outcome = replace(outcome, status=status, reason=reason)
        self.outcomes.append(outcome)
        if self.on_outcome is not None and not control:  # a control run shares the probe's trial hash
            self.on_outcome(outcome)
        return outcome

    def _unit(self, trial: TrialSpec, os_limit_mib: float | None) -> TrialUnit:
        """A fresh worker for ``trial`` under the OS memory limit ``os_limit_mib`` and the search's allocator
        settings (a probe, a verify run, a settling run)."""
        return self.runtime.unit(trial, self.data, self.order_path, os_limit_mib, self.env)

    def verify(self, batch: int, steps: int) -> TrialOutcome:
        """Train ``batch`` for ``steps`` timed steps (after one warm-up), then eval, in a fresh worker.

        The same budget and the same allocator settings as the probes (what the output tells the user to train
        with), stored as a trial with purpose ``verify``; no control run and no retry: a user's run gets neither.
        """
        trial = replace(self.trial(batch, True), timed_steps=steps, purpose="verify")
        outcome = self.executor.run(self._unit(trial, self.budget.os_limit_mib))
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome

    def settle(self, batch: int, steps: int, run: int) -> TrialOutcome:
        """One heap-settling run (issue 22): ``batch`` for ``steps`` timed steps, then eval, in a fresh worker under
        the budget, stored as a trial with purpose ``settle`` (``repeat`` = ``run``, so each run keeps its own row);
        no retry: a user's run gets none."""
        base = self.trial(batch, True)
        # as many times the confirm run's time as it trains steps (warm-up included): a slow model's long settling
        # run is not cut short by the per-probe timeout, which is sized for a probe
        scale = max(1.0, (steps + 1) / (base.timed_steps + 1))
        trial = replace(base, timed_steps=steps, repeat=run, purpose="settle",
                        timeout_s=min(base.timeout_s * scale, MAX_TIMEOUT_S))
        outcome = self.executor.run(self._unit(trial, self.budget.os_limit_mib))
        self.outcomes.append(outcome)
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome

    @staticmethod
    def _classify(outcome: TrialOutcome) -> str:
        status = outcome.status if outcome.status in ("ok", "oom", "crashed", "timeout") else "error"
        if status == "error" and any(p in outcome.reason for p in SETUP_MEMORY_ERRORS):
            status = "oom"  # the framework's libraries could not even be mapped under the budget
        return status

    def __call__(self, batch: int, confirm: bool) -> ProbeResult:
        # the search's first short probe carries the estimate (issue 41); no rerun of it does, so an estimate that
        # took its worker down costs that rerun, never the probe's verdict
        self._carry_estimate = carried = self.estimate_pending and not confirm
        self.estimate_pending = self.estimate_pending and not carried
        try:
            outcome = self._run(batch, confirm, self.budget.os_limit_mib)
        finally:
            self._carry_estimate = False
        estimate, estimate_note = parse_estimate(outcome) if carried else ((), "")
        elapsed_before = 0.0
        if carried and outcome.status != "ok" and "phase finish" in outcome.reason:
            # the probe's own steps and evaluation ran; what failed was the estimate after them: the probe again,
            # without it (the estimate's failure costs a worker, never the probe's verdict)
            elapsed_before = outcome.elapsed_s
            estimate_note = f"the estimate ended its worker: {outcome.status} ({outcome.reason[:300]})"
            outcome = self._run(batch, confirm, self.budget.os_limit_mib)
        status, elapsed = self._classify(outcome), outcome.elapsed_s + elapsed_before
        if status in ("error", "crashed") and self.budget.os_limit_mib:
            # First the same probe at the same budget: a one-off failure (a worker killed from outside, a
            # signal) passes there, and only a failure that repeats is worth asking the control run about.
            # Without this, a single killed worker at batch 1 passed the control run and the search concluded
            # "does not fit even at batch 1" (issue 13, item 4).
            first = outcome
            outcome = self._run(batch, confirm, self.budget.os_limit_mib)
            status, elapsed = self._classify(outcome), elapsed + outcome.elapsed_s
            if status in ("ok", "oom"):  # say what happened to the first worker, not only to the second
                then = f"{status} ({outcome.reason})" if outcome.reason else status
                outcome = replace(outcome, reason=f"{first.status} once ({first.reason}), then at the same "
                                                  f"budget: {then}")
        reason = outcome.reason
        if status in ("error", "crashed") and self.budget.os_limit_mib:
            # Not every allocation failure says so (oneDNN: "could not create a primitive" when its scratch
            # memory is refused). Ask the machine instead of guessing from the text: the same probe with
            # control_limit_mib(budget). Passing there makes the failure the budget's; failing
            # there too makes it a real crash, which the search reports and never takes as the boundary.
            limit = control_limit_mib(self.budget.os_limit_mib)
            control = self._run(batch, confirm, limit, control=True)
            elapsed += control.elapsed_s
            if control.status == "ok":
                status = "oom"
                reason = (f"{reason}; the same probe passes with a {limit:g} MiB limit, so the memory "
                          "limit caused it")
        peak = probe_peak_mib(outcome, self.budget.kind) if status == "ok" else None
        growth = probe_growth_mib(outcome, self.budget.kind) if status == "ok" else None
        return ProbeResult(batch=batch, status=status, peak_mib=peak, reason=reason, elapsed_s=elapsed,
                           growth_mib=growth, estimate_mib=estimate, estimate_note=estimate_note)


def does_not_fit_message(req: MaxBatchRequest, budget: Budget, first: ProbeResult | None) -> str:
    """Why batch 1 failed, in words: below the framework's fixed overhead, or the model is too big."""
    how = f" ({first.reason})" if first is not None and first.reason else ""
    if first is not None and "phase setup" in first.reason:
        return (f"{req.framework} ran out of memory while starting, before any training step{how}: a "
                f"budget of {budget.mib:g} MiB ({budget.kind}) is below the framework's fixed overhead "
                "(runtime, libraries, model and optimizer state). Give a larger --memory-limit-mib")
    return (f"{req.model} does not fit a budget of {budget.mib:g} MiB ({budget.kind}) even at batch size "
            f"1{how}. Give a larger --memory-limit-mib, use a smaller model or input, or --precision amp "
            "on a GPU")


def settle_heap(prober: WorkerProber, start: int, steps: int) -> list[SettleRun]:
    """Walk the recommendation down until it trains HEAP_SETTLE_RUNS times in a row under glibc's default malloc.

    Under the default the memory a CPU batch needs is not monotone in the batch size and varies between fresh
    processes and over steps (docs/maxbatch.md, issue 22), so a size a short probe passed can fail in a plain
    process. Each candidate trains ``steps`` (``--settle-steps``, default DEFAULT_SETTLE_STEPS: the heap grows over
    steps, so as long as the training the answer must hold for) timed steps + eval in HEAP_SETTLE_RUNS fresh workers
    under the budget; running out of memory lowers it by CPU_HEAP_ALLOWANCE of itself (at least 1) and starts again,
    at most HEAP_SETTLE_ROUNDS times; any other failure (a timeout, a crash) says nothing about memory and stops the
    settling, unsettled. Returns one :class:`~harness.records.SettleRun` per run, the last candidate's runs last, then
    (0, -1, NONE_SETTLED or NOT_SETTLED) when nothing settled; the settled size is the last batch, else 0.
    """
    runs: list[SettleRun] = []
    batch = start
    for _ in range(HEAP_SETTLE_ROUNDS):
        statuses = []
        for run in range(HEAP_SETTLE_RUNS):
            outcome = prober.settle(batch, steps, run)
            status = prober._classify(outcome)
            runs.append(SettleRun(batch, run, status))
            statuses.append(status)
            if status != "ok":
                break
        if all(st == "ok" for st in statuses) and len(statuses) == HEAP_SETTLE_RUNS:
            return runs
        if statuses[-1] != "oom":  # a timeout, a crash, an error: says nothing about memory, so no smaller size
            return runs + [SettleRun(0, -1, NOT_SETTLED)]
        lower = batch - max(1, math.ceil(CPU_HEAP_ALLOWANCE * batch))
        if lower < 1:
            break
        batch = lower
    return runs + [SettleRun(0, -1, NONE_SETTLED)]
