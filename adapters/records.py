"""What an adapter is given and gives back: plain records of the adapter contract (:mod:`adapters.base`), and the
out-of-memory texts every adapter's ``is_oom`` ends with. Every name here is importable from ``adapters.base``, the
path plugins use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal


@dataclass(frozen=True)
class RuntimeConfig:
    """Where and how an adapter runs. ``device`` is already resolved: ``auto`` never reaches here."""

    device: Literal["cpu", "gpu", "auto"] = "cpu"
    threads: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    memory_limit_mib: float | None = None  # emulate a smaller GPU (max-batch search)
    #: fp32, amp (float16 + loss scaling) or bf16 (harness.config.precision); the parent has checked it against
    #: the adapter's declaration for the device, and setup() checks it again for the device it resolved
    precision: Literal["fp32", "amp", "bf16"] = "fp32"
    #: "flush": denormal floats are flushed to zero on the CPU (the adapter must make it so, or raise
    #: ConfigError); "framework-default": the framework's own behaviour. Either way setup() reports what
    #: the CPU does in its info under ``cpu_denormals`` (flush | keep | unknown).
    denormals: Literal["flush", "framework-default"] = "framework-default"
    #: ieee | tf32 | framework-default (harness.config.precision): setup() applies it where the adapter declares it
    #: (:attr:`Adapter.math_modes`) and reports what the framework then does under ``math_mode`` in its info
    math_mode: Literal["ieee", "tf32", "framework-default"] = "framework-default"
    #: the sweep's persistent compilation cache (None: ``compile_cache = false``); ignored where nothing compiles
    compile_cache_dir: str | None = None
    #: on an emulated card (``memory_limit_mib``), the CUDA context an earlier probe of the same max-batch search
    #: measured (MiB), for adapters that must set their cap before their own context exists (TensorFlow, JAX:
    #: :func:`adapters.gpumem.hinted_context`); None: not measured yet. An adapter that measures its own context
    #: once it exists (PyTorch) ignores it
    context_hint_mib: float | None = None


@dataclass(frozen=True)
class SetupFacts:
    """What an adapter's ``setup()`` reported about where it runs (``adapters.base.Adapter.setup`` returns one).

    The facts every adapter may give are fields; framework-specific ones (PyTorch's ``cuda_alloc_conf``, a memory
    mode) stay in ``extra``. :meth:`to_dict` is the flat mapping stored as the trial's ``device_json``.
    """

    device: str | None = None  # where the trial ran, as the framework names it ("cpu", "cuda:0", "gpu(0)")
    gpu_name: str | None = None
    gpu_total_mib: float | None = None
    cpu_denormals: str | None = None  # flush | keep | unknown, where the adapter tells
    #: what float32 convolutions and matmuls compute in, read back from the framework (harness.config.precision
    #: MATH_MODES_SEEN: ieee | tf32 | conv-tf32 | matmul-tf32 | n/a | unknown); None: the adapter does not tell.
    #: What was asked for is the trial's ``math_mode``.
    math_mode_seen: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, info: SetupFacts | Mapping[str, Any] | None) -> SetupFacts:
        """What ``setup()`` returned: a record, or (a plugin written before 0.9) the flat mapping, where the read-back
        math mode was called ``math_mode``."""
        return info if isinstance(info, SetupFacts) else cls.from_dict(info)

    @classmethod
    def from_dict(cls, info: Mapping[str, Any] | None) -> SetupFacts:
        """From the flat mapping (:meth:`to_dict`'s, or an older adapter's with ``math_mode`` for the read-back)."""
        info = dict(info or {})
        if "math_mode" in info and "math_mode_seen" not in info:
            info["math_mode_seen"] = info.pop("math_mode")
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: info.pop(k) for k in list(info) if k in known}, extra=info)

    def to_dict(self) -> dict[str, Any]:
        """The flat mapping: the known facts that are set, and the extra ones."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**{k: v for k, v in out.items() if v is not None}, **self.extra}

    @property
    def on_gpu(self) -> bool:
        """Whether setup put the trial on a GPU: the adapter's math-mode read-back says so (``n/a``: not on one);
        for an adapter that does not read one back, a GPU name or a device called cuda/gpu/rocm."""
        if self.math_mode_seen is not None:
            return self.math_mode_seen != "n/a"
        device = str(self.device or "").lower()
        return bool(self.gpu_name) or any(word in device for word in ("cuda", "gpu", "rocm"))


@dataclass(frozen=True)
class MemoryStats:
    """Peak memory as the framework itself sees it; ``source`` names the API that gave it.

    ``reserved_mib``: what the allocator's pool held at its peak, where it tells that apart from ``peak_mib``
    (allocated). ``context_mib``: what the process holds on the GPU outside the allocator at the end of the window
    (the CUDA context, kernels loaded, library handles: adapters/gpumem.py), where the adapter measures it; the
    max-batch search adds it to the allocator's figure, since a card of the budget's size holds it too (issue 31).
    """

    peak_mib: float | None
    source: str
    reserved_mib: float | None = None
    context_mib: float | None = None


@dataclass(frozen=True)
class PrecisionSeen:
    """What a training forward pass really computed in, as the adapter observed it (not the request).

    ``compute_dtype``: the dtype of the last layer's output before any cast back to float32 ("bfloat16"
    under bf16 autocast); ``loss_scale``: the loss scale of the last update where float16 loss scaling runs,
    None where none does. The worker fails a trial whose observation does not match the precision asked for.
    """

    compute_dtype: str
    loss_scale: float | None = None


@dataclass(frozen=True)
class EvalResult:
    """Mean cross-entropy and top-1 accuracy in [0, 1] over the evaluated samples."""

    loss: float
    accuracy: float
    samples: int


def is_generic_oom(exc: BaseException) -> bool:
    """Out-of-memory as any Python process sees it (NumPy/host allocations under an OS limit)."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return any(p in text for p in GENERIC_OOM_TEXTS)


#: what an out-of-memory error says, whichever library raised it (lower case). cuBLAS and cuDNN failing to allocate
#: their workspace, and XLA's RESOURCE_EXHAUSTED status, are out of memory too: classified as errors they were
#: retried and aborted a max-batch search instead of bounding it (issue 31, item 5)
GENERIC_OOM_TEXTS = ("out of memory", "can't allocate memory", "cannot allocate memory", "std::bad_alloc",
                     "failed to allocate", "cublas_status_alloc_failed", "cudnn_status_alloc_failed",
                     "resource_exhausted", "cuda_error_out_of_memory")
