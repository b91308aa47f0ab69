"""Expand an experiment into trials, in the order they run.

``memory_limit_mib`` is the max-batch search's budget only: sweep trials run on the whole device (on a
GPU a cap would change the very memory figures the sweep measures, and MXNet cannot apply one).

Per framework and variant, batch sizes run from small to large, so that once a size runs out of memory
the larger ones of that variant can be recorded as skipped instead of being run into the same wall.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

from harness.config.experiment import Experiment
from harness.config.schedule import schedule_text, step_sizes
from harness.config.trial import OptimizerSpec, TrialSpec
from harness.data import DataRequest, PreparedData
from harness.data.augment import check_applicable
from harness.errors import BatchscopeWarning, ConfigError
from harness.noise import BIG_FACTOR
from harness.registry import adapter_class


def data_request(exp: Experiment, data_dir: str | None = None) -> DataRequest:
    """The data an experiment needs."""
    return DataRequest(name=exp.dataset, seed=exp.seed, train_samples=exp.train_samples,
                       synthetic_shape=exp.synthetic_shape, synthetic_classes=exp.synthetic_classes,
                       synthetic_samples=exp.synthetic_samples, data_dir=data_dir,
                       layout=exp.data_layout)


def plan_steps(n_train: int, batch_size: int, epochs: int, warmup: int, timed: int, total: int | None = None
               ) -> tuple[int, int, int]:
    """(warm-up, timed, rest) step counts. With epochs, warm-up and timed steps come out of the epochs (``total``:
    the training's steps where they are not the epochs at ``batch_size``: a batch-size schedule's)."""
    if epochs == 0:
        return warmup, timed, 0
    total = total if total is not None else epochs * -(-n_train // batch_size)
    timed_n = min(timed, max(total - warmup, 1))
    warmup_n = min(warmup, total - timed_n)
    return warmup_n, timed_n, total - warmup_n - timed_n


def planned_steps(trial: TrialSpec, n_train: int) -> int:
    """How many training steps ``trial`` will run on ``n_train`` training samples (progress and ETAs).

    A step is one optimizer update of ``effective_batch_size`` samples, as the worker plans it
    (harness/run/worker/trial.py): under gradient accumulation an epoch has fewer of them; under a batch-size
    schedule, as many as the schedule cuts (harness.config.schedule.step_sizes).
    """
    if trial.batch_schedule:
        return sum(plan_steps(n_train, trial.batch_size, trial.epochs, trial.warmup_steps, trial.timed_steps,
                              total=len(step_sizes(trial.schedule, n_train, trial.epochs))))
    return sum(plan_steps(n_train, trial.effective_batch_size, trial.epochs, trial.warmup_steps, trial.timed_steps))


def plan(exp: Experiment, data: PreparedData, devices: Mapping[tuple[str, str], str] | None = None,
         adapters: Mapping[str, type] | None = None) -> list[TrialSpec]:
    """Every trial of ``exp``: frameworks x variants x batch sizes (ascending) x repeats.

    The batch size is the micro-batch (what is in memory at once); with ``accumulate_steps`` = k an update
    sees k of them, and the learning-rate policy scales with that effective batch. ``devices``: where each
    (framework, device asked for) was resolved to run (:mod:`harness.run.devices`); unresolved when left out.
    ``adapters``: each framework's adapter class as the command resolved it (its runtime's), whose default settings
    a framework without an ``[adapters.X]`` table gets; left out (a test's, a benchmark's plan), looked up here.
    What an adapter must be able to run was checked against the same classes before (``check_adapters``).

    Raises:
        ConfigError: a variant's augmentation does not apply to the data set.
    """
    variants = exp.resolved_variants()
    for name, v in variants:
        try:
            check_applicable(v.augment, v.augment_pad_px, data.input_shape)
        except ConfigError as e:
            where = f"variants.{name}: " if name else ""
            raise ConfigError(f"{exp.source}: {where}{e}") from None
        if v.batch_schedule and max(b for _, b in v.batch_schedule) > data.n_train:
            where = f"variants.{name}." if name else ""
            biggest = max(b for _, b in v.batch_schedule)
            raise ConfigError(f"{exp.source}: {where}batch_schedule: batch size {biggest} is more than the data set's "
                              f"{data.n_train} training samples ({schedule_text(v.batch_schedule)})")
    classes: Mapping[str, Any] = adapters if adapters is not None else {fw: adapter_class(fw) for fw in exp.frameworks}
    trials: list[TrialSpec] = []
    for framework in exp.frameworks:
        for variant, v in variants:
            settings = v.adapters.get(framework)
            # resolved by the adapter always (its defaults filled in): an [adapters.X] table resolved already comes
            # back the same, and settings made by --python alone (no table: no options) get the defaults a run without
            # --python gets, so the two plan the same trials (same options, same hashes)
            options = dict(classes[framework].validate_options(dict(settings.options) if settings else {}))
            for batch_size in sorted(v.batch_sizes):
                for repeat in range(v.repeats):
                    trial = _trial(v, variant, framework, batch_size, repeat, options, data)
                    resolved = (devices or {}).get((framework, v.device), "")
                    if resolved:
                        trial = dataclasses.replace(trial, device_resolved=resolved,
                                                    steady_s=0.0 if resolved == "cpu" else trial.steady_s)
                    trials.append(trial)
    return cap_to_the_run(trials, data.n_train)


def cap_to_the_run(trials: list[TrialSpec], n_train: int) -> list[TrialSpec]:
    """Each trial with what it asks of its training capped to what the training can use, and a notice
    (:class:`~harness.errors.BatchscopeWarning`, printed as ``batchscope: note:``) per key that was capped.

    ``eval_points`` beyond the steps inside the training (``steps - 1``; the end is the final evaluation) cannot
    all happen (:func:`harness.config.schedule.eval_steps` places each at most once), and a gradient-noise
    measurement of more gradients per point than the training has steps costs more than the training it describes
    (issue 32: ``gradient_noise = 100000000`` on an 8x8 model ran for ever). The capped value is the trial's, so
    what is stored (its ``spec_json``) is what ran.
    """
    capped: dict[str, list[tuple[int, int, int]]] = {"eval_points": [], "gradient_noise": []}  # (asked, cap, batch)
    out = []
    for t in trials:
        steps = planned_steps(t, n_train)
        changes: dict[str, Any] = {}
        if t.eval_points > max(steps - 1, 0):
            changes["eval_points"] = max(steps - 1, 0)
        if t.gradient_noise * BIG_FACTOR > steps:
            changes["gradient_noise"] = max(steps // BIG_FACTOR, 1)
        changes = {k: v for k, v in changes.items() if v != getattr(t, k)}
        for key, value in changes.items():
            capped[key].append((getattr(t, key), value, t.batch_size))
        out.append(dataclasses.replace(t, **changes) if changes else t)
    for key, hits in capped.items():
        if hits:
            warnings.warn(_cap_notice(key, hits), BatchscopeWarning, stacklevel=3)
    return out


def _cap_notice(key: str, hits: list[tuple[int, int, int]]) -> str:
    asked = hits[0][0]
    caps = sorted({c for _, c, _ in hits})
    batches = sorted({b for _, _, b in hits})
    cap = f"{caps[0]}" if len(caps) == 1 else f"{caps[0]} to {caps[-1]} (by batch size)"
    what = ("evaluation points inside the training (its steps - 1; the end is the final evaluation)"
            if key == "eval_points" else
            f"groups of {BIG_FACTOR} gradients per evaluation point (no more gradients than training steps)")
    return (f"{key} = {asked} is more than the training can use at batch size(s) "
            f"{', '.join(map(str, batches))}: capped to {cap} {what}; the capped value is stored with each trial")


def _trial(v: Experiment, variant: str, framework: str, batch_size: int, repeat: int, options: dict[str, object],
           data: PreparedData) -> TrialSpec:
    return TrialSpec(
        experiment=v.name, framework=framework, model=v.model_for(framework), dataset=v.dataset,
        batch_size=batch_size, repeat=repeat, seed=v.seed + repeat, epochs=v.epochs,
        warmup_steps=v.warmup_steps, timed_steps=v.timed_steps,
        optimizer=OptimizerSpec(name=v.optimizer, lr=v.lr_for(batch_size * v.accumulate_steps),  # type: ignore[arg-type]
                                momentum=v.momentum),
        device=v.device, threads=v.threads, timeout_s=v.timeout_s,  # type: ignore[arg-type]
        precision=v.precision, denormals=v.denormals, math_mode=v.math_mode,
        adapter_options=options,  # memory_limit_mib: the max-batch search's budget only
        eval=v.eval, eval_points=v.eval_points if v.eval and not v.train_to_target else 0,
        eval_batch_size=v.eval_batch_size,
        train_samples=v.train_samples,
        data_key=data.key, variant=variant, augment=v.augment, augment_pad_px=v.augment_pad_px,
        accumulate_steps=v.accumulate_steps,
        gradient_noise=v.gradient_noise if v.eval else 0,
        # the worker skips it where the trial ran on a CPU; a schedule has no one size to measure steadily
        steady_s=0.0 if v.device == "cpu" or v.batch_schedule else v.steady_s,
        compile_cache=v.compile_cache,
        prefetch=v.prefetch,
        stop_at_accuracy=v.target_accuracy if v.train_to_target else 0.0,
        # issue 52: each scheduled size trains at the rate lr_policy gives it
        batch_schedule=tuple((f, b, v.lr_for(b)) for f, b in v.batch_schedule),
        # to the target: an evaluation at each target_eval_samples samples, a constant size's as a schedule's
        # (harness.config.schedule.eval_steps)
        eval_every_samples=v.target_eval_samples if v.train_to_target else 0,
    )
