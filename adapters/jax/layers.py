"""JAX's model layers: the build template's hooks (:class:`JaxLayers`), each making a pure layer function over its
slice of a flat parameter list, and :func:`chain`, which applies layer functions in order as one. JAX is never
imported here: the adapter hands it over (``self.jax``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

#: A layer function: (its parameters, its state, input, training?) -> (output, new state).
LayerFn = Callable[[list[Any], list[Any], Any, bool], tuple[Any, list[Any]]]


def chain(layers: list[tuple[LayerFn, int, int]]) -> tuple[LayerFn, int, int]:
    """Layers applied in order as one layer function: each takes its slice of the parameters and state."""
    n_params, n_state = sum(n for _, n, _ in layers), sum(n for _, _, n in layers)

    def chained(params: list[Any], state: list[Any], x: Any, train: bool) -> tuple[Any, list[Any]]:
        new_state: list[Any] = []
        pi = si = 0
        for fn, np_, ns in layers:
            x, s = fn(params[pi : pi + np_], state[si : si + ns], x, train)
            new_state += s
            pi, si = pi + np_, si + ns
        return x, new_state  # no layers: the input itself (a residual block's identity shortcut)

    return chained, n_params, n_state


class JaxLayers:
    """The JAX adapter's build-template hooks: each appends (layer function, parameters taken, state entries) to the
    current list and queues its initial weights and state, which :meth:`adapters.jax.JAXAdapter.end_model` puts on
    the device and chains into the model. A mixin of :class:`adapters.jax.JAXAdapter`, which gives it ``jax``."""

    jax: Any
    trace_count: int
    _layers: list[tuple[LayerFn, int, int]]
    _compiled: dict[int, Any]
    build_layers: Callable[[Sequence[Layer], tuple[int, ...], WeightFeed], None]  # Adapter's template walk

    def begin_model(self, model: ModelDescription) -> None:
        self._layers = []
        self.model_input_shape: tuple[int, ...] = tuple(model.input_shape)
        self._weights: list[np.ndarray] = []
        self._state0: list[np.ndarray] = []
        self._compiled = {}
        self.trace_count = 0

    def _add(self, fn: LayerFn, weights: list[np.ndarray] | None = None, state: list[np.ndarray] | None = None) -> None:
        self._layers.append((fn, len(weights or ()), len(state or ())))
        self._weights += weights or []
        self._state0 += state or []

    def layer_conv2d(self, layer: Conv2D, site: LayerSite, weights: WeightFeed) -> None:
        lax = self.jax.lax
        # explicit and symmetric, like the description (XLA's "SAME" pads more at the end at stride 2)
        pad = layer.kernel // 2 if layer.padding == "same" else 0
        padding, strides = ((pad, pad), (pad, pad)), (layer.stride, layer.stride)

        def conv(p: list[Any], s: list[Any], x: Any, train: bool) -> tuple[Any, list[Any]]:
            y = lax.conv_general_dilated(x, p[0], strides, padding, dimension_numbers=("NCHW", "OIHW", "NCHW"))
            return (y + p[1][None, :, None, None] if layer.use_bias else y), s

        self._add(conv, weights.take(1 + int(layer.use_bias)))

    def layer_batchnorm(self, layer: BatchNorm, site: LayerSite, weights: WeightFeed) -> None:
        jnp = self.jax.numpy
        m, eps = layer.momentum, layer.eps
        axes = (0, 2, 3) if len(site.in_shape) == 3 else (0,)
        shape = (1, -1, 1, 1) if len(site.in_shape) == 3 else (1, -1)

        def bn(p: list[Any], s: list[Any], x: Any, train: bool) -> tuple[Any, list[Any]]:
            if train:
                mean, var = x.mean(axis=axes), x.var(axis=axes)  # biased: what normalises the batch
                n = x.size // x.shape[1]
                # The running variance takes the unbiased estimate (PyTorch's convention, the reference)
                s = [m * s[0] + (1 - m) * mean, m * s[1] + (1 - m) * var * (n / max(n - 1, 1))]
            else:
                mean, var = s
            y = (x - mean.reshape(shape)) * (p[0] / jnp.sqrt(var + eps)).reshape(shape) + p[1].reshape(shape)
            return y, s

        channels = site.in_shape[0]
        self._add(bn, weights.take(2), [np.zeros(channels, np.float32), np.ones(channels, np.float32)])

    def layer_relu(self, layer: ReLU, site: LayerSite, weights: WeightFeed) -> None:
        relu = self.jax.nn.relu
        self._add(lambda p, s, x, train: (relu(x), s))

    def layer_maxpool2d(self, layer: MaxPool2D, site: LayerSite, weights: WeightFeed) -> None:
        lax, k, st, pad = self.jax.lax, layer.size, layer.stride or layer.size, layer.padding
        padding = ((0, 0), (0, 0), (pad, pad), (pad, pad))  # padded with the init value, -inf: it never wins
        self._add(lambda p, s, x, train: (lax.reduce_window(x, -np.inf, lax.max, (1, 1, k, k), (1, 1, st, st),
                                                            padding), s))

    def layer_globalavgpool(self, layer: GlobalAvgPool, site: LayerSite, weights: WeightFeed) -> None:
        self._add(lambda p, s, x, train: (x.mean(axis=(2, 3)), s))

    def layer_flatten(self, layer: Flatten, site: LayerSite, weights: WeightFeed) -> None:
        self._add(lambda p, s, x, train: (x.reshape(x.shape[0], -1), s))  # NCHW: C-major, like the description

    def layer_dense(self, layer: Dense, site: LayerSite, weights: WeightFeed) -> None:
        self._add(lambda p, s, x, train: (x @ p[0] + p[1], s), weights.take(2))

    def layer_residual(self, layer: Residual, site: LayerSite, weights: WeightFeed) -> None:
        outer = self._layers
        paths = []
        for path in (layer.body, layer.shortcut):  # weights: the body's, then the shortcut's
            self._layers = []
            self.build_layers(path, site.in_shape, weights)
            paths.append(chain(self._layers))
        self._layers = outer
        (body, nb, sb), (shortcut, ns, ss) = paths

        def residual(p: list[Any], s: list[Any], x: Any, train: bool) -> tuple[Any, list[Any]]:
            yb, s_body = body(p[:nb], s[:sb], x, train)
            ys, s_short = shortcut(p[nb:], s[sb:], x, train)
            return yb + ys, s_body + s_short

        self._layers.append((residual, nb + ns, sb + ss))
