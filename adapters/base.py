"""The adapter contract: what every framework adapter provides, in framework-free types.

An adapter runs inside a worker process (never in the parent) and owns one framework there.
The worker calls, in order: :meth:`Adapter.versions`, :meth:`Adapter.setup`, :meth:`Adapter.build`,
then :meth:`Adapter.prepare_batch` / :meth:`Adapter.train_step` many times, :meth:`Adapter.evaluate`,
and :meth:`Adapter.memory_stats`. Exceptions escape to the worker, which asks :meth:`Adapter.is_oom`.

Adapter modules import their framework inside methods only: importing ``adapters.<name>`` must stay
cheap, because the parent imports it to list adapters and to validate their options.

Third-party adapters subclass :class:`Adapter`, register under the ``batchscope.adapters`` entry-point
group, and run ``tests/contract`` against themselves (see README, "Adding a framework adapter").
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from harness.config.trial import OptimizerSpec  # re-exported: plugins import it from here
from harness.errors import ConfigError
from harness.models import ModelDescription


@dataclass(frozen=True)
class RuntimeConfig:
    """Where and how an adapter runs. ``device`` is already resolved: ``auto`` never reaches here."""

    device: Literal["cpu", "gpu", "auto"] = "cpu"
    threads: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    memory_limit_mib: float | None = None  # emulate a smaller GPU (max-batch search)
    precision: Literal["fp32", "amp"] = "fp32"
    #: "flush": denormal floats are flushed to zero on the CPU (the adapter must make it so, or raise
    #: ConfigError); "framework-default": the framework's own behaviour. Either way setup() reports what
    #: the CPU does in its info under ``cpu_denormals`` (flush | keep | unknown).
    denormals: Literal["flush", "framework-default"] = "framework-default"


@dataclass(frozen=True)
class MemoryStats:
    """Peak memory as the framework itself sees it; ``source`` names the API that gave it."""

    peak_mib: float | None
    source: str
    reserved_mib: float | None = None


@dataclass(frozen=True)
class EvalResult:
    """Mean cross-entropy and top-1 accuracy in [0, 1] over the evaluated samples."""

    loss: float
    accuracy: float
    samples: int


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
    #: Module to import to check the framework is installed (``torch``).
    import_name: ClassVar[str]
    #: Adapter settings accepted under ``[adapters.<name>]`` (besides ``python``), with their allowed values.
    #: A type among the values (``(None, str)``) accepts any value of that type; a default of None is left out.
    options: ClassVar[Mapping[str, tuple[Any, ...]]] = {}
    #: Precisions the adapter really runs; the parent refuses any other before a trial starts.
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    #: Why the other precisions are not run (shown when one is refused).
    precision_note: ClassVar[str] = "mixed precision is not implemented in this adapter"
    #: Substrings of stderr that mean "out of memory" when the process died without a Python exception.
    oom_stderr_patterns: ClassVar[tuple[str, ...]] = ()

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

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Versions of the framework and its runtime pieces (CUDA, cuDNN where known)."""

    @abstractmethod
    def setup(self, runtime: RuntimeConfig) -> dict[str, Any]:
        """Initialise the framework on the device; return facts about it (device name, memory mode...)."""

    @abstractmethod
    def build(self, model: ModelDescription, weights: Sequence[np.ndarray], optimizer: OptimizerSpec) -> None:
        """Build ``model`` with exactly ``weights`` (layouts of :mod:`harness.models`) and the optimizer."""

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

    @abstractmethod
    def train_step(self, batch: Any) -> None:
        """One forward, backward and optimizer update; returns only once the device is idle."""

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

    def close(self) -> None:  # noqa: B027 - optional hook with a do-nothing default
        """Release what the framework holds (optional)."""


def is_generic_oom(exc: BaseException) -> bool:
    """Out-of-memory as any Python process sees it (NumPy/host allocations under an OS limit)."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return any(p in text for p in ("out of memory", "can't allocate memory", "cannot allocate memory",
                                   "std::bad_alloc", "failed to allocate"))
