"""One trial's phases in the worker, in the order they are announced to the parent: setup, the training
(warm-up, timed, the rest of the epochs), evaluation, and the result; or a failure, from whichever phase.

This is the only module under ``harness`` that ends up importing a framework, and it does so through the
adapter the request names (:func:`load_adapter`).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import time
import traceback
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adapters import fpenv
from adapters.base import Adapter, MemoryStats, PrecisionSeen, RuntimeConfig
from harness.config.precision import TF32_OVERRIDE_VAR, check_math_mode, check_observed
from harness.config.schedule import constant_updates, eval_steps, schedule_updates
from harness.config.trial import TrialSpec
from harness.data.prepared import default_cache_dir
from harness.errors import ConfigError
from harness.flops import train_flop_per_sample
from harness.models import ModelDescription, build_description, init_weights, is_native_model
from harness.models.native import PREFIX as NATIVE_PREFIX
from harness.records import WorkerMetrics
from harness.run.planner import plan_steps
from harness.run.protocol import (
    Channel,
    Failure,
    Hello,
    Phase,
    ProgressTicker,
    Ready,
    Result,
    SetupFacts,
    WorkerRequest,
)
from harness.run.worker.estimate import step_estimate
from harness.run.worker.evaluation import EvalPoints, non_finite_weights
from harness.run.worker.memory import VmDataWatcher, maxrss_mib, proc_status_mib
from harness.run.worker.schedule import Switches, schedule_metrics
from harness.run.worker.steady import run_steady
from harness.run.worker.steps import AtPoint, StepPlan, StepRunner, Trained, train, train_metrics


def compile_cache_dir() -> Path:
    """The sweep's persistent compilation cache: under the cache directory ($BATCHSCOPE_CACHE), which the worker
    inherits from the parent; frameworks key their entries by their version, the device and the program."""
    return default_cache_dir() / "compile"


def compile_fields(adapter: Adapter) -> dict[str, Any]:
    """The trial's ``compile_s``, ``compile_cache`` and ``compile_cold_s`` from the adapter (all None for a plugin
    that compiles nothing up front, or has no :meth:`~adapters.base.Adapter.compile_stats`)."""
    hook = getattr(adapter, "compile_stats", None)
    stats = hook() if hook is not None else None
    if stats is None:
        return {}
    return dict(compile_s=stats.compile_s, compile_cache=stats.cache, compile_cold_s=stats.cold_s)


def load_adapter(target: str) -> Adapter:
    """An instance of the adapter class ``module:Class`` (importing it imports nothing heavy: its framework
    is imported by its methods)."""
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)()  # type: ignore[no-any-return]


def _cpu_denormals(trial: TrialSpec, facts: SetupFacts) -> str:
    """What the CPU does with denormals in this trial; refuses a ``flush`` that did not happen."""
    state = str(facts.cpu_denormals or fpenv.cpu_denormals_state())
    if trial.denormals == "flush" and state != "flush":
        raise ConfigError(f"denormals = 'flush' was asked for, but the {trial.framework} adapter left the CPU at "
                          f"{state!r}; use denormals = 'framework-default' for this framework")
    return state


def math_mode_env(math_mode: str, environ: MutableMapping[str, str]) -> None:
    """Set NVIDIA's backstop for the math mode in ``environ`` (the worker's own, before any framework is imported, so
    that cuBLAS and cuDNN read it when they load): ``ieee`` sets NVIDIA_TF32_OVERRIDE=0 (TF32 off in both, whatever
    a framework's switches say), ``tf32`` removes an inherited one (it would turn TF32 off), ``framework-default``
    leaves the user's environment as it is (and the adapter's read-back counts it)."""
    if math_mode == "ieee":
        environ[TF32_OVERRIDE_VAR] = "0"
    elif math_mode == "tf32":
        environ.pop(TF32_OVERRIDE_VAR, None)


def _precision_seen(trial: TrialSpec, adapter: Adapter) -> PrecisionSeen | None:
    """What the training forward pass computed in, as the adapter observed it; refuses a precision that did
    not run (harness.config.precision.check_observed), so no such trial is stored as if it had."""
    seen = adapter.precision_seen()
    check_observed(trial.precision, trial.framework, seen.compute_dtype if seen else None,
                   seen.loss_scale if seen else None)
    return seen


class Phases:
    """Announces the trial's phases to the parent and remembers the current one (a failure names it)."""

    def __init__(self, chan: Channel) -> None:
        self.chan = chan
        self.current = "setup"

    def enter(self, phase: str) -> None:
        """Phase ``phase`` begins now."""
        self.current = phase
        self.chan.send(Phase(phase=phase))


