"""PyTorch adapter: CPU, and CUDA when present. ``torch`` is imported inside methods only.

Precision (docs/precision.md): ``bf16`` runs the forward pass under ``torch.autocast(device, torch.bfloat16)``
on the CPU and on CUDA; ``amp`` under ``torch.autocast("cuda", torch.float16)`` with a ``torch.amp.GradScaler``,
on CUDA only. The weights and the optimizer stay float32; the loss is computed in float32 from the logits
cast back. The CUDA caching allocator's settings are adapter settings (``[adapters.pytorch]``), handed to the
worker as ``PYTORCH_CUDA_ALLOC_CONF`` before torch is imported (:meth:`PyTorchAdapter.worker_env`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from adapters import fpenv, gpumem
from adapters.base import (
    API_VERSION,
    Adapter,
    MemoryStats,
    OptimizerSpec,
    PrecisionSeen,
    RuntimeConfig,
    SetupFacts,
    check_fits,
    is_generic_oom,
)
from adapters.builds import GpuBuild
from adapters.pytorch import build, mathmode
from adapters.pytorch.gpu import ALLOC_CONF_VARS, ALLOCATOR_SETTINGS, MIN_SPLIT_MB, alloc_conf
from adapters.pytorch.layers import TorchLayers
from harness.config.precision import set_setting, setting
from harness.errors import ConfigError
from harness.models import ModelDescription

MIB = 1024.0 * 1024.0

class PyTorchAdapter(TorchLayers, Adapter):
    """PyTorch, eager mode, NCHW."""

    name = "pytorch"
    label = "PyTorch"
    distributions = ("torch",)
    import_name = "torch"
    api_version = API_VERSION

    @classmethod
    def gpu_build(cls) -> GpuBuild | None:
        """The installed build's device, from its metadata (:func:`adapters.pytorch.build.gpu_build`)."""
        return build.gpu_build()
    oom_stderr_patterns = ("CUDA out of memory", "DefaultCPUAllocator: can't allocate memory")
    #: native_model: "package.module:function" returning a torch.nn.Module (harness.models.native)
    options = {"native_model": (None, str)}
    supports_accumulation = True
    #: the CUDA allocator's settings do nothing on the CPU (maxbatch's "what helps" refuses them there too)
    gpu_only_options = ALLOCATOR_SETTINGS
    precisions = ("fp32", "amp", "bf16")
    device_precisions = {"cpu": ("fp32", "bf16"), "gpu": ("fp32", "amp", "bf16")}
    math_modes = ("ieee", "tf32")  # cuDNN's convolutions and cuBLAS's matmuls (adapters/pytorch/mathmode.py)
    precision_notes = {
        ("amp", "cpu"): "float16 autocast with a GradScaler is PyTorch's CUDA recipe; on the CPU its autocast "
                        "computes in bfloat16, which is precision = 'bf16'",
    }

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """A native model and the CUDA caching allocator's settings; none is set unless asked for (so it is not
        in the trial hash)."""
        resolved: dict[str, Any] = {}
        for key, value in options.items():
            if key == "native_model":  # "package.module:function" returning a torch.nn.Module (docs/models.md)
                if not isinstance(value, str):
                    raise ConfigError(f"adapter 'pytorch': native_model = {value!r} is not a \"module:function\" "
                                      "string")
                resolved[key] = value
                continue
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if key == "expandable_segments" and not isinstance(value, bool):
                raise ConfigError(f"adapter 'pytorch': expandable_segments = {value!r} is not true or false")
            if key == "max_split_size_mb" and not (number and value == int(value) and value >= MIN_SPLIT_MB):
                raise ConfigError(f"adapter 'pytorch': max_split_size_mb = {value!r} must be a whole number of MiB "
                                  f">= {MIN_SPLIT_MB} (PyTorch refuses smaller: it never splits blocks below 20 MiB)")
            if key == "garbage_collection_threshold" and not (number and 0 < value < 1):
                raise ConfigError(f"adapter 'pytorch': garbage_collection_threshold = {value!r} must be a fraction "
                                  "of the GPU memory in (0, 1), e.g. 0.8")
            if key not in ALLOCATOR_SETTINGS:
                raise ConfigError(f"adapter 'pytorch' has no setting {key!r}; valid settings: native_model, "
                                  f"{', '.join(ALLOCATOR_SETTINGS)} (the CUDA caching allocator's, docs/precision.md)")
            resolved[key] = int(value) if key == "max_split_size_mb" else value
        return resolved

    @classmethod
    def validate_device_options(cls, options: Mapping[str, Any], device: str) -> None:
        """The allocator settings act on a CUDA GPU only: refused where the trial may run on the CPU."""
        asked = [k for k in ALLOCATOR_SETTINGS if k in options]
        if not asked or device == "gpu":
            return
        where = ("on the CPU they would not be applied (torch's CPU tensors come from the C library's malloc)"
                 if device == "cpu" else f"under {setting('device', 'auto')} the trial may run on the CPU (the "
                 "framework decides in the worker), where they would not be applied")
        raise ConfigError(f"{', '.join(asked)}: PyTorch's CUDA caching-allocator settings act on a CUDA GPU only; "
                          f"{where}; {set_setting('device', 'gpu')}, or remove them from [adapters.pytorch]")

    @classmethod
    def worker_env(cls, options: Mapping[str, Any], device: str) -> dict[str, str]:
        """``PYTORCH_CUDA_ALLOC_CONF`` (and its newer name) for the allocator settings: torch reads it at import."""
        conf = alloc_conf(options)
        return dict.fromkeys(ALLOC_CONF_VARS, conf) if conf else {}

    def __init__(self) -> None:
        self.torch: Any = None
        self.device: Any = None
        self.model: Any = None
        self.optimizer: Any = None
        self.loss_fn: Any = None
        self.cuda = False
        self._copy_stream: Any = None  # prepare_batch_ahead's CUDA stream
        self._accumulating = False  # gradients of an unfinished accumulated update are held in .grad
        self.precision = "fp32"
        self._autocast_dtype: Any = None  # torch.float16 (amp) or torch.bfloat16 (bf16); None: fp32
        self.scaler: Any = None  # torch.amp.GradScaler under amp
        self._seen_dtype: Any = None  # dtype of the logits of the latest training forward pass
        self.model_input_shape: tuple[int, ...] = ()  # one sample's shape (C, H, W): estimate_step_memory's batch

    def versions(self) -> dict[str, str]:
        import torch

        out: dict[str, str] = {"torch": str(torch.__version__)}
        if torch.version.cuda:
            out["cuda"] = str(torch.version.cuda)
        if torch.backends.cudnn.is_available():
            out["cudnn"] = str(torch.backends.cudnn.version())
        return out

    def setup(self, runtime: RuntimeConfig) -> SetupFacts:
        import torch

        self.torch = torch
        if runtime.threads:
            torch.set_num_threads(runtime.threads)
        cpu_denormals = fpenv.cpu_denormals_state()
        if runtime.denormals == "flush":
            # torch's own switch sets FTZ/DAZ on this thread and is what its docs name; the worker has also
            # set them before torch was imported, so the intra-op pool's threads inherit them
            if not torch.set_flush_denormal(True):
                raise ConfigError("PyTorch cannot flush denormals on this CPU (torch.set_flush_denormal(True) "
                                  "returned False: no SSE3/DAZ); use denormals = 'framework-default'")
            cpu_denormals = "flush"
        # an emulated card counts the CUDA context: the GPUs' used memory before this worker creates one is the
        # fallback baseline where NVML does not list the process (adapters/gpumem.py)
        before_mib = gpumem.devices_used_mib() if runtime.device != "cpu" and runtime.memory_limit_mib else None
        self.cuda = self.resolve_gpu(runtime, torch.cuda.is_available(), "torch.cuda.is_available() is False")
        self.device = torch.device("cuda:0" if self.cuda else "cpu")
        info: dict[str, Any] = {"device": str(self.device), "threads": torch.get_num_threads(),
                                "cpu_denormals": cpu_denormals}
        info.update(self._setup_precision(runtime.precision))
        if self.cuda:  # a CPU trial runs exactly as before math modes (true float32: recorded n/a)
            mathmode.apply(torch, runtime.math_mode)
        info["math_mode_seen"] = mathmode.read(torch, self.cuda)
        info.update(self._check_allocator_settings(runtime.options))
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            info["gpu_name"] = props.name
            info["gpu_total_mib"] = props.total_memory / MIB
            if runtime.memory_limit_mib:
                info.update(self._cap_memory(float(runtime.memory_limit_mib), props.total_memory / MIB, before_mib))
        return SetupFacts.from_dict(info)

    def _cap_memory(self, limit_mib: float, total_mib: float, before_mib: float | None) -> dict[str, Any]:
        """Emulate a card of ``limit_mib``: the caching allocator may hold the card less the CUDA context this worker
        holds (measured once the context exists: adapters/gpumem.py), as on a real card of that size (issue 31)."""
        torch = self.torch
        torch.zeros(1, device=self.device)  # the context exists from here on
        torch.cuda.synchronize()
        context = gpumem.context_mib(torch.cuda.memory_reserved() / MIB, before_mib)
        torch.cuda.empty_cache()
        cap_mib = gpumem.emulated_cap_mib(limit_mib, context)
        fraction = min(1.0, cap_mib / total_mib)
        torch.cuda.set_per_process_memory_fraction(fraction, 0)
        return {"memory_fraction": fraction, "memory_cap_mib": cap_mib, "cuda_context_setup_mib": context.mib,
                "cuda_context_source": context.source}

    def _setup_precision(self, precision: str) -> dict[str, Any]:
        """Autocast's dtype and the loss scaler for ``precision`` on the resolved device (checked again here:
        the parent checked the experiment's device, which may have been ``auto``)."""
        torch = self.torch
        self.validate_precision(precision, "gpu" if self.cuda else "cpu")
        self.precision = precision
        if precision == "bf16" and self.cuda and not torch.cuda.is_bf16_supported():
            raise ConfigError(f"precision = 'bf16' needs a GPU with bfloat16 units (Ampere or newer); "
                              f"{torch.cuda.get_device_name(0)} has none (torch.cuda.is_bf16_supported() is False): "
                              "use precision = 'amp' (float16) or 'fp32' on it")
        self._autocast_dtype = {"amp": torch.float16, "bf16": torch.bfloat16}.get(precision)
        if precision == "amp":
            self.scaler = torch.amp.GradScaler("cuda")
        out: dict[str, Any] = {"precision": precision}
        if self._autocast_dtype is not None:
            out["autocast"] = f"{self.device.type}:{str(self._autocast_dtype).removeprefix('torch.')}"
        return out

    def _check_allocator_settings(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The allocator settings must have reached torch: in the environment it started with, on CUDA."""
        conf = alloc_conf(options)
        if not conf:
            return {}
        if not self.cuda:
            raise ConfigError(f"PyTorch's CUDA allocator settings ({conf}) do nothing on the CPU; "
                              "use device = 'gpu', or remove them from [adapters.pytorch]")
        wrong = {var: os.environ.get(var) for var in ALLOC_CONF_VARS if os.environ.get(var) != conf}
        if wrong:
            raise ConfigError(f"the allocator settings {conf!r} were not in this worker's environment when torch "
                              f"was imported ({wrong}): torch reads them at import, so they would not apply. "
                              "Start the worker with PyTorchAdapter.worker_env(options, device) in its environment")
        return {"cuda_alloc_conf": conf}

    def _autocast(self) -> Any:
        """The forward pass's autocast region, or nothing under fp32."""
        if self._autocast_dtype is None:
            return contextlib.nullcontext()
        return self.torch.autocast(device_type=self.device.type, dtype=self._autocast_dtype)

    def _forward_loss(self, x: Any, y: Any) -> Any:
        """Forward under the precision's autocast; the loss in float32 from the logits cast back (a stable
        softmax). Records the logits' dtype: what the forward pass really computed in."""
        with self._autocast():
            logits = self.model(x)
        self._seen_dtype = logits.dtype
        return self.loss_fn(logits.float(), y)

    def precision_seen(self) -> PrecisionSeen | None:
        if self._seen_dtype is None:
            return None
        scale = float(self.scaler.get_scale()) if self.scaler is not None else None
        return PrecisionSeen(str(self._seen_dtype).removeprefix("torch."), scale)

    def make_sgd(self, spec: OptimizerSpec) -> Any:
        return lambda params: self.torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum)

    def make_adam(self, spec: OptimizerSpec) -> Any:
        return lambda params: self.torch.optim.Adam(params, lr=spec.lr, betas=spec.adam_betas, eps=spec.adam_eps)

    def end_model(self, model: ModelDescription, optimizer: Any) -> None:
        torch = self.torch
        net = torch.nn.Sequential(*self._modules)
        with torch.no_grad():
            for i, (tensor, array) in enumerate(self._params):
                check_fits(array.shape, tensor.shape, f"weight {i}")
                tensor.copy_(torch.from_numpy(np.ascontiguousarray(array)))
        self._order = [t for t, _ in self._params]
        self._finish(net, optimizer)

    def build_native(self, factory: str, input_shape: tuple[int, int, int], classes: int,
                     optimizer: OptimizerSpec) -> None:
        from harness.models.native import load_factory

        net = load_factory(factory)(tuple(input_shape), classes)
        if not isinstance(net, self.torch.nn.Module):
            raise ConfigError(f"native model {factory!r} returned a {type(net).__qualname__}, not a torch.nn.Module")
        with self.torch.no_grad():  # a wrong output shape is the user's to fix: say so before any step
            out = net.eval()(self.torch.zeros((2, *input_shape)))
        if tuple(out.shape) != (2, classes):
            raise ConfigError(f"native model {factory!r} gives logits of shape {tuple(out.shape)} for a batch of 2 "
                              f"inputs {tuple(input_shape)}; it must give (2, {classes})")
        self.model_input_shape = tuple(input_shape)
        self._order, self._bn = [], []  # no canonical weight layout: get_weights() has nothing to compare
        self._finish(net, self.make_optimizer(optimizer))

    def _finish(self, net: Any, optimizer: Any) -> None:
        """Move ``net`` to the device, attach ``optimizer`` (from :meth:`make_optimizer`) and the loss."""
        self.model = net.to(self.device)
        self.model.train()
        self.optimizer = optimizer(self.model.parameters())  # torch optimizers bind to the parameters
        self.loss_fn = self.torch.nn.CrossEntropyLoss()

    def param_count(self) -> int:
        return int(sum(p.numel() for p in self.model.parameters() if p.requires_grad))

    def get_weights(self) -> list[np.ndarray]:
        out = []
        for tensor in self._order:
            array = tensor.detach().cpu().numpy()
            out.append(array.T.copy() if array.ndim == 2 else array.copy())
        return out

    def batchnorm_state(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(bn.running_mean.detach().cpu().numpy().copy(), bn.running_var.detach().cpu().numpy().copy())
                for bn in self._bn]

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        torch = self.torch
        xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))
        if self.cuda:
            xt, yt = xt.to(self.device, non_blocking=True), yt.to(self.device, non_blocking=True)
            torch.cuda.synchronize()
        return xt, yt

    def prepare_batch_ahead(self, x: np.ndarray, y: np.ndarray) -> Any:
        """On the prefetch thread; on a GPU pinned, non-blocking, on its own stream (train_step syncs the device)."""
        if not self.cuda:
            return self.prepare_batch(x, y)  # from_numpy touches no framework state
        torch = self.torch
        self._copy_stream = stream = self._copy_stream or torch.cuda.Stream(device=self.device)
        with torch.cuda.stream(stream):
            batch = tuple(torch.from_numpy(np.ascontiguousarray(a, dtype=t)).pin_memory().to(self.device,
                          non_blocking=True) for a, t in ((x, np.float32), (y, np.int64)))
        stream.synchronize()  # this stream only: the step on the default stream goes on
        return batch

    def train_step(self, batch: Any) -> None:
        x, y = batch
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._forward_loss(x, y)
        if self.scaler is not None:  # amp: scaled backward; step() unscales and skips a step with inf/nan
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        if self.cuda:
            self.torch.cuda.synchronize()  # the clock is read after this: the GPU must be idle

    def set_learning_rate(self, lr: float) -> None:
        for group in self.optimizer.param_groups:  # the optimizer's state (momentum, Adam's moments) is kept
            group["lr"] = lr

    def accumulate_gradients(self, batch: Any, weight: float) -> None:
        x, y = batch
        if not self._accumulating:
            self.optimizer.zero_grad(set_to_none=True)
            self._accumulating = True
        # backward() adds into .grad: the weighted mean losses sum to the mean over the whole update. Under amp
        # each micro-batch's loss is scaled by the same factor (it changes only in update()), so the sum is too
        loss = self._forward_loss(x, y) * weight
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        if self.cuda:
            self.torch.cuda.synchronize()

    def apply_accumulated(self) -> None:
        if self.scaler is not None:  # PyTorch's AMP recipe for accumulation: step and update once per update
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self._accumulating = False
        if self.cuda:
            self.torch.cuda.synchronize()

    def flat_gradient(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The mean loss's gradient, through ``torch.autograd.grad`` (``.grad`` and the optimizer are left alone);
        BatchNorm normalises with the batch's statistics, its running ones are restored afterwards."""
        torch = self.torch
        xt, yt = self.prepare_batch(x, y)
        params = self._order or [p for p in self.model.parameters() if p.requires_grad]
        saved = [b.detach().clone() for b in self.model.buffers()]
        try:
            loss = self._forward_loss(xt, yt)
            scale = float(self.scaler.get_scale()) if self.scaler is not None else 1.0  # amp: no float16 underflow
            grads = torch.autograd.grad(loss * scale if scale != 1.0 else loss, params)
        finally:
            with torch.no_grad():
                for buffer, value in zip(self.model.buffers(), saved, strict=True):
                    buffer.copy_(value)
        out = []
        for grad in grads:
            array = grad.detach().double().cpu().numpy() / scale
            out.append((array.T if array.ndim == 2 and self._order else array).ravel())  # get_weights' layout
        return np.concatenate(out) if out else np.zeros(0)

    def estimate_step_memory(self, batch: int) -> int | None:
        """One training step's peak at ``batch``, traced under ``FakeTensorMode`` and measured by ``MemTracker``
        (torch.distributed._tools.mem_tracker, as torchtitan's memory estimator does): fake copies of the model, its
        optimizer and a batch, nothing of their size allocated. MemTracker tracks one iteration: one untracked step
        first creates the optimizer's state, then one tracked step gives the peak (parameters, gradients, optimizer
        state, activations, temporaries and the batch) on the trial's device. Not counted: what an operator
        allocates outside the dispatcher (oneDNN scratch, cuDNN workspaces, the allocator's rounding)."""
        import copy

        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.distributed._tools.mem_tracker import MemTracker

        torch = self.torch
        mode = FakeTensorMode()
        # the fake model: deepcopy with every parameter and buffer already mapped to a fake one (no real copy)
        memo: dict[int, Any] = {}
        for p in self.model.parameters():
            memo[id(p)] = torch.nn.Parameter(mode.from_tensor(p.detach()), requires_grad=p.requires_grad)
        for b in self.model.buffers():
            memo[id(b)] = mode.from_tensor(b)
        real = self.model, self.optimizer, self.scaler, self._seen_dtype
        try:
            self.model = copy.deepcopy(real[0], memo)
            self.scaler = None  # amp's GradScaler reads its fake inf checks back (.item()); its state is a few scalars
            with mode:
                self.optimizer = type(real[1])(self.model.parameters(), **real[1].defaults)
                shape = tuple(self.model_input_shape)
                x = torch.empty((batch, *shape), dtype=torch.float32, device=self.device)
                y = torch.zeros((batch,), dtype=torch.int64, device=self.device)
                self.train_step((x, y))  # untracked: the optimizer's state now exists
                tracker = MemTracker()
                tracker.track_external(self.model, self.optimizer, x, y)
                with tracker:
                    self.train_step((x, y))
            peak = tracker.get_tracker_snapshot("peak")
        finally:
            self.model, self.optimizer, self.scaler, self._seen_dtype = real
        totals = [int(v.get("Total", 0)) for k, v in peak.items() if torch.device(k).type == self.device.type]
        return max(totals) if totals else None

    def predict(self, batch: Any) -> np.ndarray:
        x, _ = batch
        self.model.eval()
        try:
            with self.torch.no_grad(), self._autocast():  # evaluated in the precision it trained in
                logits = self.model(x).float().cpu().numpy()
        finally:
            self.model.train()
        return logits

    def reset_memory_stats(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def memory_stats(self) -> MemoryStats:
        if not self.cuda:
            return MemoryStats(peak_mib=None, source="none: torch has no CPU allocator statistics")
        torch = self.torch
        torch.cuda.synchronize()
        return MemoryStats(
            peak_mib=torch.cuda.max_memory_allocated() / MIB,
            source="torch.cuda.max_memory_allocated",
            reserved_mib=torch.cuda.max_memory_reserved() / MIB,
            # what the process holds beyond the allocator now: the CUDA context, kernels loaded, library handles
            context_mib=gpumem.context_mib(torch.cuda.memory_reserved() / MIB).mib,
        )

    def is_oom(self, exc: BaseException) -> bool:
        torch = self.torch
        if torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
        return is_generic_oom(exc)

    @classmethod
    def oom_examples(cls) -> tuple[list[BaseException], list[BaseException]]:
        # Copied from real failures: the CPU one provoked on this project's machine under RLIMIT_AS, the
        # CUDA one from PyTorch's issue tracker.
        import torch

        return (
            [
                torch.cuda.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB "
                    "total capacity; 77.10 GiB already allocated)"
                ),
                RuntimeError(
                    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                    "memory: you tried to allocate 3010560000 bytes. Error code 12 (Cannot allocate memory)"
                ),
                # cuBLAS / cuDNN failing to allocate their workspace (issue 31, item 5)
                RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
                RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
            ],
            [ValueError("shapes (3,) and (4,) not aligned"),
             RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x10 and 12x5)"),
             # CUDA faults that are not out of memory (issue 32)
             RuntimeError("CUDA error: an illegal memory access was encountered"),
             RuntimeError("CUDA error: unspecified launch failure")],
        )

    def close(self) -> None:
        self.model = self.optimizer = None
        if self.cuda:
            self.torch.cuda.empty_cache()

