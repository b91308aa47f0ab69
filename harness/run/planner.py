"""Expand an experiment into trials, in the order they run.

``memory_limit_mib`` is the max-batch search's budget only: sweep trials run on the whole device (on a
GPU a cap would change the very memory figures the sweep measures, and MXNet cannot apply one).

Per framework and variant, batch sizes run from small to large, so that once a size runs out of memory
the larger ones of that variant can be recorded as skipped instead of being run into the same wall.
"""

from __future__ import annotations

from harness.config.experiment import Experiment
from harness.config.trial import OptimizerSpec, TrialSpec
from harness.data import DataRequest, PreparedData
from harness.data.augment import check_applicable
from harness.errors import ConfigError
from harness.registry import adapter_class


def data_request(exp: Experiment, data_dir: str | None = None) -> DataRequest:
    """The data an experiment needs."""
    return DataRequest(name=exp.dataset, seed=exp.seed, train_samples=exp.train_samples,
                       synthetic_shape=exp.synthetic_shape, synthetic_classes=exp.synthetic_classes,
                       synthetic_samples=exp.synthetic_samples, data_dir=data_dir,
                       layout=exp.data_layout)


def plan_steps(n_train: int, batch_size: int, epochs: int, warmup: int, timed: int) -> tuple[int, int, int]:
    """(warm-up, timed, rest) step counts. With epochs, warm-up and timed steps come out of the epochs."""
    if epochs == 0:
        return warmup, timed, 0
    total = epochs * -(-n_train // batch_size)
    timed_n = min(timed, max(total - warmup, 1))
    warmup_n = min(warmup, total - timed_n)
    return warmup_n, timed_n, total - warmup_n - timed_n


def planned_steps(trial: TrialSpec, n_train: int) -> int:
    """How many training steps ``trial`` will run on ``n_train`` training samples (progress and ETAs)."""
    return sum(plan_steps(n_train, trial.batch_size, trial.epochs, trial.warmup_steps, trial.timed_steps))


def plan(exp: Experiment, data: PreparedData) -> list[TrialSpec]:
    """Every trial of ``exp``: frameworks x variants x batch sizes (ascending) x repeats.

    The batch size is the micro-batch (what is in memory at once); with ``accumulate_steps`` = k an update
    sees k of them, and the learning-rate policy scales with that effective batch.

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
        for framework in exp.frameworks:
            if v.accumulate_steps > 1 and not adapter_class(framework).supports_accumulation:
                where = f"variants.{name}." if name else ""
                raise ConfigError(f"{exp.source}: {where}accumulate_steps = {v.accumulate_steps}: the {framework} "
                                  "adapter does not implement gradient accumulation; use accumulate_steps = 1 "
                                  "for it (or run it in an experiment without that framework)")
    trials = []
    for framework in exp.frameworks:
        for variant, v in variants:
            settings = v.adapters.get(framework)
            options = dict(settings.options) if settings else adapter_class(framework).validate_options({})
            for batch_size in sorted(v.batch_sizes):
                for repeat in range(v.repeats):
                    trials.append(_trial(v, variant, framework, batch_size, repeat, options, data))
    return trials


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
        eval=v.eval, eval_points=v.eval_points if v.eval else 0, eval_batch_size=v.eval_batch_size,
        train_samples=v.train_samples,
        data_key=data.key, variant=variant, augment=v.augment, augment_pad_px=v.augment_pad_px,
        accumulate_steps=v.accumulate_steps,
        gradient_noise=v.gradient_noise if v.eval else 0,
    )
