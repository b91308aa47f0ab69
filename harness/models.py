"""The framework-neutral model catalogue.

A model is described once, as a tuple of layer records; every adapter builds its own framework's
model from the same description, and :func:`init_weights` makes the initial weights in NumPy from
a seed so that every framework starts from the very same numbers. Shapes follow the (C, H, W)
convention; an adapter whose framework prefers NHWC converts inside the adapter.

Weight layouts (what :func:`init_weights` returns, in layer order):

* ``Conv2D``: kernel ``(out_ch, in_ch, k, k)``, then bias ``(out_ch,)`` if ``use_bias``.
* ``Dense``: kernel ``(in_features, units)``, then bias ``(units,)``.  A ``Dense`` after ``Flatten``
  reads its input in C-major (C, H, W) order.
* ``BatchNorm``: gamma ``(C,)``, beta ``(C,)``; running mean 0 and variance 1 are not parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from harness.errors import ConfigError

Init = Literal["he_uniform", "glorot_uniform", "zeros"]


@dataclass(frozen=True)
class Conv2D:
    """2-D convolution, stride 1, square kernel."""

    filters: int
    kernel: int = 3
    padding: Literal["same", "valid"] = "same"
    use_bias: bool = True
    init: Init = "he_uniform"


@dataclass(frozen=True)
class BatchNorm:
    """Batch normalisation over channels (eps and momentum fixed so all frameworks agree)."""

    eps: float = 1e-5
    momentum: float = 0.9  # weight of the running statistic (Keras/MXNet convention; PyTorch uses 1 - this)


@dataclass(frozen=True)
class ReLU:
    """Rectified linear unit."""


@dataclass(frozen=True)
class MaxPool2D:
    """Max pooling with stride equal to the window."""

    size: int = 2


@dataclass(frozen=True)
class GlobalAvgPool:
    """Average over H and W, giving (C,)."""


@dataclass(frozen=True)
class Flatten:
    """Flatten (C, H, W) to C*H*W in C-major order."""


@dataclass(frozen=True)
class Dense:
    """Fully connected layer."""

    units: int
    init: Init = "glorot_uniform"


Layer = Conv2D | BatchNorm | ReLU | MaxPool2D | GlobalAvgPool | Flatten | Dense


@dataclass(frozen=True)
class ModelDescription:
    """A model as a layer list for one input shape (C, H, W) and class count."""

    name: str
    input_shape: tuple[int, int, int]
    classes: int
    layers: tuple[Layer, ...] = field(default_factory=tuple)

    def shapes(self) -> list[tuple[int, ...]]:
        """Output shape (per sample) after each layer."""
        return _infer_shapes(self)

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Per-sample output shape (logits)."""
        return self.shapes()[-1]

    def param_count(self) -> int:
        """Trainable parameters, counted from the description alone."""
        return sum(int(np.prod(s)) for s in self.weight_shapes())

    def weight_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the arrays :func:`init_weights` returns, in order."""
        out: list[tuple[int, ...]] = []
        shape: tuple[int, ...] = self.input_shape
        for layer, after in zip(self.layers, self.shapes(), strict=True):
            if isinstance(layer, Conv2D):
                out.append((layer.filters, shape[0], layer.kernel, layer.kernel))
                if layer.use_bias:
                    out.append((layer.filters,))
            elif isinstance(layer, Dense):
                out.append((shape[0], layer.units))
                out.append((layer.units,))
            elif isinstance(layer, BatchNorm):
                out.extend([(shape[0],), (shape[0],)])
            shape = after
        return out

    def activation_floats_per_sample(self) -> int:
        """Sum of every layer's output size per sample: the forward activations a backward pass keeps."""
        return int(sum(np.prod(s) for s in self.shapes()))

    def to_dict(self) -> dict:
        """A JSON-able form (for the stored, resolved spec)."""
        return {
            "name": self.name,
            "input_shape": list(self.input_shape),
            "classes": self.classes,
            "param_count": self.param_count(),
        }


