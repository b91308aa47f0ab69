"""The framework-neutral model description: layer records, shapes, parameter counts, initial weights.

A model is described once, as a tuple of layer records; every adapter builds its own framework's
model from the same description, and :func:`init_weights` makes the initial weights in NumPy from
a seed so that every framework starts from the very same numbers. Shapes follow the (C, H, W)
convention; an adapter whose framework prefers NHWC converts inside the adapter.

Padding and strides follow the PyTorch/MXNet convention, symmetric: ``"same"`` pads ``kernel // 2`` on
every side, so the output side is ``(H + 2*(k//2) - k) // stride + 1`` (``H`` at stride 1, odd kernels).
An NHWC framework whose own ``"same"`` pads asymmetrically at stride 2 pads explicitly instead.

Weight layouts (what :func:`init_weights` returns, in layer order; a :class:`Residual` gives its body's
arrays, then its shortcut's):

* ``Conv2D``: kernel ``(out_ch, in_ch, k, k)``, then bias ``(out_ch,)`` if ``use_bias``.
* ``Dense``: kernel ``(in_features, units)``, then bias ``(units,)``.  A ``Dense`` after ``Flatten``
  reads its input in C-major (C, H, W) order.
* ``BatchNorm``: gamma ``(C,)``, beta ``(C,)``; running mean 0 and variance 1 are not parameters.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from harness.errors import ConfigError

Init = Literal["he_uniform", "glorot_uniform", "zeros"]


@dataclass(frozen=True)
class Conv2D:
    """2-D convolution with a square kernel; ``stride`` > 1 downsamples (padding: module docstring)."""

    filters: int
    kernel: int = 3
    padding: Literal["same", "valid"] = "same"
    use_bias: bool = True
    init: Init = "he_uniform"
    stride: int = 1


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
    """Max pooling; ``stride`` defaults to the window, ``padding`` pads symmetrically (padding never wins)."""

    size: int = 2
    stride: int | None = None
    padding: int = 0


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


@dataclass(frozen=True)
class Residual:
    """``body(x) + shortcut(x)``: an empty ``shortcut`` is the identity, else e.g. a 1x1 projection + BN.

    Both paths must give the same shape. The activation after the sum, if any, is the next layer
    (a :class:`ReLU`), so a block reads exactly like the papers draw it.
    """

    body: tuple[Layer, ...]
    shortcut: tuple[Layer, ...] = ()


Layer = Conv2D | BatchNorm | ReLU | MaxPool2D | GlobalAvgPool | Flatten | Dense | Residual
#: the layer records by name, for :func:`layer_from_spec` (a plugin's description travels as JSON)
LAYER_TYPES: dict[str, type] = {t.__name__: t for t in (Conv2D, BatchNorm, ReLU, MaxPool2D, GlobalAvgPool,
                                                        Flatten, Dense, Residual)}


@dataclass(frozen=True)
class ModelDescription:
    """A model as a layer list for one input shape (C, H, W) and class count."""

    name: str
    input_shape: tuple[int, int, int]
    classes: int
    layers: tuple[Layer, ...] = field(default_factory=tuple)

    def shapes(self) -> list[tuple[int, ...]]:
        """Output shape (per sample) after each top-level layer."""
        return _infer_shapes(self.layers, self.input_shape, self.name, self.input_shape)

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Per-sample output shape (logits)."""
        return self.shapes()[-1]

    def param_count(self) -> int:
        """Trainable parameters, counted from the description alone."""
        return sum(int(np.prod(s)) for s in self.weight_shapes())

    def weight_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the arrays :func:`init_weights` returns, in order."""
        self.shapes()  # refuses a description that does not fit its input before anything is counted
        return _weight_shapes(self.layers, self.input_shape)

    def activation_floats_per_sample(self) -> int:
        """Sum of every layer's output size per sample (inside residual blocks too, and their sums):
        the forward activations a backward pass keeps."""
        return _activation_floats(self.layers, self.input_shape)

    def to_dict(self) -> dict:
        """A JSON-able summary (for the stored, resolved spec)."""
        return {
            "name": self.name,
            "input_shape": list(self.input_shape),
            "classes": self.classes,
            "param_count": self.param_count(),
        }

    def to_spec(self) -> dict[str, Any]:
        """The whole description as JSON-able data; :meth:`from_spec` rebuilds it exactly."""
        return self.to_dict() | {"layers": [layer_to_spec(layer) for layer in self.layers]}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> ModelDescription:
        """Inverse of :meth:`to_spec`."""
        return cls(name=spec["name"], input_shape=tuple(spec["input_shape"]),  # type: ignore[arg-type]
                   classes=int(spec["classes"]), layers=tuple(layer_from_spec(s) for s in spec["layers"]))


def layer_to_spec(layer: Layer) -> dict[str, Any]:
    """One layer record as ``{"type": name, field: value, ...}`` (a residual's paths nested)."""
    out: dict[str, Any] = {"type": type(layer).__name__}
    for f in dataclasses.fields(layer):  # type: ignore[arg-type]
        value = getattr(layer, f.name)
        out[f.name] = [layer_to_spec(v) for v in value] if isinstance(layer, Residual) else value
    return out


def layer_from_spec(spec: dict[str, Any]) -> Layer:
    """Inverse of :func:`layer_to_spec`."""
    spec = dict(spec)
    cls = LAYER_TYPES[spec.pop("type")]
    if cls is Residual:
        return Residual(body=tuple(layer_from_spec(s) for s in spec["body"]),
                        shortcut=tuple(layer_from_spec(s) for s in spec.get("shortcut", ())))
    return cls(**spec)  # type: ignore[no-any-return]


def conv_output_side(side: int, kernel: int, stride: int, padding: str) -> int:
    """Output side of a convolution under the symmetric convention of the module docstring."""
    pad = kernel // 2 if padding == "same" else 0
    return (side + 2 * pad - kernel) // stride + 1


def _layer_shape(layer: Layer, shape: tuple[int, ...], where: str, input_shape: tuple[int, ...]
                 ) -> tuple[int, ...]:
    if isinstance(layer, (Conv2D, MaxPool2D)) and len(shape) != 3:
        raise ConfigError(f"{where}: layer {layer} needs a (C, H, W) input, got {shape}")
    if isinstance(layer, Conv2D):
        if layer.stride < 1 or layer.kernel < 1 or layer.filters < 1:
            raise ConfigError(f"{where}: layer {layer}: filters, kernel and stride must be >= 1")
        c, h, w = shape
        return (layer.filters, *(conv_output_side(s, layer.kernel, layer.stride, layer.padding) for s in (h, w)))
    if isinstance(layer, MaxPool2D):
        stride = layer.stride or layer.size
        if layer.padding * 2 > layer.size:  # every framework refuses a window that could be all padding
            raise ConfigError(f"{where}: layer {layer}: padding must be at most half the window")
        c, h, w = shape
        return (c, *((s + 2 * layer.padding - layer.size) // stride + 1 for s in (h, w)))
    if isinstance(layer, GlobalAvgPool):
        return (shape[0],)
    if isinstance(layer, Flatten):
        return (int(np.prod(shape)),)
    if isinstance(layer, Dense):
        return (layer.units,)
    if isinstance(layer, Residual):
        body = _infer_shapes(layer.body, shape, where, input_shape)
        short = _infer_shapes(layer.shortcut, shape, where, input_shape) if layer.shortcut else [shape]
        b, s = (body[-1] if body else shape), short[-1]
        if b != s:
            raise ConfigError(f"{where}: a residual block's body gives {b} but its shortcut gives {s}; both "
                              "paths must end in the same shape (a 1x1 Conv2D with the body's stride and "
                              "filters as the shortcut matches them)")
        return b
    return shape  # BatchNorm, ReLU: shape-preserving


def layer_output_shape(layer: Layer, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Per-sample output shape of one layer for a per-sample input ``shape`` (adapters walk a model with it)."""
    return _layer_shape(layer, shape, "model", shape)


def _infer_shapes(layers: Sequence[Layer], shape: tuple[int, ...], name: str, input_shape: tuple[int, ...]
                  ) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []
    where = f"model {name!r}"
    for layer in layers:
        shape = _layer_shape(layer, shape, where, input_shape)
        if min(shape) <= 0:
            raise ConfigError(f"{where} does not fit input shape {tuple(input_shape)}: "
                              f"layer {layer} gives shape {shape}")
        shapes.append(shape)
    return shapes


def _weight_shapes(layers: Sequence[Layer], shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for layer in layers:
        if isinstance(layer, Conv2D):
            out.append((layer.filters, shape[0], layer.kernel, layer.kernel))
            if layer.use_bias:
                out.append((layer.filters,))
        elif isinstance(layer, Dense):
            out += [(shape[0], layer.units), (layer.units,)]
        elif isinstance(layer, BatchNorm):
            out += [(shape[0],), (shape[0],)]
        elif isinstance(layer, Residual):
            out += _weight_shapes(layer.body, shape) + _weight_shapes(layer.shortcut, shape)
        shape = _layer_shape(layer, shape, "", shape)
    return out


def _activation_floats(layers: Sequence[Layer], shape: tuple[int, ...]) -> int:
    total = 0
    for layer in layers:
        if isinstance(layer, Residual):
            total += _activation_floats(layer.body, shape) + _activation_floats(layer.shortcut, shape)
        shape = _layer_shape(layer, shape, "", shape)
        total += int(np.prod(shape))
    return total


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 4:  # (out, in, k, k)
        receptive = shape[2] * shape[3]
        return shape[1] * receptive, shape[0] * receptive
    return shape[0], shape[1]  # dense (in, out)


def _flat_layers(layers: Sequence[Layer]) -> list[Layer]:
    """Layers with weights in weight order: a residual's body, then its shortcut."""
    out: list[Layer] = []
    for layer in layers:
        if isinstance(layer, Residual):
            out += _flat_layers(layer.body) + _flat_layers(layer.shortcut)
        else:
            out.append(layer)
    return out


def init_weights(desc: ModelDescription, seed: int) -> list[np.ndarray]:
    """Initial weights for ``desc`` in the layouts of the module docstring, reproducible from ``seed``.

    Kernels follow the layer's ``init`` (He-uniform: U(-sqrt(6/fan_in), +); Glorot-uniform:
    U(-sqrt(6/(fan_in+fan_out)), +)), biases and BN beta are zeros, BN gamma ones.
    """
    rng = np.random.default_rng(seed)
    weights: list[np.ndarray] = []
    shapes = iter(desc.weight_shapes())
    for layer in _flat_layers(desc.layers):
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