@dataclass(frozen=True)
class SetUp:
    """What the setup phase made: the device facts, the model, the data and its order."""

    facts: SetupFacts
    cpu_denormals: str
    math_mode_seen: str  # what the framework computes float32 convolutions and matmuls in (MATH_MODES_SEEN)
    desc: ModelDescription | None  # None for a framework's native model
    model_info: dict[str, Any]
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # x_train, y_train, x_test, y_test
    order: np.ndarray
    setup_s: float


def set_up(request: WorkerRequest, adapter: Adapter) -> SetUp:
    """The setup phase: the framework on its device, the data, the model with its initial weights."""
    trial, data = request.trial, request.data
    t_setup = time.perf_counter()
    facts = SetupFacts.of(adapter.setup(RuntimeConfig(
        device=trial.run_device, threads=trial.threads or None, options=dict(trial.adapter_options),
        memory_limit_mib=trial.memory_limit_mib or None, precision=trial.precision, denormals=trial.denormals,
        math_mode=trial.math_mode, compile_cache_dir=str(compile_cache_dir()) if trial.compile_cache else None,
        context_hint_mib=trial.context_hint_mib or None)))
    cpu_denormals = _cpu_denormals(trial, facts)
    math_mode_seen = check_math_mode(trial.math_mode, trial.framework, facts.math_mode_seen, facts.on_gpu)
    arrays = data.load()
    desc: ModelDescription | None = None
    if is_native_model(trial.model):  # the framework's own model: no description, no shared weights
        adapter.build_native(trial.model[len(NATIVE_PREFIX):], data.input_shape, data.classes, trial.optimizer)
        model_info: dict[str, Any] = {"name": trial.model, "native": True, "input_shape": list(data.input_shape),
                                      "classes": data.classes, "param_count": adapter.param_count()}
    else:
        # the parent resolved the model (a user's function is imported there only) and sends it as data
        spec = request.model
        desc = ModelDescription.from_spec(dict(spec)) if spec else build_description(trial.model, data.input_shape,
                                                                                     data.classes)
        adapter.build(desc, init_weights(desc, trial.seed), trial.optimizer)
        model_info = desc.to_dict()
    order = np.load(request.order_path, mmap_mode="r")
    return SetUp(facts=facts, cpu_denormals=cpu_denormals, math_mode_seen=math_mode_seen, desc=desc,
                 model_info=model_info, arrays=arrays, order=order, setup_s=time.perf_counter() - t_setup)


def _metrics(trial: TrialSpec, setup: SetUp, plan: StepPlan, trained: Trained, runner: StepRunner, n_train: int,
             seen: PrecisionSeen | None, mem: MemoryStats, memory: dict[str, Any]) -> WorkerMetrics:
    """The trial's :class:`WorkerMetrics` from what each phase measured (``mem``: the framework's, over training)."""
    flop = None if setup.desc is None else train_flop_per_sample(setup.desc)
    steps = trained.phase_steps(plan)
    return WorkerMetrics(
        **train_metrics(trial.effective_batch_size, trained.step_ms, plan.warmup_n, trained.post_warmup_s,
                        trained.post_warmup_samples, flop),
        warmup_steps_n=steps["warmup"], timed_steps_n=steps["timed"], train_steps_n=len(trained.step_ms),
        optimizer_updates_n=len(trained.step_ms), micro_batches_n=runner.micro_batches_n,
        epochs_done=trained.samples_seen / n_train if trial.epochs else 0.0,
        data_s=trained.data_s, prefetch=runner.prefetcher is not None, prefetch_device=runner.device_ahead,
        step_clock_window=runner.window,
        setup_s=setup.setup_s, train_s=trained.train_s, cpu_denormals=setup.cpu_denormals,
        math_mode_seen=setup.math_mode_seen,
        compute_dtype=seen.compute_dtype if seen else None, loss_scale=seen.loss_scale if seen else None,
        framework_peak_mib=mem.peak_mib, framework_peak_source=mem.source,
        framework_reserved_mib=mem.reserved_mib, cuda_context_mib=getattr(mem, "context_mib", None),
        maxrss_mib=maxrss_mib(), **memory,
    )


def _eval_points(request: WorkerRequest, adapter: Adapter, setup: SetUp, phases: Phases) -> tuple[EvalPoints, AtPoint]:
    """The trial's evaluation points, and what the training loop calls at each: announce the eval phase,
    evaluate, measure, check; the training goes on while it has not diverged."""
    x_train, y_train, x_test, y_test = setup.arrays
    points = EvalPoints(request.trial, adapter, x_test, y_test, x_train, y_train, setup.order, request.data.n_train,
                        check_divergence=request.trial.purpose != "probe")

    def at_point(step: int, samples_seen: int, train_s: float) -> bool:
        phases.enter("eval")
        point = points.at(step, samples_seen, train_s)
        return points.diverged is None and not reached(request.trial, point.accuracy)

    return points, at_point


