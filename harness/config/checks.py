"""The checks of an experiment's values, run when an :class:`~harness.config.experiment.Experiment` is made: every
refusal names the file and the key (ConfigError, exit 2) before anything runs or is written. The bounds come from
the fields (``_setting``) and :mod:`harness.config.limits`; the enumerated values from the fields' Literal types."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from harness.config.limits import MAX_NAME_CHARS, MAX_TRIALS, SQLITE_INT_MAX
from harness.config.resolution import Resolution
from harness.errors import ConfigError

if TYPE_CHECKING:
    from harness.config.experiment import Experiment


_HINTS: dict[type, dict[str, Any]] = {}  # by class: an experiment is made many times, its class's hints once


def field_hints(cls: type) -> dict[str, Any]:
    """The resolved type of each field of the dataclass ``cls``."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


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
    _check_precision(exp, bad)
    _check_math_mode(exp, bad)
    _check_gradient_noise(exp, bad)
    _check_granularity(exp, bad)
    _check_target_mode(exp, bad)
    _check_rates(exp, bad)
    _check_device_settings(exp, bad)
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


def _check_precision(exp: Experiment, bad: Callable[[str, str], ConfigError]) -> None:
    """Refuse a precision an adapter would not run: a stored trial must never claim a precision it did not use."""
    from harness.registry import adapter_class

    for fw in exp.frameworks:  # one message, the adapter's own (adapters.base.Adapter.validate_precision)
        try:
            adapter_class(fw).validate_precision(exp.precision, exp.device)
        except ConfigError as e:
            raise bad("precision", str(e)) from None


def _check_math_mode(exp: Experiment, bad: Callable[[str, str], ConfigError]) -> None:
    """Refuse a math mode an adapter would not apply on the experiment's device (harness.config.precision)."""
    from harness.config.precision import validate_math_mode
    from harness.registry import adapter_class

    for fw in exp.frameworks:
        cls = adapter_class(fw)
        try:  # getattr: a duck-typed plugin may not declare math modes at all
            validate_math_mode(exp.math_mode, exp.device, fw, tuple(getattr(cls, "math_modes", ())),
                               str(getattr(cls, "math_mode_note", "")))
        except ConfigError as e:
            raise bad("math_mode", str(e)) from None


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
    """Refuse a gradient-noise measurement that would not happen: without evaluation points (it runs at them), or
    for an adapter without ``flat_gradient`` (a plugin may lack it), rather than record nothing."""
    if not exp.gradient_noise:
        return
    if not exp.eval:
        raise bad("gradient_noise", f"{exp.gradient_noise!r}: the measurement runs at the evaluation points, but "
                                    "eval = false turns them off; set eval = true, or leave gradient_noise out")
    from harness.registry import adapter_class

    for fw in exp.frameworks:
        if not has_hook(adapter_class(fw), "flat_gradient"):
            raise bad("gradient_noise", f"{exp.gradient_noise!r}: the {fw} adapter has no flat_gradient() (the "
                                        "capability `flat_gradient`), which the gradient-noise measurement needs; "
                                        f"leave gradient_noise out, or run {fw} in an experiment without it")


def _check_device_settings(exp: Experiment, bad: Callable[[str, str], ConfigError]) -> None:
    """Refuse adapter settings that would do nothing on the experiment's device (PyTorch's CUDA allocator
    settings on a CPU): a setting asked for and not applied is refused, never recorded as applied."""
    from harness.registry import adapter_class

    for fw in exp.frameworks:
        settings = exp.adapters.get(fw)
        check = getattr(adapter_class(fw), "validate_device_options", None)  # a duck-typed plugin may lack it
        if settings is None or check is None:
            continue
        try:
            check(settings.options, exp.device)
        except ConfigError as e:
            raise bad(f"adapters.{fw}", str(e)) from None


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
