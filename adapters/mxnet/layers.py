"""MXNet's model layers: the build template's hooks as Gluon blocks (:class:`GluonLayers`) and the residual block's
``HybridBlock`` class. MXNet is imported inside functions only (its ``gluon.nn`` in ``begin_model``)."""

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
def residual_block() -> Any:
    """``body(x) + shortcut(x)`` as a Gluon ``HybridBlock`` class (made on first use: mxnet is imported lazily)."""
    from mxnet.gluon import nn

    class ResidualBlock(nn.HybridBlock):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            with self.name_scope():
                self.body = nn.HybridSequential()
                self.shortcut = nn.HybridSequential()  # left empty: the identity

        def hybrid_forward(self, F: Any, x: Any) -> Any:  # F: Gluon's name for the op namespace
            return self.body(x) + (self.shortcut(x) if len(self.shortcut) else x)

    return ResidualBlock



class GluonLayers:
    """The MXNet adapter's build-template hooks: each adds its Gluon block to the current ``HybridSequential`` and
    queues its parameters (Gluon parameter, stored transposed?, canonical array), which
    :meth:`adapters.mxnet.MXNetAdapter.end_model` initialises and fills. A mixin of
    :class:`adapters.mxnet.MXNetAdapter`."""

    build_layers: Callable[[Sequence[Layer], tuple[int, ...], WeightFeed], None]  # Adapter's template walk

    def begin_model(self, model: ModelDescription) -> None:
        from mxnet.gluon import nn

        self.nn = nn
        self._net = nn.HybridSequential()
        # (gluon Parameter, stored transposed?, canonical array) in canonical order
        self._pending: list[tuple[Any, bool, np.ndarray]] = []
        self._bn: list[Any] = []

    def layer_conv2d(self, layer: Conv2D, site: LayerSite, weights: WeightFeed) -> None:
        pad = layer.kernel // 2 if layer.padding == "same" else 0
        block = self.nn.Conv2D(layer.filters, layer.kernel, strides=layer.stride, padding=pad,
                               use_bias=layer.use_bias, in_channels=site.in_shape[0], layout="NCHW")
        self._add(block, [(block.weight, False)] + [(block.bias, False)] * layer.use_bias, weights)

    def layer_batchnorm(self, layer: BatchNorm, site: LayerSite, weights: WeightFeed) -> None:
        # Gluon's momentum is the weight of the running statistic, like the description's.
        block = self.nn.BatchNorm(axis=1, momentum=layer.momentum, epsilon=layer.eps, in_channels=site.in_shape[0])
        self._add(block, [(block.gamma, False), (block.beta, False)], weights)
        self._bn.append(block)

    def layer_relu(self, layer: ReLU, site: LayerSite, weights: WeightFeed) -> None:
        self._net.add(self.nn.Activation("relu"))

    def layer_maxpool2d(self, layer: MaxPool2D, site: LayerSite, weights: WeightFeed) -> None:
        self._net.add(self.nn.MaxPool2D(layer.size, layer.stride or layer.size, layer.padding))

    def layer_globalavgpool(self, layer: GlobalAvgPool, site: LayerSite, weights: WeightFeed) -> None:
        self._net.add(self.nn.GlobalAvgPool2D(), self.nn.Flatten())

    def layer_flatten(self, layer: Flatten, site: LayerSite, weights: WeightFeed) -> None:
        self._net.add(self.nn.Flatten())  # C-major, like the description: no permutation needed

    def layer_dense(self, layer: Dense, site: LayerSite, weights: WeightFeed) -> None:
        block = self.nn.Dense(layer.units, in_units=int(np.prod(site.in_shape)), flatten=True)
        self._add(block, [(block.weight, True), (block.bias, False)], weights)  # Gluon stores (units, in)

    def layer_residual(self, layer: Residual, site: LayerSite, weights: WeightFeed) -> None:
        block = residual_block()()
        outer = self._net
        for target, path in ((block.body, layer.body), (block.shortcut, layer.shortcut)):  # body's weights first
            self._net = target
            self.build_layers(path, site.in_shape, weights)
        self._net = outer
        self._net.add(block)

    def _add(self, block: Any, params: list[tuple[Any, bool]], weights: WeightFeed) -> None:
        self._net.add(block)
        self._pending += [(p, transposed, a) for (p, transposed), a in zip(params, weights.take(len(params)),
                                                                             strict=True)]
