"""PyTorch adapter: CPU, and CUDA when present. ``torch`` is imported inside methods only."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

import numpy as np

from adapters import fpenv
from adapters.base import Adapter, MemoryStats, OptimizerSpec, RuntimeConfig, is_generic_oom
from harness.errors import ConfigError
from harness.models import (
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    Layer,
    MaxPool2D,
    ModelDescription,
    ReLU,
    Residual,
    layer_output_shape,
)

MIB = 1024.0 * 1024.0


@cache
def _residual_module(torch: Any) -> Any:
    """``body(x) + shortcut(x)`` as an ``nn.Module`` class (made on first use: torch is imported lazily)."""

    class ResidualBlock(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, body: Any, shortcut: Any) -> None:
            super().__init__()
            self.body, self.shortcut = body, shortcut

        def forward(self, x: Any) -> Any:
            return self.body(x) + self.shortcut(x)  # an empty Sequential returns its input: the identity

    return ResidualBlock


class PyTorchAdapter(Adapter):
    """PyTorch, eager mode, NCHW."""

    name = "pytorch"
    distributions = ("torch",)
    import_name = "torch"
    oom_stderr_patterns = ("CUDA out of memory", "DefaultCPUAllocator: can't allocate memory")
    #: native_model: "package.module:function" returning a torch.nn.Module (harness.models.native)
    options = {"native_model": (None, str)}

    def __init__(self) -> None:
        self.torch: Any = None
        self.device: Any = None
        self.model: Any = None
        self.optimizer: Any = None
        self.loss_fn: Any = None
        self.cuda = False

    def versions(self) -> dict[str, str]:
        import torch

        out: dict[str, str] = {"torch": str(torch.__version__)}
        if torch.version.cuda:
            out["cuda"] = str(torch.version.cuda)
        if torch.backends.cudnn.is_available():
            out["cudnn"] = str(torch.backends.cudnn.version())
        return out

    def setup(self, runtime: RuntimeConfig) -> dict[str, Any]:
        import torch

        self.torch = torch
        if runtime.precision != "fp32":  # the parent refuses it first (precisions); this guards direct callers
            raise ConfigError(f"the pytorch adapter runs fp32 only; precision = {runtime.precision!r} is not "
                              "implemented (use precision = 'fp32')")
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
        want_gpu = runtime.device == "gpu" or (runtime.device == "auto" and torch.cuda.is_available())
        if want_gpu and not torch.cuda.is_available():
            raise ConfigError("device = 'gpu' was asked for, but PyTorch sees no CUDA GPU "
                              "(torch.cuda.is_available() is False); use device = 'cpu' or 'auto'")
        self.cuda = want_gpu
        self.device = torch.device("cuda:0" if want_gpu else "cpu")
        info: dict[str, Any] = {"device": str(self.device), "threads": torch.get_num_threads(),
                                "cpu_denormals": cpu_denormals}
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            info["gpu_name"] = props.name
            info["gpu_total_mib"] = props.total_memory / MIB
            if runtime.memory_limit_mib:
                fraction = min(1.0, runtime.memory_limit_mib * MIB / props.total_memory)
                torch.cuda.set_per_process_memory_fraction(fraction, 0)
                info["memory_fraction"] = fraction
        return info

    def _modules(self, layers: Sequence[Layer], in_shape: tuple[int, ...], it: Iterator[np.ndarray],
                 params: list[tuple[Any, np.ndarray]]) -> list[Any]:
        """Modules for ``layers`` (recursing into residual blocks); (tensor, array) pairs appended in weight order."""
        nn = self.torch.nn
        modules: list[Any] = []
        for layer in layers:
            if isinstance(layer, Conv2D):
                pad = layer.kernel // 2 if layer.padding == "same" else 0
                conv = nn.Conv2d(in_shape[0], layer.filters, layer.kernel, stride=layer.stride, padding=pad,
                                 bias=layer.use_bias)
                params.append((conv.weight, next(it)))
                if layer.use_bias:
                    params.append((conv.bias, next(it)))
                modules.append(conv)
            elif isinstance(layer, BatchNorm):
                # PyTorch's momentum is the weight of the new batch statistic: 1 - the description's
                bn = nn.BatchNorm2d(in_shape[0], eps=layer.eps, momentum=1.0 - layer.momentum)
                params += [(bn.weight, next(it)), (bn.bias, next(it))]
                modules.append(bn)
            elif isinstance(layer, ReLU):
                modules.append(nn.ReLU())
            elif isinstance(layer, MaxPool2D):
                modules.append(nn.MaxPool2d(layer.size, layer.stride or layer.size, layer.padding))
            elif isinstance(layer, GlobalAvgPool):
                modules += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
            elif isinstance(layer, Flatten):
                modules.append(nn.Flatten())
            elif isinstance(layer, Dense):
                dense = nn.Linear(in_shape[0], layer.units)
                params += [(dense.weight, next(it).T), (dense.bias, next(it))]  # torch stores (out, in)
                modules.append(dense)
            elif isinstance(layer, Residual):
                body = nn.Sequential(*self._modules(layer.body, in_shape, it, params))
                shortcut = nn.Sequential(*self._modules(layer.shortcut, in_shape, it, params))
                modules.append(_residual_module(self.torch)(body, shortcut))  # empty shortcut: identity
            else:
                raise ConfigError(f"the pytorch adapter cannot build layer {layer!r}")
            in_shape = layer_output_shape(layer, in_shape)
        return modules

    def build(self, model: ModelDescription, weights: Sequence[np.ndarray], optimizer: OptimizerSpec) -> None:
        torch, nn = self.torch, self.torch.nn
        params: list[Any] = []  # (tensor, canonical array), in weight order
        it = iter(weights)
        modules = self._modules(model.layers, model.input_shape, it, params)
        net = nn.Sequential(*modules)
        with torch.no_grad():
            for tensor, array in params:
                if tuple(tensor.shape) != array.shape:
                    raise ValueError(f"weight shape {array.shape} does not fit {tuple(tensor.shape)}")
                tensor.copy_(torch.from_numpy(np.ascontiguousarray(array)))
        self._order = [t for t, _ in params]
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
        self._order = []  # no canonical weight layout: get_weights() has nothing to compare
        self._finish(net, optimizer)

    def _finish(self, net: Any, optimizer: OptimizerSpec) -> None:
        """Move ``net`` to the device and attach the experiment's optimizer and loss."""
        torch, nn = self.torch, self.torch.nn
        self.model = net.to(self.device)
        self.model.train()
        if optimizer.name == "sgd":
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=optimizer.lr, momentum=optimizer.momentum)
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=optimizer.lr,
                                              betas=optimizer.adam_betas, eps=optimizer.adam_eps)
        self.loss_fn = nn.CrossEntropyLoss()

    def param_count(self) -> int:
        return int(sum(p.numel() for p in self.model.parameters() if p.requires_grad))

    def get_weights(self) -> list[np.ndarray]:
        out = []
        for tensor in self._order:
            array = tensor.detach().cpu().numpy()
            out.append(array.T.copy() if array.ndim == 2 else array.copy())
        return out

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        torch = self.torch
        xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))
        if self.cuda:
            xt, yt = xt.to(self.device, non_blocking=True), yt.to(self.device, non_blocking=True)
            torch.cuda.synchronize()
        return xt, yt

    def train_step(self, batch: Any) -> None:
        x, y = batch
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        if self.cuda:
            self.torch.cuda.synchronize()  # the clock is read after this: the GPU must be idle

    def predict(self, batch: Any) -> np.ndarray:
        x, _ = batch
        self.model.eval()
        try:
            with self.torch.no_grad():
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
        )

    def is_oom(self, exc: BaseException) -> bool:
        torch = self.torch
        if torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
        return is_generic_oom(exc)

    def close(self) -> None:
        self.model = self.optimizer = None
        if self.cuda:
            self.torch.cuda.empty_cache()