def _infer_shapes(desc: ModelDescription) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []
    shape: tuple[int, ...] = desc.input_shape
    for layer in desc.layers:
        if isinstance(layer, Conv2D):
            c, h, w = shape
            if layer.padding == "valid":
                h, w = h - layer.kernel + 1, w - layer.kernel + 1
            shape = (layer.filters, h, w)
        elif isinstance(layer, MaxPool2D):
            c, h, w = shape
            shape = (c, h // layer.size, w // layer.size)
        elif isinstance(layer, GlobalAvgPool):
            shape = (shape[0],)
        elif isinstance(layer, Flatten):
            shape = (int(np.prod(shape)),)
        elif isinstance(layer, Dense):
            shape = (layer.units,)
        if min(shape) <= 0:
            raise ConfigError(f"model {desc.name!r} does not fit input shape {desc.input_shape}: "
                              f"layer {layer} gives shape {shape}")
        shapes.append(shape)
    return shapes


def osu_cnn(input_shape: tuple[int, int, int], classes: int) -> ModelDescription:
    """The model of the seed study: Conv 32@3x3 same ReLU -> MaxPool 2 -> Flatten -> Dense 128 ReLU -> Dense."""
    return ModelDescription(
        name="osu_cnn",
        input_shape=input_shape,
        classes=classes,
        layers=(
            Conv2D(32, 3, "same", init="he_uniform"),
            ReLU(),
            MaxPool2D(2),
            Flatten(),
            Dense(128, init="he_uniform"),
            ReLU(),
            Dense(classes, init="glorot_uniform"),
        ),
    )


def deep_cnn(input_shape: tuple[int, int, int], classes: int) -> ModelDescription:
    """A VGG-style conv-BN-ReLU network whose activations reach gigabytes at batch 1024 on 32x32 input.

    At 32x32x3 and batch 1024 its forward activations alone are about 6 GiB in fp32, so memory
    limits of real cards are met well inside the seed study's batch range.
    """
    layers: list[Layer] = []
    side = min(input_shape[1:])
    for width, convs in ((64, 2), (128, 2), (256, 2), (512, 2)):
        for _ in range(convs):
            layers += [Conv2D(width, 3, "same", use_bias=False, init="he_uniform"), BatchNorm(), ReLU()]
        if side >= 2:  # pool while there is something to pool, so small inputs (8x8 digits) still fit
            layers.append(MaxPool2D(2))
            side //= 2
    layers += [GlobalAvgPool(), Dense(classes, init="glorot_uniform")]
    return ModelDescription(name="deep_cnn", input_shape=input_shape, classes=classes, layers=tuple(layers))


def tiny_cnn(input_shape: tuple[int, int, int], classes: int) -> ModelDescription:
    """A very small conv-BN model for fast tests of every layer type."""
    return ModelDescription(
        name="tiny_cnn",
        input_shape=input_shape,
        classes=classes,
        layers=(
            Conv2D(8, 3, "same", use_bias=False),
            BatchNorm(),
            ReLU(),
            MaxPool2D(2),
            Conv2D(8, 3, "same"),
            ReLU(),
            GlobalAvgPool(),
            Dense(classes),
        ),
    )


CATALOGUE = {"osu_cnn": osu_cnn, "deep_cnn": deep_cnn, "tiny_cnn": tiny_cnn}


def build_description(name: str, input_shape: tuple[int, int, int], classes: int) -> ModelDescription:
    """Look a model up in the catalogue and describe it for this input."""
    try:
        factory = CATALOGUE[name]
    except KeyError:
        raise ConfigError(f"unknown model {name!r}; the catalogue has: {', '.join(sorted(CATALOGUE))}") from None
    desc = factory(tuple(input_shape), classes)  # type: ignore[arg-type]
    desc.shapes()  # validates the input shape
    return desc


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 4:  # (out, in, k, k)
        receptive = shape[2] * shape[3]
        return shape[1] * receptive, shape[0] * receptive
    return shape[0], shape[1]  # dense (in, out)


def init_weights(desc: ModelDescription, seed: int) -> list[np.ndarray]:
    """Initial weights for ``desc`` in the layouts of the module docstring, reproducible from ``seed``.

    Kernels follow the layer's ``init`` (He-uniform: U(-sqrt(6/fan_in), +); Glorot-uniform:
    U(-sqrt(6/(fan_in+fan_out)), +)), biases and BN beta are zeros, BN gamma ones.
    """
    rng = np.random.default_rng(seed)
    weights: list[np.ndarray] = []
    shapes = iter(desc.weight_shapes())
    for layer in desc.layers:
        if isinstance(layer, (Conv2D, Dense)):
            kshape = next(shapes)
            fan_in, fan_out = _fans(kshape)
            if layer.init == "he_uniform":
                limit = math.sqrt(6.0 / fan_in)
            elif layer.init == "glorot_uniform":
                limit = math.sqrt(6.0 / (fan_in + fan_out))
            else:
                limit = 0.0
            weights.append(rng.uniform(-limit, limit, size=kshape).astype(np.float32))
            if isinstance(layer, Dense) or layer.use_bias:
                weights.append(np.zeros(next(shapes), dtype=np.float32))
        elif isinstance(layer, BatchNorm):
            weights.append(np.ones(next(shapes), dtype=np.float32))
            weights.append(np.zeros(next(shapes), dtype=np.float32))
    return weights