def reached(trial: TrialSpec, accuracy: float | None) -> bool:
    """Whether a train-to-target trial's evaluation is at or above its target (never in any other trial)."""
    return bool(trial.stop_at_accuracy) and accuracy is not None and accuracy * 100.0 >= trial.stop_at_accuracy


def trial_eval_steps(trial: TrialSpec, n_train: int, total_steps: int) -> list[int]:
    """The steps after which the trial evaluates (before its final evaluation), by the one rule for constant sizes
    and schedules alike (:func:`harness.config.schedule.eval_steps`: the first step at which the samples seen reach
    each point's count): every ``eval_every_samples`` samples in train-to-target mode, else the ``eval_points``
    spread evenly over the samples. ``total_steps``: the training's updates (a constant size without epochs has no
    other count of them)."""
    if trial.eval_by != "samples" or trial.eval_every_steps:  # a spec stored before the rule: it cannot run as it ran
        raise ConfigError(f"this trial places its evaluation points by steps (eval_by {trial.eval_by!r}, "
                          f"eval_every_steps {trial.eval_every_steps}), as batchscope did before evaluating a "
                          "constant size at sample counts; this worker places them by samples only: plan it anew")
    if not trial.eval:
        return []
    updates = (schedule_updates(trial.schedule, n_train, trial.epochs) if trial.batch_schedule
               else constant_updates(trial.effective_batch_size, n_train, trial.epochs, total_steps))
    if trial.eval_every_samples:
        return eval_steps(updates, every_samples=trial.eval_every_samples)
    return eval_steps(updates, points_n=trial.eval_points)


def target_outcome(trial: TrialSpec, points: EvalPoints) -> str | None:
    """``reached`` or ``not reached within N epochs`` for a train-to-target trial (None for any other)."""
    if not trial.stop_at_accuracy:
        return None
    if any(reached(trial, p.accuracy) for p in points.curve):
        return "reached"
    return f"not reached within {trial.epochs} epochs"


def _final_evaluation(trial: TrialSpec, points: EvalPoints, trained: Trained, phases: Phases) -> dict[str, Any]:
    """The evaluation at the end of the training (unless a point already found it diverged), and the trial row's
    evaluation figures: the curve's last point's. A trial that does not evaluate has its weights checked."""
    steps = len(trained.step_ms)
    if trial.eval and not trained.stopped:
        phases.enter("eval")
        points.at(steps, trained.samples_seen, trained.train_s, final=True)
    elif not trial.eval and points.check_divergence:
        bad = non_finite_weights(points.adapter)
        points.diverged = f"weights not finite at the end (step {steps}): {bad}" if bad else None
    if not points.curve:
        return {}
    last = points.curve[-1]
    return dict(accuracy=last.accuracy, eval_loss=last.eval_loss, eval_samples=last.eval_samples, eval_s=last.eval_s,
                eval_total_s=points.eval_total_s)


