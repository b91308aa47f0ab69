"""The adapter contract: what every framework adapter provides, in framework-free types.

An adapter runs inside a worker process (never in the parent) and owns one framework there.
The worker calls, in order: :meth:`Adapter.versions`, :meth:`Adapter.setup`, :meth:`Adapter.build`,
then :meth:`Adapter.prepare_batch` / :meth:`Adapter.train_step` many times, :meth:`Adapter.evaluate`,
and :meth:`Adapter.memory_stats`. Exceptions escape to the worker, which asks :meth:`Adapter.is_oom`.

:meth:`Adapter.build` is a template (the default, not a requirement): it checks the weights against the
description, calls :meth:`Adapter.begin_model`, then one hook per layer (``layer_conv2d``, ``layer_dense``...,
see :mod:`adapters.building`), builds the optimizer through :meth:`Adapter.make_optimizer` and hands both to
:meth:`Adapter.end_model`. An adapter may override ``build`` entirely instead.

Adapter modules import their framework inside methods only: importing ``adapters.<name>`` must stay
cheap, because the parent imports it to list adapters and to validate their options.

Third-party adapters subclass :class:`Adapter`, register under the ``batchscope.adapters`` entry-point
group, and run ``tests/contract`` against themselves (docs/adapters.md, "Adding a framework adapter").

The plugin API is versioned (:data:`API_VERSION`): what the contract suite asks of an adapter in each version
is in CHANGELOG.md ("For plugin authors"). Beyond the abstract methods, an adapter has the optional
:data:`CAPABILITIES` it overrides (:func:`capabilities`); the suite checks each of them on its own, and tells a
plugin that lacks one "not supported: needs `<capability>`" for the cases that need it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from adapters.building import (
    OPTIMIZER_HOOKS,
    LayerSite,
    WeightFeed,
    check_fits,
    check_weights,
    layer_hook_name,
    resolve_gpu,
    unknown_layer_error,
    unknown_optimizer_error,
    walk_sequence,
)
from adapters.builds import GpuBuild  # re-exported: plugins may return one
from adapters.compiled import CompileStats  # re-exported: an adapter's compile_stats() returns it
from adapters.records import (
    GENERIC_OOM_TEXTS as GENERIC_OOM_TEXTS,
)
from adapters.records import (
    EvalResult as EvalResult,
)
from adapters.records import (
    MemoryStats as MemoryStats,
)
from adapters.records import (
    PrecisionSeen as PrecisionSeen,
)
from adapters.records import (  # their home; plugins import them from here
    RuntimeConfig as RuntimeConfig,
)
from adapters.records import (
    SetupFacts as SetupFacts,
)
from adapters.records import (
    is_generic_oom as is_generic_oom,
)
from harness.config.precision import DESCRIPTIONS, PRECISIONS, Worded, set_setting, setting
from harness.config.trial import OptimizerSpec  # re-exported: plugins import it from here
from harness.errors import AdapterError, ConfigError
from harness.models.description import LAYER_TYPES, Layer, ModelDescription

__all__ = [
    "API_VERSION", "CAPABILITIES", "Adapter", "Capability", "CompileStats", "EvalResult", "GpuBuild", "LayerSite",
    "MemoryStats", "OptimizerSpec", "PrecisionSeen", "RuntimeConfig", "WeightFeed", "capabilities", "check_fits",
    "is_generic_oom", "layer_hook_name", "missing_capabilities", "resolve_gpu", "softmax_cross_entropy",
]

#: The plugin API's version: what the contract suite asks of an adapter (CHANGELOG.md, "For plugin authors").
#: 1: release 0.1.0 and the development versions after it, before the version existed; 2: release 0.2.0: optional
#: capabilities, detected and checked one by one, and a train step that must wait for its work. An adapter says
#: which version it was written against in :attr:`Adapter.api_version`.
API_VERSION = 2

#: the devices a precision is declared for (``auto`` is one of them, chosen in the worker)
PRECISION_DEVICES = ("cpu", "gpu")
_ON = {"cpu": "the CPU", "gpu": "a GPU"}


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, int]:
    """Summed cross-entropy and number correct, in float64, identical for every framework."""
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logsumexp = np.log(np.exp(z).sum(axis=1))
    picked = z[np.arange(len(labels)), labels.astype(np.int64)]
    loss_sum = float((logsumexp - picked).sum())
    correct = int((logits.argmax(axis=1) == labels).sum())
    return loss_sum, correct


class Adapter(ABC):
    """One framework behind the batchscope contract."""

    #: Registry name, equal to the entry-point name (``pytorch``, ``tensorflow``, ``mxnet``).
    name: ClassVar[str]
    #: PyPI distributions whose versions are reported (the first one is "the framework").
    distributions: ClassVar[tuple[str, ...]]
    #: Optional (plugins): pip requirement strings for a managed environment of this adapter's own, e.g.
    #: ``("torch==2.13.*", "numpy>=2")``; built like a built-in framework's (docs/environments.md). Empty: the
    #: environment of the built-in framework whose module it imports (``import_name``), else the parent's interpreter.
    requirements: ClassVar[tuple[str, ...]] = ()
    #: Module to import to check the framework is installed (``torch``). The parent never imports it: the
    #: layering test, the contract suite and the user-model guard take their framework lists from this.
    import_name: ClassVar[str]
    #: Other top-level modules of the framework that the parent must not import either (``keras``, ``jaxlib``).
    framework_modules: ClassVar[tuple[str, ...]] = ()
    #: The plugin API version the adapter was written against (:data:`API_VERSION`); 1 for one written before
    #: the constant existed. Shown by ``batchscope adapters``; the capabilities are detected, not read from it.
    api_version: ClassVar[int] = 1
    #: Adapter settings accepted under ``[adapters.<name>]`` (besides ``python``), with their allowed values.
    #: A type among the values (``(None, str)``) accepts any value of that type; a default of None is left out.
    options: ClassVar[Mapping[str, tuple[Any, ...]]] = {}
    #: Precisions the adapter really runs on some device; the parent refuses any other before a trial starts.
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    #: Precisions it runs per device (``cpu``, ``gpu``); a device not listed runs :attr:`precisions`. Empty:
    #: :attr:`precisions` on every device (a plugin written before precisions were per device).
    device_precisions: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: Why the other precisions are not run (shown when one is refused).
    precision_note: ClassVar[str] = "mixed precision is not implemented in this adapter"
    #: Why a precision is not run on one device, by (precision, device); falls back to :attr:`precision_note`.
    precision_notes: ClassVar[Mapping[tuple[str, str], str]] = {}
    #: Math modes (``ieee``, ``tf32``) setup() applies on a GPU and reads back, reporting the framework's mode in its
    #: info under ``math_mode`` (harness.config.precision.MATH_MODES_SEEN; ``n/a`` on the CPU). Empty: only
    #: ``framework-default`` on a GPU (the parent refuses the others); :attr:`math_mode_note` says why.
    math_modes: ClassVar[tuple[str, ...]] = ()
    math_mode_note: ClassVar[str] = ""
    #: Substrings of stderr that mean "out of memory" when the process died without a Python exception.
    oom_stderr_patterns: ClassVar[tuple[str, ...]] = ()
    #: Whether :meth:`accumulate_gradients` / :meth:`apply_accumulated` are implemented (``accumulate_steps``
    #: > 1 is refused in the parent for an adapter without them, never run as plain steps).
    supports_accumulation: ClassVar[bool] = False
    #: The framework's name in messages ("PyTorch"); the registry name when empty.
    label: ClassVar[str] = ""
    #: How BatchNorm's running variance is updated: with the unbiased batch variance (PyTorch, the contract
    #: suite's reference) or the biased one (Keras, MXNet). The suite compares the running statistics with
    #: the reference converted to this, so a declaration that does not match what the adapter does fails.
    bn_running_variance: ClassVar[Literal["unbiased", "biased"]] = "unbiased"

    @classmethod
    def precisions_on(cls, device: str) -> tuple[str, ...]:
        """The precisions run on ``device``: ``cpu``, ``gpu``, or ``auto`` (those run on both, since under
        ``auto`` the framework picks the device inside the worker, after the parent has to decide)."""
        if device == "auto":
            on_gpu = cls.precisions_on("gpu")
            return tuple(p for p in cls.precisions_on("cpu") if p in on_gpu)
        return tuple(cls.device_precisions.get(device, cls.precisions))

    @classmethod
    def precision_reason(cls, precision: str, device: str) -> str:
        """Why ``precision`` is not run on ``device`` (``cpu`` or ``gpu``)."""
        return cls.precision_notes.get((precision, device)) or cls.precision_note

    @classmethod
    def validate_precision(cls, precision: str, device: str = "auto") -> str:
        """Refuse (in the parent, and again in :meth:`setup` with the resolved device) a precision the adapter
        would not apply on ``device``; the message says which framework, which device, why, and what to set."""
        if precision in cls.precisions_on(device):
            return precision
        if precision not in PRECISIONS:
            raise ConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        name = cls.name
        where = [d for d in PRECISION_DEVICES if precision in cls.precisions_on(d)]
        if device == "auto" and where:  # runs on one device only: auto might land on the other
            only = where[0]
            other = next(d for d in PRECISION_DEVICES if d != only)
            both = ", ".join(repr(p) for p in cls.precisions_on("auto")) or "(none)"
            raise ConfigError(
                f"{precision!r} ({DESCRIPTIONS[precision]}) is run by the {name} adapter on {_ON[only]} only, not on "
                f"{_ON[other]} ({cls.precision_reason(precision, other)}). Under {setting('device', 'auto')} the "
                f"framework picks the device inside the worker, so the trial could run on {_ON[other]}, where "
                f"{precision!r} would not be applied; {set_setting('device', only)}, or "
                f"{setting('precision', Worded('one of ' + both))} (run on both)"
            )
        if device == "auto":
            fallback = (cls.precisions_on("auto") or ("fp32",))[0]
            raise ConfigError(
                f"{precision!r} is not run by the {name} adapter on any device "
                f"({cls.precision_reason(precision, 'cpu')}), so {precision!r} would not be applied; "
                f"{set_setting('precision', fallback)}, or leave this framework out"
            )
        here = cls.precisions_on(device)
        elsewhere = [d for d in where if d != device]
        instead = set_setting("precision", Worded(" or ".join(repr(p) for p in here)))
        if elsewhere:
            instead += f", or {setting('device', elsewhere[0])} (where it runs {precision!r})"
        raise ConfigError(
            f"{precision!r} is not run by the {name} adapter on {_ON.get(device, device)} "
            f"({cls.precision_reason(precision, device)}), so {precision!r} would not be applied; {instead}"
        )

    @classmethod
    def import_framework(cls) -> Any:
        """Import the framework (in a worker, or in the check of an environment) and return its module. Override
        where the import needs a step first (MXNet 1.9.1 needs ``numpy.bool`` back on NumPy >= 1.24)."""
        import importlib

        return importlib.import_module(cls.import_name)

    @classmethod
    def gpu_build(cls) -> GpuBuild | None:
        """What the installed build can use (its metadata, no import: adapters.builds); None: unknown, assumed GPU."""
        return None

    @classmethod  # noqa: B027 - an optional hook with a do-nothing default
    def validate_device_options(cls, options: Mapping[str, Any], device: str) -> None:
        """Refuse (in the parent) adapter settings that would do nothing on ``device`` (``cpu``, ``gpu``,
        ``auto``): a setting asked for and not applied is refused, never recorded as applied. Default: none."""

    @classmethod
    def worker_env(cls, options: Mapping[str, Any], device: str) -> dict[str, str]:
        """Environment variables the worker must start with for these (validated) settings: for what a
        framework reads when it is imported, before any adapter code runs. Default: none."""
        return {}

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``[adapters.<name>]`` settings in the parent (no framework import); return them resolved."""
        # a default of None stays out: adding a setting must not change the hash of every stored trial
        resolved = {key: values[0] for key, values in cls.options.items() if values[0] is not None}
        for key, value in options.items():
            if key not in cls.options:
                valid = ", ".join(sorted(cls.options)) or "(none)"
                raise ConfigError(f"adapter {cls.name!r} has no setting {key!r}; valid settings: {valid}")
            allowed_types = tuple(v for v in cls.options[key] if isinstance(v, type))
            if value not in cls.options[key] and not (allowed_types and isinstance(value, allowed_types)):
                allowed = ", ".join(f"a {v.__name__}" if isinstance(v, type) else repr(v) for v in cls.options[key])
                raise ConfigError(f"adapter {cls.name!r}: {key} = {value!r} is not one of {allowed}")
            resolved[key] = value
        return resolved

    #: Settings (keys of :attr:`options`) that act on GPU memory only: a CPU trial runs the same without them.
    gpu_only_options: ClassVar[tuple[str, ...]] = ()
    #: Settings that an emulated smaller GPU (``RuntimeConfig.memory_limit_mib``) replaces with its own cap.
    options_replaced_by_memory_limit: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def options_without_effect(cls, options: Mapping[str, Any], device: str, memory_limit_mib: float = 0.0
                               ) -> dict[str, str]:
        """The settings in ``options`` that would change nothing on ``device`` (``cpu`` or ``gpu``, under a cap
        of ``memory_limit_mib`` when > 0), each with why. The max-batch search refuses them, so that no answer
        is stored under a setting that was not applied. From :attr:`gpu_only_options` and
        :attr:`options_replaced_by_memory_limit`; override for anything else."""
        who = cls.label or cls.name
        if device != "gpu":
            return {k: f"{who} applies {k} to GPU memory only; a CPU run is the same without it"
                    for k in options if k in cls.gpu_only_options}
        if memory_limit_mib:
            return {k: f"an emulated smaller GPU (--memory-limit-mib) replaces {who}'s {k} with its own cap; run "
                       "without --memory-limit-mib, on the card you want to measure"
                    for k in options if k in cls.options_replaced_by_memory_limit}
        return {}

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Versions of the framework and its runtime pieces (CUDA, cuDNN where known)."""

    @abstractmethod
    def setup(self, runtime: RuntimeConfig) -> SetupFacts | Mapping[str, Any]:
        """Initialise the framework on the device; return facts about it: a :class:`SetupFacts` (device, GPU name,
        the CPU's denormal mode, the math mode read back as ``math_mode_seen``; anything framework-specific in
        ``extra``). The flat mapping adapters returned before 0.9 is still read, its ``math_mode`` as the read-back.
        """

    def build(self, model: ModelDescription, weights: Sequence[np.ndarray], optimizer: OptimizerSpec) -> None:
        """Build ``model`` with exactly ``weights`` (layouts of :mod:`harness.models`) and the optimizer.

        The default walks the layers and calls one hook per layer type; override it to build otherwise.
        """
        check_weights(model, weights)
        self.begin_model(model)
        feed = WeightFeed(weights)
        self.build_layers(model.layers, tuple(model.input_shape), feed)
        feed.finish()
        self.end_model(model, self.make_optimizer(optimizer))

    def build_layers(self, layers: Sequence[Layer], in_shape: tuple[int, ...], weights: WeightFeed) -> None:
        """Call each layer's hook in order: the template's walk, and how ``layer_residual`` builds its paths."""
        for layer, site in walk_sequence(layers, in_shape):
            hook = getattr(self, layer_hook_name(layer), None)
            if hook is None:
                raise unknown_layer_error(self.name, layer, site)
            hook(layer, site, weights)

    def begin_model(self, model: ModelDescription) -> None:  # noqa: B027 - optional hook with a do-nothing default
        """Start a new model (reset the layer list the hooks append to)."""

    def end_model(self, model: ModelDescription, optimizer: Any) -> None:
        """Assemble the layers the hooks made, place weights, attach ``optimizer`` (from :meth:`make_optimizer`)."""
        raise AdapterError(f"the {self.name} adapter uses the build template but has no end_model(); "
                           "write end_model() or override build() (docs/adapters.md)")

    def make_optimizer(self, spec: OptimizerSpec) -> Any:
        """The framework's optimizer for ``spec``: ``make_sgd`` or ``make_adam``; any other name is refused."""
        hook = OPTIMIZER_HOOKS.get(spec.name)
        if hook is None or not hasattr(self, hook):
            raise unknown_optimizer_error(self.name, spec.name)
        return getattr(self, hook)(spec)

    def resolve_gpu(self, runtime: RuntimeConfig, available: bool, evidence: str, remedy: str = "") -> bool:
        """Whether this trial runs on the GPU; refuses ``device = 'gpu'`` when the framework sees none."""
        return resolve_gpu(runtime.device, available, self.label or self.name, evidence, remedy)

    def build_native(self, factory: str, input_shape: tuple[int, int, int], classes: int,
                     optimizer: OptimizerSpec) -> None:
        """Build the framework's own model from ``factory`` ("module:function", harness.models.native)."""
        raise ConfigError(f"the {self.name} adapter cannot run native models; describe the model with "
                          "harness.models layers, or run it in an adapter that has a native_model setting")

    @abstractmethod
    def param_count(self) -> int:
        """Trainable parameters of the built model, counted by the framework."""

    @abstractmethod
    def get_weights(self) -> list[np.ndarray]:
        """The model's current trainable weights, converted back to :mod:`harness.models` layouts."""

    @abstractmethod
    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        """Move one batch (x: float32 NCHW, y: int64) onto the device, in the framework's layout."""

    def prepare_batch_ahead(self, x: np.ndarray, y: np.ndarray) -> Any:
        """Optional: :meth:`prepare_batch` on the prefetch thread while the previous :meth:`train_step` runs, where
        thread-safe; returns a batch ready for ``train_step``. Not overridden: only gathering is ahead (adapters.md)."""
        return self.prepare_batch(x, y)

    @abstractmethod
    def train_step(self, batch: Any) -> None:
        """One forward, backward and optimizer update; returns only once the device is idle."""

    def train_step_queued(self, batch: Any) -> None:
        """Optional (capability ``queued_steps``), for a framework whose engine runs asynchronously (MXNet): what
        :meth:`train_step` does, returning once the step is queued, before its work is done. The worker then
        queues a few steps and reads its clock after :meth:`wait_steps`, so a step's time is its window's mean
        (docs/adapters.md, "Queued steps"); a failure may surface in :meth:`wait_steps` instead."""
        raise NotImplementedError(f"adapter {self.name!r} does not queue steps")

    def wait_steps(self) -> None:
        """Optional (capability ``queued_steps``): return once every step :meth:`train_step_queued` queued is done,
        raising the error of one that failed (an out-of-memory error included)."""
        raise NotImplementedError(f"adapter {self.name!r} does not queue steps")

    @abstractmethod
    def predict(self, batch: Any) -> np.ndarray:
        """Logits (N, classes) as NumPy, in inference mode (BN uses running statistics)."""

    @abstractmethod
    def reset_memory_stats(self) -> None:
        """Start a new peak-memory window."""

    @abstractmethod
    def memory_stats(self) -> MemoryStats:
        """Peak memory since the last reset, as the framework reports it (None where it cannot)."""

    @abstractmethod
    def is_oom(self, exc: BaseException) -> bool:
        """Whether ``exc`` is this framework's out-of-memory error."""

    def batchnorm_state(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each BatchNorm's (running mean, running variance), in layer order (checked by the contract suite)."""
        raise AdapterError(f"the {self.name} adapter does not implement batchnorm_state(); return each "
                           "BatchNorm's (running_mean, running_var) as NumPy arrays, in layer order")

    @classmethod
    def oom_examples(cls) -> tuple[list[BaseException], list[BaseException]]:
        """(out-of-memory, other) exceptions as the framework really raises them, for the contract suite.

        Override it: the suite fails an adapter that gives none (docs/adapters.md, "Out of memory").
        Import the framework inside; the suite calls this in a worker-like subprocess only.
        """
        return [MemoryError("cannot allocate")], [ValueError("shapes (3,) and (4,) not aligned")]

    def evaluate(self, x: np.ndarray, y: np.ndarray, batch_size: int) -> EvalResult:
        """Mean loss and accuracy over (x, y); loss and accuracy are computed the same way for all."""
        loss_sum, correct = 0.0, 0
        for start in range(0, len(x), batch_size):
            xb, yb = x[start : start + batch_size], y[start : start + batch_size]
            logits = self.predict(self.prepare_batch(xb, yb))
            batch_loss, batch_correct = softmax_cross_entropy(logits, yb)
            loss_sum += batch_loss
            correct += batch_correct
        n = len(x)
        loss = loss_sum / n if n else math.nan
        return EvalResult(loss=loss, accuracy=correct / n if n else math.nan, samples=n)

    def accumulate_gradients(self, batch: Any, weight: float) -> None:
        """Forward and backward on ``batch``; add ``weight`` x the gradient of its mean loss to the accumulated
        gradients, without updating the weights. Returns once the device is idle."""
        raise NotImplementedError(f"adapter {self.name!r} does not implement gradient accumulation")

    def apply_accumulated(self) -> None:
        """One optimizer update with the accumulated gradients, then clear them. Returns once the device is idle."""
        raise NotImplementedError(f"adapter {self.name!r} does not implement gradient accumulation")

    def set_learning_rate(self, lr: float) -> None:
        """Optional (capability ``lr_change``): train the next steps at ``lr``, keeping everything else (weights,
        optimizer state such as momentum and Adam's moments and step count, BatchNorm statistics). With momentum the
        new rate applies to the whole momentum at once, as PyTorch's buffer ``b = m b + g; w -= lr b`` does: a
        velocity that holds the rate (Keras', MXNet's ``v = m v - lr g``) is scaled by new/old. The worker calls it
        off the training clock where a batch-size schedule (``batch_schedule``, issue 52) moves to a size whose
        ``lr_policy`` rate differs; a new batch *shape* needs nothing: every step takes the batch it is given (an
        adapter that compiles per shape compiles the new one in :meth:`prepare_batch`, as for an epoch's short last
        batch). Without it a schedule whose rate changes is refused in the parent."""
        raise NotImplementedError(f"adapter {self.name!r} cannot change its learning rate")

    def flat_gradient(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The gradient of the mean loss over the batch (x: float32 NCHW, y: int64) at the current weights, as
        one float64 array: every trainable weight's gradient in :meth:`get_weights`' order and layouts, flattened
        C-order and concatenated (so that adapters agree element for element). BatchNorm normalises with the
        batch's statistics (training mode). It must change nothing: not the weights, not the optimizer state
        (no update, no momentum), not BatchNorm's running statistics (restore them, or do not let them move).
        Optional: the gradient-noise measurement (``gradient_noise``, docs/noise.md) needs it, and is refused in
        the parent for an adapter without it."""
        raise NotImplementedError(f"adapter {self.name!r} does not implement flat_gradient()")

    def estimate_step_memory(self, batch: int) -> int | None:
        """The framework's own estimate of one training step's peak memory at ``batch`` samples, in bytes, without
        running the step (nothing of the batch's size is allocated): parameters, gradients, optimizer state,
        activations and temporaries, on the trial's device. Called after :meth:`build` (and after the trial's own
        steps, so optimizer state exists), in the worker only. None: no estimate at this size. Optional
        (capability ``step_memory_estimate``): the max-batch search predicts its first size near the boundary from it
        and proves it with probes (docs/maxbatch.md, issue 41); without it the search fits its line from probes only.
        An estimate that is wrong or raises changes the number of probes, never the answer."""
        return None

    def precision_seen(self) -> PrecisionSeen | None:
        """What the latest training forward pass computed in, observed (see :class:`PrecisionSeen`).

        None: not reported, which the worker accepts for fp32 only; an adapter that runs amp or bf16 must
        report it, or its trials of those precisions fail (harness.config.precision.check_observed).
        """
        return None

    def close(self) -> None:  # noqa: B027 - optional hook with a do-nothing default
        """Release what the framework holds (optional)."""


@dataclass(frozen=True)
class Capability:
    """One optional part of the adapter contract, present when the adapter overrides its hooks.

    ``required``: every built-in adapter must have it (the contract suite fails a built-in without it); the
    others are features an adapter may lack, which the parent then refuses (``accumulate_steps > 1``, a
    precision, a native model) and the suite reports as "not supported" for any adapter.
    """

    name: str
    hooks: tuple[str, ...]
    what: str
    required: bool = True
    #: presence decided otherwise than by overriding (a declaration such as ``precisions``); None: by the hooks
    present: Callable[[type[Adapter]], bool] | None = None


def _declares_mixed_precision(cls: type[Adapter]) -> bool:
    return any(p != "fp32" for device in PRECISION_DEVICES for p in cls.precisions_on(device))


def _layer_capability(layer_type: type) -> Capability:
    hook = layer_hook_name(layer_type)
    return Capability(hook, (hook,), f"builds {layer_type.__name__} layers (a build-template hook)")


#: Every optional capability, in the order ``batchscope adapters`` lists them. To add one: a row here, then the
#: contract checks that need it name it (tests/contract/checks.py), and the CHANGELOG says so under "For plugin
#: authors".
CAPABILITIES: tuple[Capability, ...] = (
    *(_layer_capability(t) for t in LAYER_TYPES.values()),
    Capability("batchnorm_state", ("batchnorm_state",), "reports BatchNorm running statistics"),
    Capability("oom_examples", ("oom_examples",), "supplies the framework's real out-of-memory errors"),
    Capability("accumulation", ("accumulate_gradients", "apply_accumulated"),
               "gradient accumulation (accumulate_steps > 1)", required=False),
    Capability("precisions", ("precisions", "device_precisions"), "a precision besides fp32 (bf16, amp)",
               required=False, present=_declares_mixed_precision),
    Capability("math_modes", ("math_modes",), "applies and reads back a GPU math mode (math_mode = ieee / tf32)",
               required=False, present=lambda cls: bool(cls.math_modes)),
    Capability("native_models", ("build_native",), "the framework's own models (native_model)", required=False),
    # required of the built-ins (the contract suite fails one without it); a plugin without it is told
    # "unsupported" and gradient_noise is refused for it in the parent
    Capability("flat_gradient", ("flat_gradient",), "the gradient as one flat array (gradient noise scale)"),
    Capability("prepare_ahead", ("prepare_batch_ahead",), "prepares batches on the prefetch thread", required=False),
    # issue 40: an asynchronous engine's step is timed over a window of queued steps, not drained after every one
    Capability("queued_steps", ("train_step_queued", "wait_steps"),
               "queues training steps without waiting for each (the step clock is read over windows of steps)",
               required=False),
    # issue 41: the max-batch search predicts its first size near the boundary from this, then proves it by probing
    Capability("step_memory_estimate", ("estimate_step_memory",),
               "estimates a training step's peak memory without running it (the max-batch search's first guess)",
               required=False),
    # issue 52: a batch-size schedule whose lr_policy rate changes with the size; the contract's batch_change case
    Capability("lr_change", ("set_learning_rate",),
               "changes the learning rate mid-training, state kept (a batch-size schedule under lr_policy)"),
    Capability("own_build", ("build",), "builds models in its own build(): which layers it builds is found by "
               "trying, not declared by hooks", required=False),
)
_BY_NAME = {c.name: c for c in CAPABILITIES}


def _overrides(cls: type, hook: str) -> bool:
    """Whether ``cls`` defines ``hook`` differently from :class:`Adapter` (which may not define it at all)."""
    mine = getattr(cls, hook, None)
    base = getattr(Adapter, hook, None)
    if base is None:
        return mine is not None
    return getattr(mine, "__func__", mine) is not getattr(base, "__func__", base)  # classmethods compare functions


def capabilities(cls: type[Adapter]) -> tuple[str, ...]:
    """The names of the :data:`CAPABILITIES` ``cls`` has, in table order (no framework is imported)."""
    return tuple(c.name for c in CAPABILITIES
                 if (c.present(cls) if c.present is not None else all(_overrides(cls, h) for h in c.hooks)))


def missing_capabilities(cls: type[Adapter], needed: Sequence[str]) -> tuple[str, ...]:
    """Which of ``needed`` (capability names) ``cls`` lacks; an unknown name is an error in the caller."""
    unknown = [n for n in needed if n not in _BY_NAME]
    if unknown:
        raise ValueError(f"unknown capabilities {unknown}; known: {', '.join(_BY_NAME)}")
    have = set(capabilities(cls))
    return tuple(n for n in needed if n not in have)
