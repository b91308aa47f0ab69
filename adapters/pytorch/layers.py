"""PyTorch's model layers: the build template's hooks (``begin_model`` and one ``layer_*`` per layer type), which
:meth:`adapters.base.Adapter.build` calls while it walks the description, and the residual block's module class.
torch is never imported here: the adapter hands it over (``self.torch``; :func:`residual_module`'s argument)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np

from adapters.building import LayerSite, WeightFeed
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
)


@cache
def residual_module(torch: Any) -> Any:
    """``body(x) + shortcut(x)`` as an ``nn.Module`` class (made on first use: torch is imported lazily)."""

    class ResidualBlock(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, body: Any, shortcut: Any) -> None:
            super().__init__()
            self.body, self.shortcut = body, shortcut

        def forward(self, x: Any) -> Any:
            return self.body(x) + self.shortcut(x)  # an empty Sequential returns its input: the identity

    return ResidualBlock


class TorchLayers:
    """The PyTorch adapter's build-template hooks: each appends its ``torch.nn`` module to the current list and
    queues its weights (tensor, canonical array), which :meth:`adapters.pytorch.PyTorchAdapter.end_model` copies in.
    A mixin of :class:`adapters.pytorch.PyTorchAdapter`, which gives it ``torch``."""

    torch: Any
    model_input_shape: tuple[int, ...]  # one sample's shape (C, H, W)
    build_layers: Callable[[Sequence[Layer], tuple[int, ...], WeightFeed], None]  # Adapter's template walk

    def begin_model(self, model: ModelDescription) -> None:
        self.model_input_shape = tuple(model.input_shape)
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
        self._modules.append(residual_module(self.torch)(*paths))
