"""Run a sweep: prepare data once, run each planned trial in its own worker, store each result at once."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.cells import summary_rows
from harness.config.experiment import Experiment, adapter_names, check_adapters
from harness.config.precision import legacy_math_mode
from harness.config.trial import TrialSpec, evaluated_by_steps
from harness.data import PreparedData, default_cache_dir, prepare
from harness.data.footprint import require_disk
from harness.diskfull import write_atomically
from harness.envs.runtime import FrameworkRuntime, command_runtimes, unchecked_runtime
from harness.errors import BatchscopeWarning, ConfigError, StoreError
from harness.gpu_peaks import refuse_tf32_without_units
from harness.models import build_description, is_native_model
from harness.monitor import environment
from harness.records import Executor, MaxBatchResult, Monitor, TrialOutcome, TrialUnit, allocator_env
from harness.registry import Registered, lookup_each
from harness.run.chains import oom_limits
from harness.run.devices import check_one_device, resolve_experiment
from harness.run.executor import LocalExecutor
from harness.run.listener import SweepListener
from harness.run.planner import data_request, plan
from harness.run.ramp import RAMP_VARIANT, ramp_trials
from harness.run.scheduler import Backend, SerialBackend, known_durations, run_chains
from harness.store import Store, TrialRecord, store_path
from harness.store.db import make_out_dir
from harness.store.lock import locked_out_dir


@dataclass
class SweepResult:
    """What a sweep did."""

    out_dir: Path
    outcomes: list[TrialOutcome] = field(default_factory=list)
    already_done: int = 0
    total: int = 0
    maxbatch: list[MaxBatchResult] = field(default_factory=list)  # the stored answers (max_batch = true)
    maxbatch_notes: list[str] = field(default_factory=list)  # searches that did not give an answer, and why
    #: of those, the searches that could not search (their probes failed, their task was lost): the run failed
    maxbatch_errors: list[str] = field(default_factory=list)
    not_run: int = 0  # trials left unrun because no executor slot was left (every Ray node gone): --resume
    peak_in_flight: int = 0  # the most trials that ran at once


@dataclass(frozen=True)
class SweepContext:
    """What a step after the trials needs: the open store, this run's id, the prepared data, the environment, and
    each framework as the sweep resolved it (its runtime: adapter, interpreter, build, device)."""

    store: Store
    run_id: int
    data: PreparedData
    env: dict[str, Any]
    out_dir: Path
    monitor_factory: Callable[[TrialUnit], Monitor] | None
    executor: Executor | None = None  # the sweep's (a RayExecutor runs the max-batch searches side by side too)
    runtimes: Mapping[str, FrameworkRuntime] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepOptions:
    """How :func:`run_sweep` runs (what it measures is the experiment's).

    ``resume``: finish a sweep already in the store (without it such a store is refused). ``executor`` defaults to
    a :class:`LocalExecutor` logging into ``out_dir/logs``, with ``monitor_factory``'s sampler per trial.
    ``preflight(env, runtimes)`` runs before anything is written and may refuse the run; ``after_trials`` runs with
    the store still open (the max-batch searches of :func:`harness.pipeline.run_experiment`). ``registered``: the
    adapters the command looked up, once each, and checked the experiment against
    (:func:`harness.config.experiment.check_adapters`); the sweep resolves its runtimes with them. None (a caller
    without a command: a test, a benchmark): looked up, and the experiment checked, when the sweep starts.
    """

    resume: bool = False
    data_dir: str | None = None
    cache_dir: Path | None = None
    command: str = ""  # the command line, stored with the run
    monitor_factory: Callable[[TrialUnit], Monitor] | None = None
    executor: Executor | None = None
    preflight: Callable[[dict[str, Any], Mapping[str, FrameworkRuntime]], None] | None = None
    after_trials: Callable[[SweepContext, SweepResult], None] | None = None
    registered: Mapping[str, Registered] | None = None


@dataclass(frozen=True)
class _Prepared:
    """Everything known before anything is written: the environment, the data, the plan, the resolved spec, each
    framework's runtime."""

    env: dict[str, Any]
    data: PreparedData
    trials: list[TrialSpec]
    spec: dict[str, Any]
    runtimes: dict[str, FrameworkRuntime] = dataclasses.field(default_factory=dict)


def worker_env(trial: TrialSpec, env: dict[str, Any], runtime: FrameworkRuntime | None = None) -> dict[str, str]:
    """What a trial's worker gets in its environment on top of the parent's: only what the adapter's settings need
    before its framework is imported (PyTorch's CUDA allocator settings: ``adapters.base.Adapter.worker_env``).

    Nothing else, on purpose: a trial is timed under the allocator the user trains with (issue 22). A fixed glibc
    mmap threshold here once cost PyTorch's trials 0.57x of their throughput; such settings are a max-batch "what
    helps" setting now (``maxbatch --env``). The benchmarks build their harness trials' environment with this very
    function (benchmarks/common.py), so a setting added here shows in ``make bench`` too.
    ``env``: the captured environment (unused today; kept so a setting can depend on the device found).
    ``runtime``: the framework as the command resolved it (without one, a test's or a benchmark's: this interpreter).
    """
    del env
    return (runtime or unchecked_runtime(trial.framework)).worker_env(trial.adapter_options, trial.run_device)


def worker_allocator_env(unit_env: dict[str, str], parent_env: dict[str, str] | None = None) -> dict[str, str]:
    """The allocator settings a worker ran with: those it inherited from the parent's environment (the user's
    shell) and those the sweep set (``unit_env``), as stored in the run's environment (``cpu_worker_env``)."""
    return allocator_env(unit_env, dict(os.environ) if parent_env is None else parent_env)


def unit_for(exp: Experiment, trial: TrialSpec, data: PreparedData, os_memory_limit_mib: float | None = None,
             env: dict[str, str] | None = None, runtime: FrameworkRuntime | None = None) -> TrialUnit:
    """The unit that runs ``trial``: its framework's runtime (``runtime``, resolved before the first trial; without
    one, a test's: the experiment's named interpreter unchecked, or this one), out-of-memory patterns and extra
    environment."""
    order_path = data.write_order(trial.seed, trial.epochs)
    if runtime is None:
        settings = exp.adapters.get(trial.framework)
        runtime = unchecked_runtime(trial.framework, settings.python if settings else None)
    return runtime.unit(trial, data, str(order_path), os_memory_limit_mib, env)


def choose_runtimes(exp: Experiment, gpu_present: bool, say: Callable[[str], None],
                    registered: Mapping[str, Registered] | None = None) -> dict[str, FrameworkRuntime]:
    """Each framework resolved once (harness.envs.runtime): its adapter (``registered``: as the command looked it
    up), and its interpreter: the user's where the experiment or ``--python`` names one (checked there: ConfigError,
    exit 2, nothing written; ``--python`` for a framework not run is refused too), else its managed environment,
    built on first use (``say`` gets a line per build and one per framework)."""
    named = {fw: (s.python, s.python_from or f"{exp.source}: adapters.{fw}.python")
             for fw, s in exp.adapters.items() if s.python}
    return command_runtimes(exp.frameworks, named, gpu_present, say, registered)


def checked_experiment(exp: Experiment, registered: Mapping[str, Registered] | None
                       ) -> tuple[Experiment, Mapping[str, Registered]]:
    """``exp`` and its adapters: as the command looked them up and checked it (``registered``), or, for a caller
    without a command, each adapter it names looked up once here and ``exp`` checked against them (ConfigError or
    AdapterError, exit 2, before anything is built or written)."""
    if registered is not None:
        return exp, registered
    found = lookup_each(adapter_names(exp))
    return check_adapters(exp, {name: r.cls for name, r in found.items()}), found


class ConcurrentExecutor(Protocol):
    """An executor that runs several units at once (:class:`harness.run.ray_executor.RayExecutor`)."""

    def backend(self, units: Callable[[TrialSpec], TrialUnit], trials: Sequence[TrialSpec]) -> Backend:
        """The scheduler's backend for a sweep of ``trials`` whose units ``units`` makes."""


def _backend(executor: Executor, unit: Callable[[TrialSpec], TrialUnit], listener: SweepListener,
             trials: Sequence[TrialSpec]) -> Backend:
    """The scheduler's backend: the executor's own where it runs units concurrently, else one slot."""
    if hasattr(executor, "backend"):
        return executor.backend(unit, trials, on_event=listener.on_trial_message)  # type: ignore[no-any-return]

    def run(trial: TrialSpec, attempt: int) -> TrialOutcome:
        outcome = executor.run(unit(trial), on_event=functools.partial(listener.on_trial_message, trial))
        if attempt > 1:  # a re-run (the executor said its first run was lost)
            outcome.placement = dataclasses.replace(outcome.placement, attempt=attempt)
        return outcome

    return SerialBackend(run)


def run_sweep(exp: Experiment, out_dir: Path, options: SweepOptions | None = None,
              listener: SweepListener | None = None) -> SweepResult:
    """Run every trial of ``exp`` not yet in the store of ``out_dir``, telling ``listener`` as it goes.

    Without ``options.resume``, a store that already holds trials of this experiment is refused rather than
    mixed with a new run. A trial that fails never stops the sweep; Ctrl-C stops it after killing the
    worker in flight, with every finished trial already stored. The order of the steps is the reliability
    promise (docs/reliability.md): every check that can be made before anything is written
    (:func:`_prepare`), then one lock and one open store, one trial written at a time (:func:`_run_trials`).
    """
    out_dir, options, listener = Path(out_dir), options or SweepOptions(), listener or SweepListener()
    exp, registered = checked_experiment(exp, options.registered)
    options = dataclasses.replace(options, registered=registered)
    _refuse_a_finished_store(exp, out_dir, options.resume, readonly=True)
    ready = _prepare(exp, options, listener)
    make_out_dir(out_dir)
    with locked_out_dir(out_dir), Store.open(out_dir) as store:
        return _run_trials(exp, out_dir, store, ready, options, listener)


def _refuse_a_finished_store(exp: Experiment, out_dir: Path, resume: bool, readonly: bool = False,
                             store: Store | None = None) -> list[TrialRecord]:
    """The trials of ``exp`` already in ``out_dir``'s store; refused (StoreError) when there are some and no
    ``resume``. ``store``: the open one (under the lock), else the store is opened read-only if it exists."""
    if store is None:
        if not (store_path(out_dir).exists() or store_path(out_dir).is_dir()):
            return []
        with Store.open(out_dir, create=False, readonly=readonly) as opened:  # an unreadable store is refused here
            existing = opened.trials("experiment = ?", (exp.name,))
    else:
        existing = store.trials("experiment = ?", (exp.name,))
    if existing and not resume:
        raise StoreError(f"{out_dir} already holds {len(existing)} trial(s) of experiment {exp.name!r}; "
                         "add --resume to finish that sweep, or give another --out directory")
    return existing


def _prepare(exp: Experiment, options: SweepOptions, listener: SweepListener) -> _Prepared:
    """Every check that can be made before anything is written, in order; the data prepared and the trials planned."""
    env = environment.capture()
    # stored with the run: the allocator settings the CPU workers ran with, as they ran (the sweep sets none of its
    # own on CPU: these are what the user's shell gave every worker; {} means glibc's and the frameworks' defaults)
    env["cpu_worker_env"] = worker_allocator_env({})
    if exp.device == "gpu" and not env.get("gpus"):
        raise ConfigError(f"{exp.source}: device = \"gpu\" was asked for, but NVML sees no GPU here "
                          f"({env.get('gpu_note') or 'no GPU'}); use device = \"cpu\" or \"auto\", or run "
                          "where a GPU is visible")
    # each framework resolved once (its adapter loaded: AdapterError, exit 2), its interpreter before its device:
    # the build a device is resolved from is the one it runs
    runtimes = choose_runtimes(exp, bool(env.get("gpus")), listener.on_environment, options.registered)
    env["interpreters"] = {fw: {"python": i.python, "environment": i.environment, "problem": i.problem,
                                **{k: i.facts.get(k) for k in ("python_version", "framework_version", "numpy",
                                                               "build") if i.facts.get(k)}}
                           for fw, i in ((fw, rt.interpreter) for fw, rt in runtimes.items())}
    # one device per comparison (issue 29): each framework's device, decided here and printed before any trial
    resolved = resolve_experiment(list(runtimes.values()), [v.device for _, v in exp.resolved_variants()],
                                  bool(env.get("gpus")), str(env.get("gpu_note") or ""))
    listener.on_devices(list(dict.fromkeys(resolved.values())))
    runtimes = {fw: rt.on(resolved[(fw, exp.device)].device) if (fw, exp.device) in resolved else rt
                for fw, rt in runtimes.items()}
    refuse_tf32_without_units([v.math_mode for _, v in exp.resolved_variants()], env.get("gpus") or [], exp.source)
    if options.preflight is not None:  # e.g. refuse a budget that cannot be enforced, before anything is written
        options.preflight(env, runtimes)
    # data before the store: a data error (no network, corrupt archive) must leave nothing written
    data = prepare(data_request(exp, options.data_dir), options.cache_dir or default_cache_dir())
    if not is_native_model(exp.model):  # a native model has no description: its adapter checks it in the worker
        build_description(exp.model, data.input_shape, data.classes)  # a model that does not fit the input
    trials = plan(exp, data, {key: r.device for key, r in resolved.items()},  # before the store too: it refuses
                  {fw: rt.adapter_class for fw, rt in runtimes.items()})
    # e.g. augmentation the data cannot take, and frameworks on different devices unless asked for
    check_one_device({_series_name(t): t.run_device for t in trials}, exp.allow_mixed_devices, exp.source)
    require_disk(data.order_bytes(exp.epochs) * exp.repeats, Path(data.directory),
                 f"the shuffle orders of {exp.repeats} repeat(s) x {max(exp.epochs, 1)} epoch(s)", "lower epochs")
    spec = exp.to_dict() | {"data": {k: v for k, v in data.to_dict().items() if k != "directory"}}
    return _Prepared(env=env, data=data, trials=trials, spec=spec, runtimes=runtimes)


def _run_trials(exp: Experiment, out_dir: Path, store: Store, ready: _Prepared, options: SweepOptions,
                listener: SweepListener) -> SweepResult:
    """Under the lock, with the store open: the run recorded, then the trials still to run, one row each."""
    existing = _refuse_a_finished_store(exp, out_dir, options.resume, store=store)  # filled since the first look?
    if existing:
        _refuse_changed_experiment(store, exp, ready.spec, out_dir)
        gone = superseded(ready.trials, {r.trial_hash for r in existing})
        if gone:  # run again on the device the framework now resolves to, never kept beside it
            store.drop_trials(gone)
            existing = [r for r in existing if r.trial_hash not in gone]
            warnings.warn(f"--resume: {len(gone)} stored trial(s) ran on another device than their framework "
                          "resolves to now (device = \"auto\", after an install): removed, and run again here",
                          BatchscopeWarning, stacklevel=3)
        moved = evaluated_by_old_rule(ready.trials, existing, ramp=exp.study == "batch_ramp")
        if moved:  # a cell's repeats evaluated by two rules would be compared as one measurement
            store.drop_trials(moved)
            existing = [r for r in existing if r.trial_hash not in moved]
            warnings.warn(f"--resume: {len(moved)} stored trial(s) were evaluated under the old rule for evaluation "
                          "points (a constant size's spread over its steps, or every round(target_eval_samples / B) "
                          "steps to the target; now at sample counts, as a schedule's): removed, and run again here, "
                          "so that no cell mixes the two (CHANGELOG, Unreleased)", BatchscopeWarning, stacklevel=3)
    write_atomically(out_dir / f"{exp.name}.resolved.json", json.dumps(ready.spec, indent=2, default=str),
                     "the resolved experiment")
    run_id = store.begin_run(exp.name, ready.spec, options.command, ready.env)
    done = store.finished_hashes()
    trials, n = ready.trials, len(ready.trials)
    result = SweepResult(out_dir=out_dir, total=n)
    todo = [t for t in trials if t.trial_hash not in done]
    result.already_done = n - len(todo)
    index = {t.trial_hash: i for i, t in enumerate(trials, 1)}
    executor = options.executor or LocalExecutor(monitor_factory=options.monitor_factory, log_dir=out_dir / "logs")
    listener.on_plan(todo, ready.data)

    def unit(trial: TrialSpec) -> TrialUnit:
        runtime = ready.runtimes[trial.framework]
        return unit_for(exp, trial, ready.data, env=worker_env(trial, ready.env, runtime), runtime=runtime)

    def finished(outcome: TrialOutcome) -> None:  # the driver writes every row, one transaction each
        store.write_trial(outcome, run_id, ready.env)
        result.outcomes.append(outcome)
        listener.on_trial_complete(index[outcome.trial.trial_hash], n, outcome)

    def run(todo: list[TrialSpec]) -> None:
        backend = _backend(executor, unit, listener, todo)
        stats = run_chains(todo, submit=backend.submit, wait=backend.wait, cancel=backend.cancel, slots=backend.slots,
                           on_done=finished,
                           on_start=lambda t, attempt: listener.on_trial_start(index[t.trial_hash], n, t),
                           skip_larger=exp.skip_larger_after_oom, oom_at=oom_limits(existing),
                           known=known_durations(existing))
        result.not_run += stats.not_run
        result.peak_in_flight = max(result.peak_in_flight, stats.peak_in_flight)

    run(todo)
    if exp.study == "batch_ramp" and not result.not_run:  # issue 52: the ramp the stored constant trials recommend
        ramps, why = ramp_trials(exp, store, trials, ready.data.n_train)
        for framework, reason in why.items():
            listener.on_environment(f"batch_ramp: no ramp for {framework}: {reason}")
        more = [t for t in ramps if t.trial_hash not in done]
        index.update({t.trial_hash: i for i, t in enumerate(ramps, n + 1)})
        n += len(ramps)
        result.total, result.already_done = n, result.already_done + len(ramps) - len(more)
        if more:
            listener.on_plan(more, ready.data)
            run(more)
    if options.after_trials is not None:
        options.after_trials(SweepContext(store, run_id, ready.data, ready.env, out_dir, options.monitor_factory,
                                          executor, ready.runtimes), result)
    return result


#: settings that may differ on --resume: they choose which trials run, not how one runs or is measured; or they
#: are analysis keys, read from the store by the report and ``recommend`` (``target_accuracy``)
RESUMABLE_CHANGES = frozenset({"frameworks", "batch_sizes", "repeats", "timeout_s", "description", "source",
                               "skip_larger_after_oom", "max_batch", "allow_mixed_devices",
                               "target_accuracy"})


def changed_settings(stored: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The settings (other than :data:`RESUMABLE_CHANGES`) whose value differs, as "key: stored -> now"."""
    out = []
    for key in sorted(set(stored) | set(now)):
        if key in RESUMABLE_CHANGES:
            continue
        before, after = stored.get(key), now.get(key)
        if key == "math_mode" and before is None and after == legacy_math_mode(str(now.get("device"))):
            continue  # a store from before math modes ran exactly this (true float32 on the CPU)
        if json.dumps(before, sort_keys=True, default=str) != json.dumps(after, sort_keys=True, default=str):
            out.append(f"{key}: {before!r} stored, {after!r} now")
    return out


def _refuse_changed_experiment(store: Store, exp: Experiment, spec: dict[str, Any], out_dir: Path) -> None:
    """--resume of a store made with other settings would mix two experiments under one name (two rows per
    cell, and medians over both): refuse, naming what changed (issue 13, item 3)."""
    runs = [r for r in store.runs() if r.experiment == exp.name and r.spec]
    if not runs:
        return
    stored = dict(runs[-1].spec or {})  # the store parsed it: the record's field, never its JSON text again
    changes = changed_settings(stored, json.loads(json.dumps(spec, default=str)))  # this run's, as it will be stored
    if changes:
        raise ConfigError(f"--resume: {out_dir} holds experiment {exp.name!r} run with other settings "
                          f"({'; '.join(changes)}); resume with the same settings, or run into another --out "
                          "directory so the two are kept apart")


def superseded(trials: Sequence[TrialSpec], stored: set[str]) -> set[str]:
    """Stored hashes of ``trials`` as they would be on the other device: an ``auto`` trial that ran on the CPU
    before the GPU builds were installed (or the reverse), which ``--resume`` must run again, not keep."""
    out = set()
    for t in trials:
        if t.device == "auto" and t.device_resolved:
            other = dataclasses.replace(t, device_resolved="gpu" if t.device_resolved == "cpu" else "cpu").trial_hash
            if other != t.trial_hash and other in stored:
                out.add(other)
    return out


def evaluated_by_old_rule(trials: Sequence[TrialSpec], stored: Sequence[TrialRecord], ramp: bool = False) -> set[str]:
    """Stored hashes of ``trials`` as planned before the one rule for evaluation points, where theirs fell elsewhere
    then (:func:`harness.config.trial.evaluated_by_steps`), which ``--resume`` must run again, not keep beside the new.
    ``ramp`` (the batch_ramp study): a framework's stored ramp trials too where any of its constant trials is among
    them, since its ramp was computed from their rows (recomputed from the new ones, it may be another)."""
    hashes = {r.trial_hash for r in stored}
    out, frameworks = set(), set()
    for t in trials:
        old = evaluated_by_steps(t)
        if old is not None and old.trial_hash in hashes:
            out.add(old.trial_hash)
            frameworks.add(t.framework)
    if ramp and frameworks:
        out |= {r.trial_hash for r in stored
                if r.settings.framework in frameworks and r.settings.variant == RAMP_VARIANT}
    return out


def _series_name(trial: TrialSpec) -> str:
    return f"{trial.framework} [{trial.variant}]" if trial.variant else trial.framework


def summarise(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The CLI table's rows: one per cell, from :func:`harness.cells.summary_rows` (the report's statistics)."""
    return summary_rows(rows)
