"""Expand an experiment into trials, in the order they run.

``memory_limit_mib`` is the max-batch search's budget only: sweep trials run on the whole device (on a
GPU a cap would change the very memory figures the sweep measures, and MXNet cannot apply one).

Per framework, batch sizes run from small to large, so that once a size runs out of memory the
larger ones can be recorded as skipped instead of being run into the same wall.
"""

from __future__ import annotations

from harness.config.experiment import Experiment
from harness.config.trial import OptimizerSpec, TrialSpec
from harness.data import DataRequest, PreparedData
from harness.registry import adapter_class


def data_request(exp: Experiment, data_dir: str | None = None) -> DataRequest:
    """The data an experiment needs."""
    return DataRequest(name=exp.dataset, seed=exp.seed, train_samples=exp.train_samples,
                       synthetic_shape=exp.synthetic_shape, synthetic_classes=exp.synthetic_classes,
                       synthetic_samples=exp.synthetic_samples, data_dir=data_dir,
                       layout=exp.data_layout)


def plan(exp: Experiment, data: PreparedData) -> list[TrialSpec]:
    """Every trial of ``exp``: frameworks x batch sizes (ascending) x repeats."""
    trials = []
    for framework in exp.frameworks:
        settings = exp.adapters.get(framework)
        options = dict(settings.options) if settings else adapter_class(framework).validate_options({})
        for batch_size in sorted(exp.batch_sizes):
            for repeat in range(exp.repeats):
                trials.append(TrialSpec(
                    experiment=exp.name, framework=framework, model=exp.model_for(framework), dataset=exp.dataset,
                    batch_size=batch_size, repeat=repeat, seed=exp.seed + repeat, epochs=exp.epochs,
                    warmup_steps=exp.warmup_steps, timed_steps=exp.timed_steps,
                    optimizer=OptimizerSpec(name=exp.optimizer, lr=exp.lr_for(batch_size),  # type: ignore[arg-type]
                                            momentum=exp.momentum),
                    device=exp.device, threads=exp.threads, timeout_s=exp.timeout_s,  # type: ignore[arg-type]
                    precision=exp.precision, denormals=exp.denormals, adapter_options=options,
                    eval=exp.eval, eval_batch_size=exp.eval_batch_size, train_samples=exp.train_samples,
                    data_key=data.key,
                ))
    return trials
