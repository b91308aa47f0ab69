"""PyTorch adapter: CPU, and CUDA when present. ``torch`` is imported inside methods only."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from adapters import fpenv
from adapters.base import (
    Adapter,
    LayerSite,
    MemoryStats,
    OptimizerSpec,
    RuntimeConfig,
    WeightFeed,
    check_fits,
    is_generic_oom,
)
from harness.errors import ConfigError
from harness.models import (
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    MaxPool2D,
    ModelDescription,
    ReLU,
    Residual,
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
    label = "PyTorch"
    distributions = ("torch",)
    import_name = "torch"
    oom_stderr_patterns = ("CUDA out of memory", "DefaultCPUAllocator: can't allocate memory")
    #: native_model: "package.module:function" returning a torch.nn.Module (harness.models.native)
    options = {"native_model": (None, str)}
    supports_accumulation = True

    def __init__(self) -> None:
        self.torch: Any = None
        self.device: Any = None
        self.model: Any = None
        self.optimizer: Any = None
        self.loss_fn: Any = None
        self.cuda = False
        self._accumulating = False  # gradients of an unfinished accumulated update are held in .grad

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
        self.validate_precision(runtime.precision)  # the parent refuses it first; this guards direct callers
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
        self.cuda = self.resolve_gpu(runtime, torch.cuda.is_available(), "torch.cuda.is_available() is False")
        self.device = torch.device("cuda:0" if self.cuda else "cpu")
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

    # ---- the build template's hooks (Adapter.build walks the layers and calls these) ----------------

    def begin_model(self, model: ModelDescription) -> None:
        self._modules: list[Any] = []
        self._params: list[tuple[Any, np.ndarray]] = []  # (tensor, canonical array), in weight order
        self._bn: list[Any] = []

    def layer_conv2d(self, layer: Conv2D, site: LayerSite, weights: WeightFeed) -> None:
        pad = layer.kernel // 2 if layer.padding == "same" else 0
        conv = self.torch.nn.Conv2d(site.in_shape[0], layer.filters, layer.kernel, stride=layer.stride, padding=pad,
                                    bias=layer.use_bias)
        self._params.append((conv.weight, weights.one()))
        if layer.use_bias:
            self._params.append((conv.bias, weights.one()))
        self._modules.append(conv)

    def layer_batchnorm(self, layer: BatchNorm, site: LayerSite, weights: WeightFeed) -> None:
        # PyTorch's momentum is the weight of the new batch statistic: 1 - the description's
        bn = self.torch.nn.BatchNorm2d(site.in_shape[0], eps=layer.eps, momentum=1.0 - layer.momentum)
        gamma, beta = weights.take(2)
        self._params += [(bn.weight, gamma), (bn.bias, beta)]
        self._modules.append(bn)
        self._bn.append(bn)

    def layer_relu(self, layer: ReLU, site: LayerSite, weights: WeightFeed) -> None:
        self._modules.append(self.torch.nn.ReLU())

    def layer_maxpool2d(self, layer: MaxPool2D, site: LayerSite, weights: WeightFeed) -> None:
        self._modules.append(self.torch.nn.MaxPool2d(layer.size, layer.stride or layer.size, layer.padding))

    def layer_globalavgpool(self, layer: GlobalAvgPool, site: LayerSite, weights: WeightFeed) -> None:
        self._modules += [self.torch.nn.AdaptiveAvgPool2d(1), self.torch.nn.Flatten()]

    def layer_flatten(self, layer: Flatten, site: LayerSite, weights: WeightFeed) -> None:
        self._modules.append(self.torch.nn.Flatten())  # C-major, like the description

    def layer_dense(self, layer: Dense, site: LayerSite, weights: WeightFeed) -> None:
        dense = self.torch.nn.Linear(site.in_shape[0], layer.units)
        kernel, bias = weights.take(2)
        self._params += [(dense.weight, kernel.T), (dense.bias, bias)]  # torch stores (out, in)
        self._modules.append(dense)

    def layer_residual(self, layer: Residual, site: LayerSite, weights: WeightFeed) -> None:
        outer = self._modules
        paths = []
        for path in (layer.body, layer.shortcut):  # weights: the body's, then the shortcut's
            self._modules = []
            self.build_layers(path, site.in_shape, weights)
            paths.append(self.torch.nn.Sequential(*self._modules))  # an empty shortcut returns its input
        self._modules = outer
        self._modules.append(_residual_module(self.torch)(*paths))

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

    def train_step(self, batch: Any) -> None:
        x, y = batch
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        if self.cuda:
            self.torch.cuda.synchronize()  # the clock is read after this: the GPU must be idle

    def accumulate_gradients(self, batch: Any, weight: float) -> None:
        x, y = batch
        if not self._accumulating:
            self.optimizer.zero_grad(set_to_none=True)
            self._accumulating = True
        # backward() adds into .grad: the weighted mean losses sum to the mean over the whole update
        (self.loss_fn(self.model(x), y) * weight).backward()
        if self.cuda:
            self.torch.cuda.synchronize()

    def apply_accumulated(self) -> None:
        self.optimizer.step()
        self._accumulating = False
        if self.cuda:
            self.torch.cuda.synchronize()

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
            ],
            [ValueError("shapes (3,) and (4,) not aligned"),
             RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x10 and 12x5)")],
        )

    def close(self) -> None:
        self.model = self.optimizer = None
        if self.cuda:
            self.torch.cuda.empty_cache()

