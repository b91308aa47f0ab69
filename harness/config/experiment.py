"""Experiment files (TOML) parsed into frozen, validated dataclasses, and the per-trial spec.

An experiment file is flat TOML plus optional ``[adapters.<name>]`` tables::

    name = "quick"
    frameworks = ["pytorch", "tensorflow", "mxnet"]
    model = "osu_cnn"
    dataset = "mnist5k"
    batch_sizes = [4, 8, 16, 32]
    epochs = 1

    [adapters.tensorflow]
    memory_mode = "growth"

A study compares settings within one experiment with named variants, each a table of the keys in
:data:`VARIANT_KEYS` (``[variants.<name>.adapters.<framework>]`` overrides adapter settings); every
variant x framework x batch size x repeat is one trial::

    [variants.sgd]
    optimizer = "sgd"
    learning_rate = 0.01

    [variants.adam]
    optimizer = "adam"
    learning_rate = 0.001

Every refusal names the file and the key and quotes the bad value; unknown keys list the valid ones.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

# the enumerated settings are Literal types (harness/config/choices.py); the bounds are harness/config/limits.py's
from harness.config.choices import (
    Augment,
    DataLayout,
    Denormals,
    Device,
    LrPolicy,
    MathMode,
    OptimizerName,
    Precision,
    Study,
)
from harness.config.limits import (
    DEFAULT_SETTLE_STEPS,
    MAX_ACCUMULATE_STEPS,
    MAX_MEMORY_LIMIT_MIB,
    MAX_NAME_CHARS,
    MAX_POINTS,
    MAX_SAMPLE_INTERVAL_MS,
    MAX_SIZE,
    MAX_STEPS,
    MAX_THREADS,
    MAX_TIMEOUT_S,
    MAX_TRIALS,
    SQLITE_INT_MAX,
)
from harness.config.resolution import Resolution
from harness.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: keys a variant may set: the settings that define a study (the rest is shared by every variant)
VARIANT_KEYS = ("optimizer", "learning_rate", "momentum", "lr_policy", "lr_base_batch", "augment",
                "augment_pad_px", "precision", "denormals", "math_mode", "accumulate_steps", "adapters",
                "batch_sizes",  # e.g. smaller micro-batches where a variant accumulates to the same effective batch
                "batch_schedule")  # a ramp beside constant sizes (issue 52): the variant's sizes are its schedule's

#: CLI flags by field, so a refused override names the flag the user typed, not the experiment file
_FLAGS = {"skip_larger_after_oom": "--no-skip-larger"}


def _setting(default: Any, *, ge: float | None = None, gt: float | None = None, lt: float | None = None,
             le: float | None = None, unit: str = "", why: str = "") -> Any:
    """A field of :class:`Experiment` with its bounds, from which validation and its messages follow.

    ``ge``/``gt``: the lowest value allowed (inclusive/exclusive); ``lt``: an exclusive upper bound (a range such
    as momentum's [0, 1)); ``le``: the largest usable value (e.g. what the OS can set), in ``unit``; ``why``: said
    after a refused lower bound.
    """
    return field(default=default, metadata={"ge": ge, "gt": gt, "lt": lt, "le": le, "unit": unit, "why": why})


@dataclass(frozen=True)
class AdapterSettings:
    """``[adapters.<name>]``: an optional interpreter and the adapter's own settings."""

    python: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    #: where the interpreter was named (``FILE: environments.pytorch``, ``--python``), for messages; not stored
    python_from: str = field(default="", compare=False)


@dataclass(frozen=True)
class Variant:
    """One named variant: the settings it changes from the experiment's own (keys of :data:`VARIANT_KEYS`)."""

    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    """A validated experiment: what to run, for which frameworks and batch sizes."""

    name: str
    frameworks: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    model: str = "osu_cnn"
    dataset: str = "synthetic"
    data_layout: DataLayout = "auto"
    description: str = ""
    epochs: int = _setting(0, ge=0)
    warmup_steps: int = _setting(5, ge=0, le=MAX_STEPS, unit="steps")
    timed_steps: int = _setting(20, ge=1, le=MAX_STEPS, unit="steps")
    repeats: int = _setting(1, ge=1)  # bounded by the plan: frameworks x batch sizes x repeats <= MAX_TRIALS
    seed: int = _setting(0, ge=0, why="NumPy's generators take non-negative seeds")
    optimizer: OptimizerName = "sgd"
    learning_rate: float = _setting(0.01, gt=0)
    momentum: float = _setting(0.0, ge=0, lt=1)
    lr_policy: LrPolicy = "fixed"
    lr_base_batch: int = _setting(32, ge=1, le=MAX_SIZE, unit="samples")
    device: Device = "auto"
    #: allow frameworks whose builds land on different devices (one on the GPU, one on the CPU) in one run; every
    #: table, figure and verdict then groups by device and never compares across it (issue 29). Default: refused
    allow_mixed_devices: bool = False
    precision: Precision = "fp32"
    denormals: Denormals = "flush"  # see docs/denormals.md for why flushing is the default
    #: float32 convolutions and matmuls on a GPU: true float32 in every framework by default, so that a comparison
    #: measures the frameworks, not which one turned TF32 on (docs/precision.md, "Math mode")
    math_mode: MathMode = "ieee"
    threads: int = _setting(0, ge=0, le=MAX_THREADS, unit="threads")
    timeout_s: float = _setting(900.0, gt=0, le=MAX_TIMEOUT_S, unit="s")
    eval: bool = True
    #: evaluations on the held-out split spread evenly over the training's samples, besides the final one (the
    #: learning curve, and where divergence is caught; harness.config.schedule.eval_steps); 0: the final evaluation
    #: only. Outside the training clock.
    eval_points: int = _setting(8, ge=0, le=MAX_POINTS, unit="points")
    eval_batch_size: int = _setting(256, ge=1, le=MAX_SIZE, unit="samples")
    #: the accuracy (percent) the recommendation's time to target is measured to; 0: each series' best mean final
    #: accuracy minus 1 point (report/target.py). An analysis key: changing it re-reads the store, reruns nothing
    target_accuracy: float = _setting(0.0, ge=0, le=100, unit="%", why="0: the best mean accuracy minus 1 point")
    #: train to the target (issue 33, docs/critical_batch.md): each trial trains until an evaluation first finds the
    #: absolute ``target_accuracy`` (required) or until its ``epochs`` budget runs out, evaluating after the first step
    #: that reaches each multiple of ``target_eval_samples`` samples (the same resolution in samples, and the same
    #: evaluation cost per sample, at every batch size and in a schedule; at most every step;
    #: harness.config.schedule.eval_steps)
    train_to_target: bool = False
    target_eval_samples: int = _setting(500, ge=1, le=MAX_SIZE, unit="samples")
    #: a learning-rate grid (issue 33): every rate is a variant ``lr_<rate>`` of its own; each batch size's figure is
    #: its best rate's (fewest steps to the target; report/critical_batch.py). Empty: the one ``learning_rate``
    learning_rates: tuple[float, ...] = ()
    #: a factor grid around the ``lr_policy`` prediction (issue 33): every factor f is a variant ``lr_x<f>`` whose
    #: rate at each size is f times what the policy gives that size (``learning_rate`` scaled by ``lr_policy``);
    #: chosen per size as ``learning_rates``' rates are. Empty: none. Not with ``learning_rates`` or variants
    lr_factors: tuple[float, ...] = ()
    train_samples: int = _setting(0, ge=0, le=MAX_SIZE, unit="samples")
    synthetic_shape: tuple[int, int, int] = (3, 32, 32)
    synthetic_classes: int = _setting(10, ge=2, le=MAX_SIZE, unit="classes")
    synthetic_samples: int = _setting(2048, ge=1, le=MAX_SIZE, unit="samples")
    sample_interval_ms: float = _setting(100.0, gt=0, le=MAX_SAMPLE_INTERVAL_MS, unit="ms")
    skip_larger_after_oom: bool = True
    max_batch: bool = False
    memory_limit_mib: float = _setting(0.0, ge=0, le=MAX_MEMORY_LIMIT_MIB, unit="MiB", why="0: no limit")
    #: the max-batch search's settling runs (CPU, glibc's default malloc): as long as the training the answer must
    #: hold for, since the heap grows over steps
    max_batch_settle_steps: int = _setting(DEFAULT_SETTLE_STEPS, ge=1, le=100_000, unit="steps")
    #: the max-batch search's resolution (``maxbatch --granularity``): "exact", "N%", "K" or "K,N%"; "": the
    #: device's default (1 %, and multiples of 8 on a GPU; harness/config/resolution.py)
    max_batch_granularity: str = ""
    augment: Augment = "none"
    augment_pad_px: int = _setting(4, ge=1, le=MAX_SIZE, unit="pixels")
    accumulate_steps: int = _setting(1, ge=1, le=MAX_ACCUMULATE_STEPS, unit="micro-batches")
    #: gradient noise scale B_simple (docs/noise.md): at each evaluation point, this many big batches of 4 trial
    #: batches each (4x as many gradients of the trial's batch size, at most 64), outside the training clock; 0: off
    gradient_noise: int = _setting(0, ge=0, le=MAX_POINTS, unit="groups")
    #: on a GPU, seconds of training steps after the final evaluation, off the headline clock, whose GPU utilisation,
    #: power and J/sample are measured as a window of their own (the timed phase may be too short for NVML: issue 29,
    #: docs/sampler.md); the worker skips it on a CPU. 0: off
    steady_s: float = _setting(2.0, ge=0, le=60, unit="s", why="0: no steady phase")
    #: a persistent compilation cache shared by the sweep's workers (JAX), under the cache directory
    #: ($BATCHSCOPE_CACHE/compile); each trial stores its compile_s and whether the cache was cold or warm
    compile_cache: bool = True
    #: the next batch gathered (and, where the adapter can, copied to the device) on a background thread while the
    #: current step trains, as users' input pipelines do (harness/run/worker/prefetch.py); false: serially
    prefetch: bool = True
    study: Study = ""
    #: a batch-size schedule (issue 52; harness/config/schedule.py): ``[[fraction, batch], ...]`` at fractions of the
    #: training's samples; each trial then changes its batch size as it trains, its learning rate following
    #: ``lr_policy`` at each size. Empty: a constant size per trial (``batch_sizes``)
    batch_schedule: tuple[tuple[float, int], ...] = ()
    adapters: Mapping[str, AdapterSettings] = field(default_factory=dict)
    variants: tuple[Variant, ...] = ()
    source: str = "<inline>"

    def __post_init__(self) -> None:
        validate(self)
        variants = self.resolved_variants()  # each variant must be a valid experiment on its own
        n = sum(len(v.frameworks) * len(v.batch_sizes) * v.repeats for _, v in variants)
        if len(variants) > 1 and n > MAX_TRIALS:
            raise ConfigError(f"{where(self, 'variants')}: {len(variants)} variant(s) plan {n} trials, more than "
                              f"{MAX_TRIALS}; lower repeats, the batch sizes or the variants")

    def resolved_variants(self) -> list[tuple[str, Experiment]]:
        """(variant name, the experiment with that variant's settings applied); ``[("", self)]`` without variants.
        A learning-rate grid (``learning_rates``) is one variant per rate, named by :func:`lr_variant_name`."""
        if self.learning_rates:
            return [(lr_variant_name(lr), dataclasses.replace(self, learning_rates=(), learning_rate=float(lr)))
                    for lr in self.learning_rates]
        if self.lr_factors:  # the policy scales each variant's base rate per size (lr_for)
            return [(lr_factor_variant_name(f), dataclasses.replace(self, lr_factors=(),
                                                                    learning_rate=self.learning_rate * float(f)))
                    for f in self.lr_factors]
        if not self.variants:
            return [("", self)]
        out = []
        for v in self.variants:
            changes = dict(v.settings)
            if changes.get("batch_schedule"):
                if "batch_sizes" in changes:
                    raise ConfigError(f"{self.source}: variants.{v.name}: batch_schedule: cannot be combined with "
                                      "batch_sizes in one variant (a scheduled trial's sizes are its schedule's); "
                                      "leave batch_sizes out of this variant")
                changes["batch_sizes"] = (changes["batch_schedule"][0][1],)
            adapters = dict(self.adapters)
            for fw, settings in changes.pop("adapters", {}).items():
                base = adapters.get(fw, AdapterSettings())
                adapters[fw] = AdapterSettings(python=settings.python or base.python,
                                               options={**base.options, **settings.options})
            try:
                out.append((v.name, dataclasses.replace(self, variants=(), adapters=adapters, **changes)))
            except ConfigError as e:
                raise ConfigError(f"{self.source}: variants.{v.name}: {e}") from None
        return out

    def with_overrides(self, **changes: Any) -> Experiment:
        """A copy with some fields replaced (and validated again), e.g. from CLI flags.

        A refused value that came from a flag is reported as that flag, not as the experiment file's key.

        Raises:
            ConfigError: a bad value, or a change some variant would not see (it sets that key itself).
        """
        given = {k: v for k, v in changes.items() if v is not None}
        for v in self.variants:
            shadowed = sorted(set(given) & set(v.settings))
            if shadowed:  # the variant's own value would win: the override would be asked for and not applied
                flag = _FLAGS.get(shadowed[0], "--" + shadowed[0].replace("_", "-"))
                raise ConfigError(f"command line: {flag}: variants.{v.name} in {self.source} sets {shadowed[0]} "
                                  "itself, so the override would not apply there; edit the file instead")
        try:
            return dataclasses.replace(self, **given)
        except ConfigError as e:
            raise named_by_flag(self, e, given) from None

    def with_interpreters(self, named: Mapping[str, str], where: str = "--python") -> Experiment:
        """A copy whose frameworks run in the interpreters ``named`` (framework -> path), e.g. from ``--python``;
        each replaces the file's own for that framework.

        Raises:
            ConfigError: an unknown framework, or a path that is not an executable file (exit 2).
        """
        from harness.registry import known_adapter_names

        adapters = dict(self.adapters)
        for name, path in named.items():
            if name not in known_adapter_names():
                raise ConfigError(f"command line: {where} {name}=...: unknown adapter {name!r}; registered: "
                                  f"{', '.join(sorted(known_adapter_names()))}")
            python = check_interpreter(f"command line: {where} {name}", path)
            base = adapters.get(name, AdapterSettings())
            adapters[name] = AdapterSettings(python=python, options=base.options, python_from=f"{where} {name}")
        return dataclasses.replace(self, adapters=adapters)

    def to_dict(self) -> dict[str, Any]:
        """The resolved experiment as plain JSON-able data (saved with the results)."""
        out = dataclasses.asdict(self)
        out["adapters"] = {k: {"python": v.python, "options": dict(v.options)} for k, v in self.adapters.items()}
        out["variants"] = [{"name": v.name, "settings": _plain(v.settings)} for v in self.variants]
        return out

    def model_for(self, framework: str) -> str:
        """The model ``framework`` runs: ``native:...`` where its adapter names a native model, else ``model``."""
        from harness.models import native_name

        settings = self.adapters.get(framework)
        factory = settings.options.get("native_model") if settings else None
        return native_name(factory) if factory else self.model

    def lr_for(self, batch_size: int) -> float:
        """The learning rate for ``batch_size`` (the effective batch: samples per update) under the policy."""
        ratio = batch_size / self.lr_base_batch
        if self.lr_policy == "linear":
            return self.learning_rate * ratio
        if self.lr_policy == "sqrt":
            return self.learning_rate * math.sqrt(ratio)
        return self.learning_rate


# ------------------------------------------------------------------------------------------- the checks
# Every value of an experiment is checked when one is made (``Experiment.__post_init__``): every refusal names the
# file and the key (ConfigError, exit 2) before anything runs or is written. The bounds come from the fields
# (``_setting``) and :mod:`harness.config.limits`; the enumerated values from the fields' Literal types. They live
# beside the record they check (they were cut into a module of their own for a line count, which left that module
# importing this one for its annotations and this one calling it: a circle; issue 39). What an adapter must be able
# to run (a precision, a math mode, a capability, its own settings) is checked against the adapter classes a command
# looked up once (:func:`check_adapters`, issue 51): making an experiment reads no registry.

_HINTS_BY_CLASS: dict[type, dict[str, Any]] = {}  # by class: an experiment is made many times, its class's hints once


def field_hints(cls: type) -> dict[str, Any]:
    """The resolved type of each field of the dataclass ``cls``."""
    if cls not in _HINTS_BY_CLASS:
        _HINTS_BY_CLASS[cls] = typing.get_type_hints(cls)
    return _HINTS_BY_CLASS[cls]


def choice_fields(cls: type) -> dict[str, tuple[str, ...]]:
    """The allowed values of each enumerated (Literal) field of ``cls``."""
    return {k: typing.get_args(h) for k, h in field_hints(cls).items() if typing.get_origin(h) is Literal}


def _check_grid(exp: Experiment, key: str, values: tuple[float, ...], bad: Callable[[str, str], ConfigError]) -> None:
    """A grid (``learning_rates``, ``lr_factors``): distinct finite numbers > 0, and no named variants beside it."""
    if exp.variants:
        raise bad(key, "cannot be combined with [variants.*] (each value is a variant of its own); "
                       "put the rates in variants instead, or leave the variants out")
    if any(not (math.isfinite(v) and v > 0) for v in values):
        raise bad(key, f"{list(values)!r}: every value must be a finite number > 0")
    if len(set(values)) != len(values):
        raise bad(key, f"{list(values)!r} names a value twice")


def _check_target_mode(exp: Experiment, bad: Callable[[str, str], ConfigError]) -> None:
    """Train-to-target needs an absolute target, a budget and evaluations; a grid needs distinct positive rates and
    cannot be combined with named variants (a rate grid inside each variant is not built)."""
    if exp.train_to_target:
        if not exp.target_accuracy:
            raise bad("train_to_target", "true needs an absolute target_accuracy (percent, e.g. 95) to train to; "
                                         "the default target (the best mean accuracy - 1 point) is known only "
                                         "after every trial has run")
        if not exp.epochs:
            raise bad("train_to_target", "true needs a budget: epochs >= 1 (a trial that never reaches the target "
                                         "stops there, recorded as not reached within it)")
        if not exp.eval:
            raise bad("train_to_target", "true needs eval = true (the target is found at evaluations)")
    if exp.learning_rates and exp.lr_factors:
        raise bad("lr_factors", f"{list(exp.lr_factors)!r} cannot be combined with learning_rates (two grids of "
                                "rates); "
                                "give the rates themselves (learning_rates) or factors around lr_policy (lr_factors)")
    for key, values in (("learning_rates", exp.learning_rates), ("lr_factors", exp.lr_factors)):
        if values:
            _check_grid(exp, key, values, bad)


def _scaled_rate(exp: Experiment, rate: float, batch: int) -> float:
    """``rate`` at the effective batch ``batch`` under ``lr_policy`` (the rule of ``Experiment.lr_for``)."""
    ratio = batch / exp.lr_base_batch
    if exp.lr_policy == "linear":
        return rate * ratio
    if exp.lr_policy == "sqrt":
        return rate * math.sqrt(ratio)
    return rate


def _check_rates(exp: Experiment, bad: Callable[[str, str], ConfigError]) -> None:
    """The rate every trial trains at, derived from several keys (a grid's value or ``learning_rate`` x a factor,
    scaled by ``lr_policy`` from ``lr_base_batch`` to each effective batch), checked like the keys it comes from: a
    finite number > 0 (issue 43: 1e300 x 1e8 scaled linearly trained at inf), refused naming the keys that made it.
    The scaling is monotone in the batch, so the smallest and the largest effective batch bound every trial's rate."""
    if exp.learning_rates:
        bases = [("learning_rates", lr, f"learning_rates value {lr!r}") for lr in exp.learning_rates]
    elif exp.lr_factors:
        bases = [("lr_factors", exp.learning_rate * f, f"learning_rate {exp.learning_rate!r} x lr_factors value {f!r}")
                 for f in exp.lr_factors]
    else:
        bases = [("learning_rate", exp.learning_rate, f"learning_rate {exp.learning_rate!r}")]
    sizes = [b * exp.accumulate_steps for b in exp.batch_sizes if isinstance(b, int) and b > 0]
    ends = sorted({min(sizes), max(sizes)}) if sizes and exp.lr_policy != "fixed" else []
    for key, base, words in bases:
        if not (math.isfinite(base) and base > 0):
            raise bad(key, f"{words} gives a rate of {base!r}; every trial's rate must be a finite number > 0: lower "
                           f"{'the factors or learning_rate' if key == 'lr_factors' else key}")
        for batch in ends:
            rate = _scaled_rate(exp, base, batch)
            if not (math.isfinite(rate) and rate > 0):
                raise bad(key, f"{words}, scaled by lr_policy = {exp.lr_policy!r} from lr_base_batch "
                               f"{exp.lr_base_batch} to batch {batch}, gives a rate of {rate!r}; every trial's rate "
                               f"must be a finite number > 0: change {key}, lr_policy, lr_base_batch or batch_sizes")


def where(exp: Experiment, key: str) -> str:
    """``file: key``, how a refusal names what it refuses."""
    return f"{exp.source}: {key}"


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an experiment (None: it can). It names the default output directory
    (``results/<name>``) and files in it: ``..`` would be the parent directory, and a name longer than a file name
    may be fails after the store is written."""
    shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}... ({len(name):,} characters)"
    if not name:
        return "is empty; give the experiment a name (letters, digits, '_', '-', '.')"
    if len(name) > MAX_NAME_CHARS:
        return f"{shown} is longer than {MAX_NAME_CHARS} characters (it names the output directory and its files)"
    if not (name[0].isalnum() or name[0] == "_"):
        return f"{shown} must start with a letter, a digit or '_' (it names a directory: '.' and '..' are taken)"
    if not all(ch.isalnum() or ch in "_-." for ch in name):
        return f"{shown} is not a usable name (letters, digits, '_', '-', '.')"
    return None


def validate(exp: Experiment) -> None:
    """Every check of one experiment's values (ConfigError naming the file and the key; nothing has run)."""
    from harness.data.known import DATASETS
    from harness.models import check_model_name
    from harness.registry import known_adapter_names

    def bad(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{where(exp, key)}: {msg}")

    problem = name_problem(exp.name)
    if problem:
        raise bad("name", problem)
    if not exp.frameworks:
        raise bad("frameworks", "the list is empty; name at least one framework")
    known = known_adapter_names()
    for fw in exp.frameworks:
        if fw not in known:
            raise bad("frameworks", f"unknown framework {fw!r}; registered adapters: {', '.join(sorted(known))}")
    if len(set(exp.frameworks)) != len(exp.frameworks):
        raise bad("frameworks", f"a framework is listed twice: {list(exp.frameworks)}")
    if not exp.batch_sizes:
        raise bad("batch_sizes", "the list is empty; give at least one batch size")
    for b in exp.batch_sizes:
        if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
            raise bad("batch_sizes", f"batch size {b!r} must be a whole number > 0")
    if len(set(exp.batch_sizes)) != len(exp.batch_sizes):
        raise bad("batch_sizes", f"a batch size is listed twice: {list(exp.batch_sizes)}")
    try:
        check_model_name(exp.model)  # a user's "module:function" is imported here, framework imports refused
    except ConfigError as e:
        raise bad("model", str(e)) from None
    if exp.model.startswith("native:") and len(exp.frameworks) > 1:
        raise bad("model", f"{exp.model!r} is one framework's own model, but frameworks lists "
                           f"{', '.join(exp.frameworks)}; list one framework, or name the factory under "
                           "[adapters.NAME] native_model for the framework it belongs to")
    if exp.dataset.startswith("npz:"):
        from harness.data.npzfile import check_path
        from harness.errors import DataError

        try:
            check_path(exp.dataset)  # the file's contents are checked when it is prepared, still before any worker
        except DataError as e:
            raise bad("dataset", str(e)) from None
    elif exp.dataset not in DATASETS:
        raise bad("dataset", f"unknown dataset {exp.dataset!r}; known: {', '.join(sorted(DATASETS))}, "
                             "or npz:path/to/data.npz (your own arrays)")
    _check_fields(exp, bad)
    _validate_ranges(exp, bad)
    _check_gradient_noise(exp, bad)
    _check_granularity(exp, bad)
    _check_target_mode(exp, bad)
    _check_rates(exp, bad)
    _check_schedule(exp, bad)
    _check_ramp_study(exp, bad)
    if len(exp.synthetic_shape) != 3 or min(exp.synthetic_shape) <= 0:
        raise bad("synthetic_shape", f"{list(exp.synthetic_shape)!r} must be [channels, height, width], all > 0")
    for name in exp.adapters:
        if name not in known:
            raise bad("adapters", f"settings for unknown adapter {name!r}; registered: {', '.join(sorted(known))}")


def _check_fields(exp: Experiment, bad: Callable[[str, str], ConfigError]) -> None:
    """Each setting against what its field declares: a Literal's values, a number's bounds (:func:`_setting`);
    every float must be finite (inf and nan would pass or fail comparisons for the wrong reason)."""
    choices = choice_fields(type(exp))
    for f in dataclasses.fields(exp):
        value = getattr(exp, f.name)
        if f.name in choices:
            if value not in choices[f.name]:
                raise bad(f.name, f"{value!r} is not one of {', '.join(choices[f.name])}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise bad(f.name, f"{value!r} must be a finite number")
        m = f.metadata
        if m.get("ge") is not None and m.get("lt") is not None and not m["ge"] <= value < m["lt"]:
            raise bad(f.name, f"{value!r} must be in [{m['ge']}, {m['lt']})")
        if m.get("ge") is not None and value < m["ge"]:
            raise bad(f.name, f"{value!r} must be >= {m['ge']}" + (f" ({m['why']})" if m.get("why") else ""))
        if m.get("gt") is not None and not value > m["gt"]:
            raise bad(f.name, f"{value!r} must be > {m['gt']}")
        if m.get("le") is not None and value > m["le"]:
            shown, limit = (f"{value:,}", f"{m['le']:,}") if isinstance(value, int) else (f"{value:g}", f"{m['le']:g}")
            raise bad(f.name, f"{shown} is more than the largest usable value ({limit} {m['unit']})".replace(" )", ")"))


def _check_schedule(exp: Experiment, bad: Callable[[str, str], ConfigError]) -> None:
    """A batch-size schedule: well formed (harness.config.schedule.check_schedule), alone where it defines the sizes,
    over a training it can be a fraction of, one update per micro-batch. A size above the data set is refused when
    the data set's size is known (harness.run.planner.plan)."""
    from harness.config.schedule import check_schedule

    if not exp.batch_schedule:
        return
    try:
        check_schedule(exp.batch_schedule)
    except ValueError as e:
        raise bad("batch_schedule", str(e)) from None
    first = exp.batch_schedule[0][1]
    if tuple(exp.batch_sizes) != (first,):
        raise bad("batch_schedule", f"cannot be combined with batch_sizes = {list(exp.batch_sizes)} (a scheduled "
                                    "trial's sizes are its schedule's); leave batch_sizes out, or put the schedule in "
                                    "a [variants.NAME] table beside constant-size variants")
    if exp.epochs <= 0:
        raise bad("batch_schedule", "needs epochs > 0: its fractions are of the training's samples (epochs x the "
                                    "training set)")
    if exp.accumulate_steps != 1:
        raise bad("batch_schedule", f"cannot be combined with accumulate_steps = {exp.accumulate_steps}: each "
                                    "scheduled size is one update of that many samples")
    if exp.max_batch:
        raise bad("batch_schedule", "cannot be combined with max_batch = true (the search finds one size); run the "
                                    "search in an experiment of its own")
    if exp.train_samples and max(b for _, b in exp.batch_schedule) > exp.train_samples:
        raise bad("batch_schedule", f"batch size {max(b for _, b in exp.batch_schedule)} is more than the "
                                    f"{exp.train_samples} training samples (train_samples)")
    for _, b in exp.batch_schedule:
        if b > MAX_SIZE:
            raise bad("batch_schedule", f"batch size {b:,} is more than the largest usable value ({MAX_SIZE:,})")
    for _, b in exp.batch_schedule:  # each size trains at its lr_policy rate: every one must be usable
        rate = exp.lr_for(b)
        if not (math.isfinite(rate) and rate > 0):
            raise bad("batch_schedule", f"batch size {b} trains at learning_rate {exp.learning_rate:g} scaled by "
                                        f"lr_policy = {exp.lr_policy!r} from lr_base_batch {exp.lr_base_batch}: "
                                        f"{rate!r}, not a finite number > 0")


def _check_ramp_study(exp: Experiment, bad: Callable[[str, str], ConfigError]) -> None:
    """``study = "batch_ramp"`` (issue 52): constant sizes trained to a target with the gradient noise measured, so
    that the ramp B_simple recommends can be planned from them and judged beside them (harness/run/ramp.py)."""
    if exp.study != "batch_ramp":
        return
    needs = [(not exp.train_to_target, "train_to_target = true (the verdict is the time to the target)"),
             (not exp.gradient_noise, "gradient_noise > 0 (the ramp is read from B_simple along the training)"),
             (len(exp.batch_sizes) < 2, "two or more batch_sizes (the ramp moves between measured sizes)"),
             (bool(exp.batch_schedule), "no batch_schedule (the ramp is the one B_simple recommends)"),
             (bool(exp.variants or exp.learning_rates or exp.lr_factors), "no variants or rate grids (the ramp "
                                                                         "runs as the variant 'ramp')")]
    missing = [what for lacking, what in needs if lacking]
    if missing:
        raise bad("study", f"'batch_ramp' needs {'; '.join(missing)}")


def has_hook(cls: type, hook: str) -> bool:
    """Whether the adapter class ``cls`` defines ``hook`` itself rather than inheriting the base class's default:
    :func:`adapters.base.capabilities`' rule, read without importing :mod:`adapters.base` (the parent's
    configuration layer does not import the adapters' package)."""
    for klass in cls.__mro__:
        if hook in vars(klass):
            return klass.__module__ != "adapters.base"
    return False


def _check_granularity(exp: Experiment, bad: Callable[[str, str], ConfigError]) -> None:
    """Refuse a resolution the search could not use, before anything runs (the same rule as ``--granularity``)."""
    if exp.max_batch_granularity:
        try:
            Resolution.parse(exp.max_batch_granularity, name="max_batch_granularity")
        except ConfigError as err:
            raise bad("max_batch_granularity", str(err).removeprefix("max_batch_granularity ")) from None


def _check_gradient_noise(exp: Experiment, bad: Callable[[str, str], ConfigError]) -> None:
    """Refuse a gradient-noise measurement that would not happen: without evaluation points (it runs at them), rather
    than record nothing (an adapter without ``flat_gradient``: :func:`check_adapters`)."""
    if not exp.gradient_noise:
        return
    if not exp.eval:
        raise bad("gradient_noise", f"{exp.gradient_noise!r}: the measurement runs at the evaluation points, but "
                                    "eval = false turns them off; set eval = true, or leave gradient_noise out")


def _validate_ranges(exp: Experiment, bad: Any) -> None:
    """Values that would crash later (SQLite's integer range) or need unbounded memory (the plan): refused before
    anything runs. The fields' own bounds (finite, >= 0, an OS limit that cannot be set) are :func:`_check_fields`'."""
    ints = [(f.name, getattr(exp, f.name)) for f in dataclasses.fields(exp) if field_hints(type(exp))[f.name] is int]
    ints += [("batch_sizes", b) for b in exp.batch_sizes] + [("synthetic_shape", d) for d in exp.synthetic_shape]
    for key, value in ints:
        if isinstance(value, int) and value > SQLITE_INT_MAX:
            raise bad(key, f"{value} is larger than the store can hold ({SQLITE_INT_MAX})")
    if exp.seed + exp.repeats - 1 > SQLITE_INT_MAX:
        raise bad("seed", f"{exp.seed} + {exp.repeats} repeats passes the store's largest integer "
                          f"({SQLITE_INT_MAX}): repeat r uses seed + r; lower the seed")
    if 0 < exp.target_accuracy < 1:
        raise bad("target_accuracy", f"{exp.target_accuracy!r} is read as a percent ({exp.target_accuracy:g} %, "
                                     f"below any useful target); write {exp.target_accuracy * 100:g} for "
                                     f"{exp.target_accuracy * 100:g} %")
    n = len(exp.frameworks) * len(exp.batch_sizes) * exp.repeats
    if n > MAX_TRIALS:
        raise bad("repeats", f"{len(exp.frameworks)} framework(s) x {len(exp.batch_sizes)} batch size(s) x "
                             f"{exp.repeats} repeat(s) = {n} trials, more than {MAX_TRIALS}; lower repeats or "
                             "the batch sizes")


# ------------------------------------------------------------------------------------------- against the adapters
def adapter_names(exp: Experiment) -> tuple[str, ...]:
    """Every adapter ``exp`` names, each once: its frameworks, then those its ``[adapters.X]`` tables set (a
    variant's too). What a command looks up in the registry, once each (issue 51), to check ``exp`` against
    (:func:`check_adapters`) and to resolve the frameworks it runs with."""
    names = dict.fromkeys(exp.frameworks)
    names.update(dict.fromkeys(exp.adapters))
    for v in exp.variants:
        names.update(dict.fromkeys(v.settings.get("adapters", {})))
    return tuple(names)


def check_adapters(exp: Experiment, adapters: Mapping[str, type], flags: Iterable[str] = ()) -> Experiment:
    """``exp`` checked against its adapters' classes (``adapters``: each name of :func:`adapter_names`, as the command
    looked it up once): returned with each ``[adapters.X]`` table's settings as its adapter resolves them
    (``validate_options``; already resolved ones come back the same), after refusing what an adapter would not run:
    a precision or a math mode on the device asked for, settings that would do nothing there, a gradient-noise
    measurement without ``flat_gradient``, a schedule whose rate changes without ``set_learning_rate``, accumulation
    it does not implement. Each variant is checked as the experiment is. Reads no registry.

    ``flags``: the keys the command line set (:meth:`Experiment.with_overrides`): a refusal of one names its flag.

    Raises:
        ConfigError: naming the file (or the flag) and the key (exit 2, before anything is built or written).
    """
    try:
        exp = _with_resolved_settings(exp, adapters)
        _check_runs(exp, adapters)
        if exp.variants:
            for name, v in exp.resolved_variants():
                try:
                    _check_runs(v, adapters)
                except ConfigError as e:
                    raise ConfigError(f"{exp.source}: variants.{name}: {e}") from None
        _check_accumulation(exp, adapters)
    except ConfigError as e:
        raise named_by_flag(exp, e, flags) from None
    return exp


def named_by_flag(exp: Experiment, error: ConfigError, keys: Iterable[str]) -> ConfigError:
    """``error`` as the command line's where it refuses one of ``keys``, a value a flag set (``command line:
    --math-mode: ...``, not the experiment file's key); else ``error`` itself."""
    text = str(error)
    for key in keys:
        prefix = f"{where(exp, key)}: "
        if text.startswith(prefix):
            flag = _FLAGS.get(key, "--" + key.replace("_", "-"))
            return ConfigError(f"command line: {flag}: {text[len(prefix):]}")
    return error


def _with_resolved_settings(exp: Experiment, adapters: Mapping[str, type]) -> Experiment:
    """``exp`` with each ``[adapters.X]`` table (a variant's too) resolved by its adapter (``validate_options``; a
    native model's factory found), in the order the file gives them."""
    tables = {fw: _resolved_settings(exp.source, fw, s, adapters[fw]) for fw, s in exp.adapters.items()}
    variants = tuple(
        Variant(v.name, {**v.settings, "adapters": {
            fw: _resolved_settings(f"{exp.source}: variants.{v.name}", fw, s, adapters[fw])
            for fw, s in v.settings["adapters"].items()}}) if "adapters" in v.settings else v
        for v in exp.variants)
    if tables == dict(exp.adapters) and variants == exp.variants:
        return exp
    return dataclasses.replace(exp, adapters=tables, variants=variants)


def _resolved_settings(source: str, name: str, settings: AdapterSettings, cls: type) -> AdapterSettings:
    try:
        options = dict(cast(Any, cls).validate_options(dict(settings.options)))
        if options.get("native_model"):
            from harness.models.native import check_factory

            check_factory(options["native_model"], "native_model")
    except ConfigError as e:
        raise ConfigError(f"{source}: adapters.{name}: {e}") from None
    return dataclasses.replace(settings, options=options)


def _check_runs(exp: Experiment, adapters: Mapping[str, type]) -> None:
    """What each of ``exp``'s adapters must run, refused where it would not (the experiment's own key named)."""
    from harness.config.precision import validate_math_mode

    def bad(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{where(exp, key)}: {msg}")

    for fw in exp.frameworks:  # a stored trial must never claim a precision it did not use: the adapter's own words
        try:
            cast(Any, adapters[fw]).validate_precision(exp.precision, exp.device)
        except ConfigError as e:
            raise bad("precision", str(e)) from None
    for fw in exp.frameworks:  # a math mode the adapter would not apply on the experiment's device
        cls = adapters[fw]
        try:  # getattr: a duck-typed plugin may not declare math modes at all
            validate_math_mode(exp.math_mode, exp.device, fw, tuple(getattr(cls, "math_modes", ())),
                               str(getattr(cls, "math_mode_note", "")))
        except ConfigError as e:
            raise bad("math_mode", str(e)) from None
    if exp.gradient_noise:  # a plugin may lack flat_gradient: refused rather than record nothing
        for fw in exp.frameworks:
            if not has_hook(adapters[fw], "flat_gradient"):
                raise bad("gradient_noise", f"{exp.gradient_noise!r}: the {fw} adapter has no flat_gradient() (the "
                                            "capability `flat_gradient`), which the gradient-noise measurement needs; "
                                            f"leave gradient_noise out, or run {fw} in an experiment without it")
    if exp.batch_schedule and len({exp.lr_for(b) for _, b in exp.batch_schedule}) > 1:  # the rate changes with the
        for fw in exp.frameworks:  # size: the adapter must be able to change it
            if not has_hook(adapters[fw], "set_learning_rate"):
                raise bad("batch_schedule", f"under lr_policy = {exp.lr_policy!r} the learning rate changes with the "
                                            f"size, but the {fw} adapter has no set_learning_rate() (the capability "
                                            "`lr_change`); use lr_policy = 'fixed', or run it without a schedule")
    for fw in exp.frameworks:  # settings that would do nothing on the device (PyTorch's CUDA allocator's on a CPU)
        settings = exp.adapters.get(fw)
        check = getattr(adapters[fw], "validate_device_options", None)  # a duck-typed plugin may lack it
        if settings is None or check is None:
            continue
        try:
            check(settings.options, exp.device)
        except ConfigError as e:
            raise bad(f"adapters.{fw}", str(e)) from None


def _check_accumulation(exp: Experiment, adapters: Mapping[str, type]) -> None:
    """Gradient accumulation (``accumulate_steps`` > 1, a variant's too) for an adapter that implements it only."""
    for name, v in exp.resolved_variants():
        for fw in exp.frameworks:
            if v.accumulate_steps > 1 and not getattr(adapters[fw], "supports_accumulation", False):
                where = f"variants.{name}." if name else ""
                raise ConfigError(f"{exp.source}: {where}accumulate_steps = {v.accumulate_steps}: the {fw} "
                                  "adapter does not implement gradient accumulation; use accumulate_steps = 1 "
                                  "for it (or run it in an experiment without that framework)")


def lr_variant_name(lr: float) -> str:
    """The variant a learning-rate grid's rate runs as: ``lr_0.001`` (``repr``-exact, so two rates never share one)."""
    return f"lr_{float(lr)!r}"


def lr_factor_variant_name(factor: float) -> str:
    """The variant a factor grid's factor runs as: ``lr_x0.5`` (a rate of the grid, like :func:`lr_variant_name`)."""
    return f"lr_x{float(factor)!r}"


def _toml_type(hint: Any) -> type | tuple[type, ...]:
    """The TOML value type(s) a field of this type accepts (a float field takes an integer too)."""
    if typing.get_origin(hint) is Literal:
        return type(typing.get_args(hint)[0])
    return (int, float) if hint is float else hint  # type: ignore[no-any-return]


#: the schema, derived from :class:`Experiment`'s annotations (not restated): which keys are lists and of what,
#: which are scalars and of which TOML type, and the allowed values of each enumerated (Literal) setting
_HINTS = field_hints(Experiment)
#: parsed on their own; "source" is where the file came from
_TABLES = ("adapters", "variants", "environments", "source", "batch_schedule")  # batch_schedule: pairs, read on its own
_LISTS: dict[str, type] = {k: typing.get_args(h)[0] for k, h in _HINTS.items()
                           if typing.get_origin(h) is tuple and k not in _TABLES}
_SCALARS: dict[str, type | tuple[type, ...]] = {k: _toml_type(h) for k, h in _HINTS.items()
                                                if k not in _LISTS and k not in _TABLES}
_CHOICES: dict[str, tuple[str, ...]] = choice_fields(Experiment)
VALID_KEYS = tuple(sorted([*_SCALARS, *_LISTS, "adapters", "variants", "environments", "batch_schedule"]))


def _plain(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A variant's settings as JSON-able data (adapter settings as tables)."""
    out = dict(settings)
    if "adapters" in out:
        out["adapters"] = {k: {"python": v.python, "options": dict(v.options)} for k, v in out["adapters"].items()}
    return out


def _read_value(source: str, key: str, value: Any) -> Any:
    """A top-level or variant key's TOML value, type-checked and converted once, where the file is read: an integer
    where a float is expected (``lr_factors = [0.5, 1, 2]``, ``learning_rate = 1``) becomes that float, in a list as in
    a scalar, so each value then meets its own check's message (issue 43) rather than a type error."""
    if key == "batch_schedule":
        from harness.config.schedule import parse_schedule

        try:
            return parse_schedule(value)
        except ValueError as e:
            raise ConfigError(f"{source}: batch_schedule: {e}") from None
    if key in _LISTS:
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {key}: {value!r} should be a list")
        typ = _toml_type(_LISTS[key])
        for item in value:
            _check_type(source, key, item, typ)
        return tuple(float(v) for v in value) if typ == (int, float) else tuple(value)
    _check_type(source, key, value, _SCALARS[key])
    return float(value) if _SCALARS[key] == (int, float) else value


def _check_type(source: str, key: str, value: Any, typ: type | tuple[type, ...]) -> None:
    ok = isinstance(value, typ) and not (isinstance(value, bool) and typ is not bool and bool not in
                                         (typ if isinstance(typ, tuple) else (typ,)))
    if not ok:
        raise ConfigError(f"{source}: {key}: {value!r} should be {_type_words(typ)}")


#: how a TOML type is named to a user (issue 32: "should be a int")
_TYPE_WORDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false", list: "a list"}


def _type_words(typ: type | tuple[type, ...]) -> str:
    """``typ`` in words: "a whole number", "a number" (an int or a float), "a string", "true or false"."""
    types = typ if isinstance(typ, tuple) else (typ,)
    if set(types) == {int, float}:
        return "a number"
    return " or ".join(_TYPE_WORDS.get(t, f"a {t.__name__}") for t in types)


def _parse_adapters(source: str, raw: Any) -> dict[str, AdapterSettings]:
    from harness.registry import known_adapter_names

    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: adapters: should be tables like [adapters.mxnet]")
    out: dict[str, AdapterSettings] = {}
    for name, table in raw.items():
        if name not in known_adapter_names():
            raise ConfigError(f"{source}: adapters: settings for unknown adapter {name!r}; "
                              f"registered: {', '.join(sorted(known_adapter_names()))}")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: adapters.{name}: should be a table of settings")
        table = dict(table)
        python = table.pop("python", None)
        if python is not None:
            python = check_interpreter(f"{source}: adapters.{name}.python", python)
        # the settings as written: their adapter resolves them when the command has looked it up (check_adapters)
        out[name] = AdapterSettings(python=python, options=table,
                                    python_from=f"{source}: adapters.{name}.python" if python else "")
    return out


def check_interpreter(where: str, value: Any) -> str:
    """A named interpreter's path, expanded; refused where it is not an executable file (its framework is checked
    there before the first trial: harness.envs.resolve)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {value!r} should be the path of an interpreter (e.g. /opt/venv/bin/python)")
    python = os.path.expanduser(value.strip())
    if not os.path.exists(python):
        raise ConfigError(f"{where}: {python!r} does not exist; give the full path of that environment's python "
                          "(e.g. /opt/venv/bin/python)")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise ConfigError(f"{where}: {python!r} is not an executable file; give the full path of that "
                          "environment's python (e.g. /opt/venv/bin/python)")
    return python


def _parse_environments(source: str, raw: Any, adapters: Mapping[str, AdapterSettings]
                        ) -> dict[str, AdapterSettings]:
    """``[environments]``: ``framework = "/path/bin/python"``, merged into the adapters' settings."""
    from harness.registry import known_adapter_names

    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: environments: should be a table like [environments] with "
                          "pytorch = \"/opt/venv/bin/python\"")
    out = dict(adapters)
    for name, value in raw.items():
        where = f"{source}: environments.{name}"
        if name not in known_adapter_names():
            raise ConfigError(f"{where}: unknown adapter {name!r}; registered: "
                              f"{', '.join(sorted(known_adapter_names()))}")
        python = check_interpreter(where, value)
        base = out.get(name, AdapterSettings())
        if base.python and base.python != python:
            raise ConfigError(f"{where}: {name} is given two interpreters ({base.python_from} and here); name it once")
        out[name] = AdapterSettings(python=python, options=base.options, python_from=where)
    return out


def _parse_variants(source: str, raw: Any) -> tuple[Variant, ...]:
    """``[variants.<name>]`` tables, in file order (TOML keeps it)."""
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{source}: variants: should be one or more tables like [variants.adam] "
                          f"with keys among {', '.join(VARIANT_KEYS)}")
    out = []
    for name, table in raw.items():
        where = f"{source}: variants.{name}"
        if not name.replace("-", "_").replace(".", "_").isidentifier():
            raise ConfigError(f"{where}: {name!r} is not a usable variant name (letters, digits, '_', '-')")
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: should be a table of settings (keys among {', '.join(VARIANT_KEYS)})")
        unknown = sorted(set(table) - set(VARIANT_KEYS))
        if unknown:
            raise ConfigError(f"{where}: {unknown[0]!r} cannot vary between variants; variant keys: "
                              f"{', '.join(VARIANT_KEYS)} (put shared settings at the top of the file)")
        settings: dict[str, Any] = {}
        for key, value in table.items():
            if key == "adapters":
                tables = value.values() if isinstance(value, dict) else ()
                if any(isinstance(t, dict) and "python" in t for t in tables):
                    raise ConfigError(f"{where}.adapters: 'python' cannot vary between variants (one interpreter "
                                      "per framework); set it in the top-level [adapters.<name>] table")
                settings["adapters"] = _parse_adapters(f"{source}: variants.{name}", value)
            else:
                settings[key] = _read_value(f"{source}: variants.{name}", key, value)
        out.append(Variant(name=name, settings=settings))
    return tuple(out)


def parse_experiment(data: Mapping[str, Any], source: str = "<inline>") -> Experiment:
    """Validate raw TOML data into an :class:`Experiment`, checked against the adapters it names too (each looked up
    here: for what runs before a command, or without one; a command reads the registry once, :func:`read_experiment`
    then :func:`check_adapters`)."""
    return _checked_here(experiment_from(data, source))


def _checked_here(exp: Experiment) -> Experiment:
    from harness.registry import adapter_class

    return check_adapters(exp, {name: adapter_class(name) for name in adapter_names(exp)})


def experiment_from(data: Mapping[str, Any], source: str = "<inline>") -> Experiment:
    """Raw TOML data as an :class:`Experiment`: every value checked that needs no adapter (ConfigError naming the
    key); its ``[adapters.X]`` tables as written, until :func:`check_adapters` checks it against its adapters."""
    unknown = sorted(set(data) - set(VALID_KEYS))
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]!r}; valid keys: {', '.join(VALID_KEYS)}")
    for key in ("name", "frameworks", "batch_sizes"):
        if key == "batch_sizes" and "batch_schedule" in data:
            continue  # the schedule's sizes (filled in below)
        if key not in data:
            raise ConfigError(f"{source}: missing required key {key!r}")
    kwargs: dict[str, Any] = {"source": source}
    for key, value in data.items():
        if key == "adapters":
            kwargs["adapters"] = _parse_adapters(source, value)
        elif key == "environments":
            continue  # after the adapters' tables, which it merges into
        elif key == "variants":
            kwargs["variants"] = _parse_variants(source, value)
        else:
            kwargs[key] = _read_value(source, key, value)
    if data.get("learning_rates") and "learning_rate" in data:  # the grid's rates replace it: it would not apply
        raise ConfigError(f"{source}: learning_rate: {data['learning_rate']!r} is not used when learning_rates "
                          "gives a grid (each rate runs as its own variant); leave one of the two out")
    if kwargs.get("eval") is False and kwargs.get("eval_points"):  # asked for, and would not be applied
        raise ConfigError(f"{source}: eval_points: {kwargs['eval_points']!r} evaluation points were asked for, but "
                          "eval = false turns evaluation off; leave eval_points out, or set eval = true")
    if "batch_schedule" in kwargs and "batch_sizes" not in kwargs:  # a scheduled trial's first size is its batch_size
        kwargs["batch_sizes"] = (kwargs["batch_schedule"][0][1],)
    if "environments" in data:
        kwargs["adapters"] = _parse_environments(source, data["environments"], kwargs.get("adapters", {}))
    return Experiment(**kwargs)


def load_experiment(path: str | os.PathLike[str]) -> Experiment:
    """Read and validate an experiment file, checked against the adapters it names too (each looked up here, as
    :func:`parse_experiment` does)."""
    return _checked_here(read_experiment(path))


def read_experiment(path: str | os.PathLike[str]) -> Experiment:
    """Read an experiment file: every value checked that needs no adapter (:func:`experiment_from`). A command then
    looks each of :func:`adapter_names` up once and checks it against them (:func:`check_adapters`)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such experiment file (see experiments/ for examples)")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (byte {e.start}: {e.reason}); save it as UTF-8 "
                          "(TOML files are UTF-8)") from e
    return experiment_from(data, source=str(p))


