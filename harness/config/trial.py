"""The per-trial spec: everything one worker needs to run one trial; its hash identifies the trial."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, cast

from harness.config.choices import Augment, Denormals, Device, MathMode, OptimizerName, Precision
from harness.config.precision import legacy_math_mode

#: how a trial's evaluation points are placed (:attr:`TrialSpec.eval_by`)
EvalBy = Literal["samples", "steps"]


@dataclass(frozen=True)
class OptimizerSpec:
    """The optimizer every framework builds identically (PyTorch-style SGD momentum; Adam)."""

    name: OptimizerName = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-7  # Keras' default; set explicitly in every framework so they agree


@dataclass(frozen=True)
class TrialSpec:
    """Everything one worker needs to run one trial; its hash identifies the trial in the store."""

    experiment: str
    framework: str
    model: str
    dataset: str
    batch_size: int
    repeat: int
    seed: int
    epochs: int
    warmup_steps: int
    timed_steps: int
    optimizer: OptimizerSpec
    device: Device
    threads: int
    timeout_s: float
    precision: Precision = "fp32"
    denormals: Denormals = "flush"  # what the CPU does with denormal floats
    adapter_options: Mapping[str, Any] = field(default_factory=dict)
    memory_limit_mib: float = 0.0
    eval: bool = True
    eval_points: int = 0  # evaluations spread over the training besides the final one (Experiment.eval_points)
    eval_batch_size: int = 256
    train_samples: int = 0
    data_key: str = ""  # identifies the prepared data (name + shape + seed), part of the hash
    purpose: str = "sweep"  # "sweep", or a max-batch search's "probe", "settle" (issue 22) or "verify"
    # Study settings (issue 14). At their defaults they are left out of the hash (see trial_hash).
    variant: str = ""  # the named variant of the experiment ("" when it has none)
    augment: Augment = "none"  # harness-side augmentation, identical for every framework (harness/data/augment.py)
    augment_pad_px: int = 4  # random-crop padding
    accumulate_steps: int = 1  # micro-batches of batch_size per optimizer update
    #: big batches (of harness.noise.BIG_FACTOR trial batches) whose gradients each evaluation point measures for
    #: the gradient noise scale; 0: none (Experiment.gradient_noise)
    gradient_noise: int = 0
    #: seconds of training steps after the final evaluation, on a GPU only, measured as the ``steady`` window
    #: (Experiment.steady_s); 0: none. Not part of the hash: it changes no headline figure, and the length each
    #: trial measured is stored with it (``steady_window_s``)
    steady_s: float = 0.0
    #: what float32 convolutions and matmuls compute in on a GPU: ieee | tf32 | framework-default (docs/precision.md,
    #: "Math mode"); hashed unless it is what a trial stored before the key existed ran under (see trial_hash)
    math_mode: MathMode = "ieee"
    #: where ``device = "auto"`` was resolved to run, in the parent before the first trial (harness/run/devices.py):
    #: ``cpu`` or ``gpu``; "" when unresolved (the worker's framework picks). Part of the hash only as ``gpu`` under
    #: ``auto``: a CPU trial keeps the hash it had before the field existed, and one resolved to the GPU after the
    #: user installed GPU builds is a new trial, so ``--resume`` does not keep the CPU rows
    device_resolved: str = ""

    #: a persistent compilation cache for frameworks that compile (JAX), in the cache directory
    #: (Experiment.compile_cache). Not part of the hash: it changes how long start-up takes, not the steps timed
    #: after it, and each trial stores what its cache did (``compile_cache``). It does change a CPU process's memory
    #: peak (a program read back skips the compiler's memory), so max-batch runs never use it
    #: (harness.maxbatch.probes)
    compile_cache: bool = True

    #: the next update's batch gathered (and, where the adapter can, moved to the device) on a background thread
    #: while the current one trains (Experiment.prefetch; harness/run/worker/prefetch.py). Hashed when off only
    prefetch: bool = True

    #: train to the target (issue 33): stop at the first evaluation at or above this accuracy (percent); 0: off, the
    #: trial trains its whole ``epochs`` (then a budget). Evaluations every ``eval_every_samples`` samples
    stop_at_accuracy: float = 0.0
    #: what a constant-size trial planned before the one rule for evaluation points evaluated by in train-to-target
    #: mode: every this many updates (``round(target_eval_samples / B)``). No longer planned, nor read by the worker:
    #: kept so that such a trial's stored spec reads back with its hash (:func:`evaluated_by_steps`)
    eval_every_steps: int = 0

    #: a max-batch probe on an emulated GPU: the CUDA context (MiB) earlier probes of the search measured, which an
    #: adapter that caps its allocator before its context exists takes off the cap (RuntimeConfig.context_hint_mib);
    #: 0: none. Not part of the hash: it makes the emulated card what a real one would hold, as PyTorch's own
    #: measurement does, and every probe stores the context it measured (``cuda_context_mib``)
    context_hint_mib: float = 0.0

    #: a max-batch probe (issue 41): after its own steps and evaluation, the worker asks the adapter for its estimate of
    #: a training step's peak at these batch sizes (``Adapter.estimate_step_memory``) and reports it
    #: (``WorkerMetrics.step_estimate``); () for every other trial. Not part of the hash: it measures nothing
    #: the trial's own figures depend on (it runs after them)
    estimate_batches: tuple[int, ...] = ()

    #: a batch-size schedule (issue 52; harness/config/schedule.py): ``(fraction, batch, lr)`` per entry, the rate
    #: ``lr_policy`` gives that size; ``batch_size`` is the first entry's. (): one size all along
    batch_schedule: tuple[tuple[float, int, float], ...] = ()
    #: train-to-target mode: an evaluation at each multiple of this many samples, constant sizes and schedules alike
    #: (harness.config.schedule.eval_steps); 0: not in that mode (the ``eval_points`` spread instead)
    eval_every_samples: int = 0
    #: how the evaluation points are placed: ``samples`` (the one rule, harness.config.schedule.eval_steps: the first
    #: step at which the samples seen reach each point's count). ``steps``: a constant-size trial planned before that
    #: rule, whose points were spread over its steps (and fell every ``eval_every_steps`` updates to the target); read
    #: from such a trial's stored spec only (see :func:`evaluated_by_steps`). Hashed only where it is not what a
    #: trial of its kind was stored under before the rule (``steps`` for a constant size that evaluates inside its
    #: training): those trials get new hashes, every other keeps its own
    eval_by: EvalBy = "samples"

    @property
    def schedule(self) -> tuple[tuple[float, int], ...]:
        """The schedule as (fraction, batch) pairs (harness.config.schedule); () for a constant size."""
        return tuple((f, b) for f, b, _ in self.batch_schedule)

    @property
    def max_batch_size(self) -> int:
        """The largest batch the trial trains (its schedule's largest, or ``batch_size``)."""
        return max((b for _, b, _ in self.batch_schedule), default=self.batch_size)

    @property
    def run_device(self) -> Device:
        """The device the worker is told to use: the resolved one under ``auto``, else the one asked for."""
        if self.device == "auto" and self.device_resolved in ("cpu", "gpu"):
            return cast(Device, self.device_resolved)
        return self.device

    @property
    def effective_batch_size(self) -> int:
        """Samples per optimizer update: the micro-batch times the accumulation steps."""
        return self.batch_size * self.accumulate_steps

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (sent to the worker, stored with the trial)."""
        out = dataclasses.asdict(self)
        out["adapter_options"] = dict(self.adapter_options)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialSpec:
        """Inverse of :meth:`to_dict`."""
        data = dict(data)
        opt = dict(data.pop("optimizer"))
        opt["adam_betas"] = tuple(opt.get("adam_betas", (0.9, 0.999)))
        names = {f.name for f in fields(cls)}
        if "estimate_batches" in data:  # JSON has lists
            data["estimate_batches"] = tuple(int(b) for b in data["estimate_batches"] or ())
        if "batch_schedule" in data:  # JSON has lists, an empty schedule's too (the hash compares it with ())
            data["batch_schedule"] = tuple((float(f), int(b), float(lr)) for f, b, lr in data["batch_schedule"] or ())
        if "math_mode" not in data:  # stored before math modes: what such a trial ran under on its device
            data["math_mode"] = legacy_math_mode(str(data.get("device", "auto")))
        if "eval_by" not in data:  # stored before the one rule for evaluation points: what it evaluated by
            data["eval_by"] = _legacy_eval_by(data)
        return cls(optimizer=OptimizerSpec(**opt), **{k: v for k, v in data.items() if k in names})

    @property
    def trial_hash(self) -> str:
        """A stable hash of everything that defines the trial (timeout excluded: it does not change results)."""
        payload = self.to_dict()
        payload.pop("timeout_s")
        payload.pop("steady_s")
        payload.pop("compile_cache")
        payload.pop("context_hint_mib")
        payload.pop("estimate_batches")
        # Fields added after stores existed are hashed only when set: an experiment that does not use them
        # keeps exactly its old hashes, so `--resume` on an old store skips what it already ran.
        for name, default in _HASHED_WHEN_SET.items():
            if payload.get(name) == default:
                payload.pop(name)
        if payload.get("math_mode") == legacy_math_mode(self.device):
            # what every trial ran under before the key existed (true float32 on the CPU, the framework's default on
            # a GPU): such old trials keep their hashes, and no trial of another math mode can take one of them
            payload.pop("math_mode")
        if payload.get("eval_by") == _legacy_eval_by(payload):
            payload.pop("eval_by")  # what a trial of this kind evaluated by before the field: it keeps its hash
        if payload.get("device_resolved") in ("", "cpu", payload.get("device")):
            payload.pop("device_resolved", None)  # see device_resolved: only auto -> gpu is hashed
        if payload.get("augment", "none") == "none":
            payload.pop("augment_pad_px", None)  # no augmentation: the padding changes nothing
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def _legacy_eval_by(spec: Mapping[str, Any]) -> EvalBy:
    """How a trial with these settings placed its evaluation points before the one rule: by steps where it was a
    constant size that evaluated inside its training (``eval_points``, or ``eval_every_steps`` to the target), by
    samples otherwise (a schedule's; one with no points inside its training has nothing to place)."""
    inside = spec.get("eval_points") or spec.get("eval_every_steps") or spec.get("eval_every_samples")
    if spec.get("eval", True) and inside and not spec.get("batch_schedule"):
        return "steps"
    return "samples"


def evaluated_by_steps(trial: TrialSpec) -> TrialSpec | None:
    """``trial`` as it was planned before the one rule for evaluation points, where its points then fell elsewhere: a
    constant size evaluating inside its training, whose ``eval_points`` were spread over its steps, or which evaluated
    every ``round(eval_every_samples / B)`` updates to the target (B: its effective batch). None where nothing moved
    (a schedule, a trial without points inside its training). ``--resume`` removes such a trial from the store, saying
    so, and runs it again (harness.run.sweep): a cell's repeats are never evaluated by two rules."""
    if trial.eval_by != "samples" or _legacy_eval_by(dataclasses.asdict(trial)) != "steps":
        return None
    if trial.eval_every_samples:
        every = max(1, round(trial.eval_every_samples / trial.effective_batch_size))
        return dataclasses.replace(trial, eval_by="steps", eval_every_samples=0, eval_every_steps=every)
    return dataclasses.replace(trial, eval_by="steps")


#: fields left out of :attr:`TrialSpec.trial_hash` while they hold these defaults
_HASHED_WHEN_SET: dict[str, Any] = {"variant": "", "augment": "none", "augment_pad_px": 4, "accumulate_steps": 1,
                                    "eval_points": 0, "gradient_noise": 0, "prefetch": True,
                                    "stop_at_accuracy": 0.0, "eval_every_steps": 0, "batch_schedule": (),
                                    "eval_every_samples": 0}