def _train_and_evaluate(request: WorkerRequest, adapter: Adapter, setup: SetUp, chan: Channel,
                        phases: Phases) -> Result:
    """Warm-up, timed and remaining steps with the evaluation points among them, then the final evaluation: the
    trial's result (a diverged training stops at the point that found it, and says so in the result)."""
    trial, data = request.trial, request.data
    # the footprint before the first step, in RLIMIT_DATA's units (VmData) and in RSS: the max-batch
    # search turns the RSS peak into the units the OS limit counts (harness/maxbatch/probes.py, probe_peak_mib)
    ready_mem = proc_status_mib("VmData", "VmRSS", "RssFile", "RssAnon")
    chan.send(Ready(device=setup.facts, param_count=adapter.param_count(), model=setup.model_info))
    watcher = VmDataWatcher().start() if request.os_memory_limit_mib else None
    # a step is one optimizer update: effective_batch_size samples (batch_size x accumulate_steps)
    runner = StepRunner(adapter, trial, setup.arrays[0], setup.arrays[1], data.n_train)
    plan = StepPlan(*plan_steps(data.n_train, trial.effective_batch_size, trial.epochs, trial.warmup_steps,
                                trial.timed_steps, total=len(runner.sizes) or None))  # a schedule's own steps
    ticker = ProgressTicker(chan, request.progress_interval_s, plan.total_n,
                            -(-data.n_train // trial.effective_batch_size), trial.epochs)
    adapter.reset_memory_stats()
    runner.warm_shapes()  # e.g. JAX compiles its step for each batch size here, not inside the training clock
    compiled = compile_fields(adapter)  # before the first step whose time counts
    points, at_point = _eval_points(request, adapter, setup, phases)
    switches = Switches(trial, adapter, runner, data.n_train)  # a batch-size schedule's changes (issue 52)
    points.batch_at = runner.batch_at
    try:
        trained = train(runner, setup.order, plan, phases.enter, ticker, lambda: _precision_seen(trial, adapter),
                        eval_at=trial_eval_steps(trial, data.n_train, plan.total_n), at_point=at_point,
                        switch_at=switches.at())
    finally:
        runner.close()  # the training's last batch has been taken: nothing is prepared ahead past it
    if trial.batch_schedule:  # the later sizes' compilations (off the training clock) count too
        compiled = compile_fields(adapter)
    seen = _precision_seen(trial, adapter)  # again at the end: what is stored is the last step's
    # before evaluating: the training's peak, not evaluation's at its own batch size
    mem = points.training_peak(adapter.memory_stats())
    evaluated = _final_evaluation(trial, points, trained, phases)
    end_mem = proc_status_mib("VmData", "RssFile", "RssAnon")
    memory = dict(vmdata_ready_mib=ready_mem["VmData"], rss_ready_mib=ready_mem["VmRSS"],
                  rss_file_ready_mib=ready_mem["RssFile"], rss_anon_ready_mib=ready_mem["RssAnon"],
                  rss_file_end_mib=end_mem["RssFile"], rss_anon_end_mib=end_mem["RssAnon"],
                  vmdata_end_mib=end_mem["VmData"], vmdata_peak_mib=watcher.stop() if watcher else None)
    estimate: dict[str, Any] = {}
    if trial.estimate_batches:  # a max-batch probe (issue 41): after every figure of its own was taken
        phases.enter("finish")  # outside every window the trial's figures are taken over
        estimate["step_estimate"] = step_estimate(adapter, trial.estimate_batches)
    metrics = _metrics(trial, setup, plan, trained, runner, data.n_train, seen, mem,
                       {**memory, **evaluated, **compiled, **estimate, "target_outcome": target_outcome(trial, points)})
    metrics = dataclasses.replace(metrics, **schedule_metrics(trial, switches, trained.step_ms, plan.warmup_n,
                                                              trained.post_warmup_samples,
                                                              metrics.train_flop_per_sample))
    phase_steps = trained.phase_steps(plan)
    if points.diverged is None:  # a steady state of a diverged training measures nothing (stopped: at the target)
        try:
            steady_n = run_steady(runner, setup.order, trial.steady_s, setup.facts, len(trained.step_ms), phases.enter)
        finally:
            runner.close()
        phase_steps.update({"steady": steady_n} if steady_n else {})
    return Result(metrics=metrics, step_times_ms=tuple(trained.step_ms), phase_steps=phase_steps,
                  curve=tuple(points.curve), diverged=points.diverged, gradient_noise=tuple(points.noise))


def _failure(exc: Exception, adapter: Adapter | None, phase: str) -> Failure:
    """The failure message for ``exc``, classified as out-of-memory by the adapter where there is one."""
    try:
        oom = bool(adapter.is_oom(exc)) if adapter is not None else isinstance(exc, MemoryError)
    except Exception:  # noqa: BLE001 - classification must never hide the original error
        oom = False
    return Failure(oom=oom, error_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
                   message=str(exc)[:4000], traceback=traceback.format_exc()[-8000:], phase=phase)


def worker_versions(adapter: Adapter) -> dict[str, str]:
    """What this worker imported: the adapter's versions (the framework; CUDA and cuDNN where present), and numpy's
    and Python's, which the framework's environment decides (MXNet's has numpy 1.26, the others numpy 2)."""
    import platform

    return {**adapter.versions(), "numpy": str(np.__version__), "python": platform.python_version()}


def run_trial(request: WorkerRequest, chan: Channel) -> int:
    """Run the trial in ``request``, reporting on ``chan``. Returns the process exit code.

    Every failure, in any phase, is turned into one ``failure`` message naming the phase; the adapter is
    closed on every way out.
    """
    trial = request.trial
    phases = Phases(chan)
    phases.enter("setup")
    adapter: Adapter | None = None
    try:
        if trial.denormals == "flush":
            # before the adapter imports its framework, so that every thread the framework starts inherits
            # FTZ/DAZ (adapters/fpenv.py); the adapter then applies its framework's own switch where one exists
            fpenv.set_cpu_flush(True)
        math_mode_env(trial.math_mode, os.environ)  # before the framework loads cuBLAS and cuDNN
        adapter = load_adapter(request.adapter_target)
        chan.send(Hello(pid=os.getpid(), adapter=trial.framework, versions=worker_versions(adapter),
                        python=sys.version.split()[0], executable=sys.executable))
        setup = set_up(request, adapter)
        chan.send(_train_and_evaluate(request, adapter, setup, chan, phases))
        return 0
    except Exception as exc:  # noqa: BLE001 - every failure is reported to the parent, then we exit
        chan.send(_failure(exc, adapter, phases.current))
        return 1
    finally:
        if adapter is not None:
            try:
                adapter.close()
            except Exception:  # noqa: BLE001 - closing after a failure is best effort
                pass

