"""A plugin written against release 0.1.0 (plugin API 1): that release's PyTorch adapter, registered as another name.

This file is ``adapters/pytorch.py`` at commit 927c159 (the last of release 0.1.0, before the build template,
``oom_examples()``, ``batchnorm_state()``, ``bn_running_variance`` and ``layer_residual`` existed), with two
edits: the class is ``PyTorchV1Adapter`` and its ``name`` is ``pytorch_v1``. It builds models in its own
``build()`` with no layer hooks, so residual blocks are beyond it. ``tests/contract/test_legacy_plugin.py``
runs the contract suite against it: it must pass every case for osu_cnn, tiny_cnn and deep_cnn, and be told
"not supported: needs ..." for the rest. Keep it as it was: it stands for the plugins already written.

Original docstring: PyTorch adapter: CPU, and CUDA when present. ``torch`` is imported inside methods only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from adapters.base import Adapter, MemoryStats, OptimizerSpec, RuntimeConfig, is_generic_oom
from harness.errors import ConfigError
from harness.models import BatchNorm, Conv2D, Dense, Flatten, GlobalAvgPool, MaxPool2D, ModelDescription, ReLU

MIB = 1024.0 * 1024.0


class PyTorchV1Adapter(Adapter):
    """PyTorch, eager mode, NCHW."""

    name = "pytorch_v1"
    distributions = ("torch",)
    import_name = "torch"
    oom_stderr_patterns = ("CUDA out of memory", "DefaultCPUAllocator: can't allocate memory")

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
        if runtime.threads:
            torch.set_num_threads(runtime.threads)
        want_gpu = runtime.device == "gpu" or (runtime.device == "auto" and torch.cuda.is_available())
        if want_gpu and not torch.cuda.is_available():
            raise ConfigError("device = 'gpu' was asked for, but PyTorch sees no CUDA GPU "
                              "(torch.cuda.is_available() is False); use device = 'cpu' or 'auto'")
        self.cuda = want_gpu
        self.device = torch.device("cuda:0" if want_gpu else "cpu")
        info: dict[str, Any] = {"device": str(self.device), "threads": torch.get_num_threads()}
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            info["gpu_name"] = props.name
            info["gpu_total_mib"] = props.total_memory / MIB
            if runtime.memory_limit_mib:
                fraction = min(1.0, runtime.memory_limit_mib * MIB / props.total_memory)
                torch.cuda.set_per_process_memory_fraction(fraction, 0)
                info["memory_fraction"] = fraction
        return info

    def build(self, model: ModelDescription, weights: Sequence[np.ndarray], optimizer: OptimizerSpec) -> None:
        torch, nn = self.torch, self.torch.nn
        modules: list[Any] = []
        params: list[Any] = []  # (tensor, canonical array), in weight order
        it = iter(weights)
        in_shapes = [model.input_shape, *model.shapes()[:-1]]
        for layer, in_shape in zip(model.layers, in_shapes, strict=True):
            if isinstance(layer, Conv2D):
                pad = layer.kernel // 2 if layer.padding == "same" else 0
                conv = nn.Conv2d(in_shape[0], layer.filters, layer.kernel, padding=pad, bias=layer.use_bias)
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
                modules.append(nn.MaxPool2d(layer.size))
            elif isinstance(layer, GlobalAvgPool):
                modules += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
            elif isinstance(layer, Flatten):
                modules.append(nn.Flatten())
            elif isinstance(layer, Dense):
                dense = nn.Linear(in_shape[0], layer.units)
                params += [(dense.weight, next(it).T), (dense.bias, next(it))]  # torch stores (out, in)
                modules.append(dense)
        net = nn.Sequential(*modules)
        with torch.no_grad():
            for tensor, array in params:
                if tuple(tensor.shape) != array.shape:
                    raise ValueError(f"weight shape {array.shape} does not fit {tuple(tensor.shape)}")
                tensor.copy_(torch.from_numpy(np.ascontiguousarray(array)))
        self.model = net.to(self.device)
        self.model.train()
        if optimizer.name == "sgd":
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=optimizer.lr, momentum=optimizer.momentum)
        else:
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=optimizer.lr,
                                              betas=optimizer.adam_betas, eps=optimizer.adam_eps)
        self.loss_fn = nn.CrossEntropyLoss()
        self._order = [t for t, _ in params]

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

