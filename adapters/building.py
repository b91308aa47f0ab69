"""The framework-free half of building a model: the layer walk, the weight feed, device and optimizer choice.

:meth:`adapters.base.Adapter.build` is a template over these pieces. It walks the description's layers
with their input shapes (:func:`walk_layers`) and calls one hook per layer type, named after the layer's
class (:func:`layer_hook_name`: ``Conv2D`` -> ``layer_conv2d``, ``BatchNorm`` -> ``layer_batchnorm``).
Adding a layer type to :mod:`harness.models` therefore means adding one such method per adapter; an
adapter without it refuses the model with a message naming the method to write, instead of skipping the
layer. Nothing here imports a framework.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import AdapterError, ConfigError
from harness.models.description import Layer, ModelDescription, layer_output_shape

#: The optimizer names every adapter must build, and the hook each one calls (see ``Adapter.make_optimizer``).
OPTIMIZER_HOOKS = {"sgd": "make_sgd", "adam": "make_adam"}


@dataclass(frozen=True)
class LayerSite:
    """Where a layer sits in the model: what a build hook needs besides the layer record itself."""

    index: int
    in_shape: tuple[int, ...]  # per sample, (C, H, W) or (features,)
    out_shape: tuple[int, ...]
    previous: Layer | None  # the layer before this one (None for the first)
    previous_in_shape: tuple[int, ...] | None  # its input shape (a Dense after a Flatten needs the (C, H, W))


def walk_layers(model: ModelDescription) -> Iterator[tuple[Layer, LayerSite]]:
    """Every top-level layer of ``model`` with its site, in order."""
    return walk_sequence(model.layers, tuple(model.input_shape))


def walk_sequence(layers: Sequence[Layer], in_shape: tuple[int, ...]) -> Iterator[tuple[Layer, LayerSite]]:
    """``layers`` applied in order to an input of ``in_shape``, each with its site.

    A residual block's hook walks its two paths with this, from the block's own input shape; a site's
    ``index`` and ``previous`` are then within that path.
    """
    previous: Layer | None = None
    previous_in: tuple[int, ...] | None = None
    shape = tuple(in_shape)
    for i, layer in enumerate(layers):
        out = tuple(layer_output_shape(layer, shape))
        yield layer, LayerSite(i, shape, out, previous, previous_in)
        previous, previous_in, shape = layer, shape, out


def layer_hook_name(layer: Layer | type) -> str:
    """The build hook for a layer type: ``layer_`` + the class name lower-cased (``MaxPool2D`` -> ``layer_maxpool2d``).

    Lower case rather than snake case, because no snake-case rule splits ``ReLU``, ``Conv2D`` and
    ``GlobalAvgPool`` the way a reader would guess; "the class name, lower-cased" needs no guessing.
    """
    cls = layer if isinstance(layer, type) else type(layer)
    return f"layer_{cls.__name__.lower()}"


def unknown_layer_error(adapter_name: str, layer: Layer, site: LayerSite) -> ConfigError:
    """The one message every adapter gives for a layer type it has no hook for."""
    return ConfigError(
        f"the {adapter_name} adapter cannot build layer {site.index} {layer!r} (input {site.in_shape}): it has "
        f"no method {layer_hook_name(layer)}(layer, site, weights). Choose a model whose layers it supports, "
        "or add that hook to the adapter (docs/adapters.md, 'Layer hooks')"
    )


def check_weights(model: ModelDescription, weights: Sequence[np.ndarray]) -> None:
    """The weights given to ``build`` must be exactly :func:`harness.models.init_weights`' layout for ``model``."""
    expected = model.weight_shapes()
    if len(weights) != len(expected):
        raise ConfigError(f"model {model.name!r} takes {len(expected)} weight arrays, {len(weights)} were given; "
                          "pass harness.models.init_weights(model, seed)")
    for i, (array, shape) in enumerate(zip(weights, expected, strict=True)):
        if tuple(np.shape(array)) != tuple(shape):
            raise ConfigError(f"model {model.name!r}: weight {i} has shape {tuple(np.shape(array))}, the "
                              f"description says {tuple(shape)}; pass harness.models.init_weights(model, seed)")


def check_fits(value_shape: Sequence[int], framework_shape: Sequence[int], where: str) -> None:
    """A converted weight must have the framework tensor's shape; a mismatch is an adapter bug, said so."""
    if tuple(value_shape) != tuple(framework_shape):
        raise AdapterError(f"weight shape {tuple(value_shape)} does not fit {tuple(framework_shape)} ({where}): "
                           "the adapter's layout conversion for this layer is wrong")


class WeightFeed:
    """The build's weights, handed out in order to the layer hooks; the template checks all were taken."""

    def __init__(self, weights: Sequence[np.ndarray]) -> None:
        self._weights = list(weights)
        self._next = 0

    def take(self, n: int = 1) -> list[np.ndarray]:
        """The next ``n`` arrays, as float32 (the canonical layouts of :mod:`harness.models`)."""
        if self._next + n > len(self._weights):
            raise AdapterError(f"a layer hook asked for weight {self._next + n - 1}, but the model has "
                               f"{len(self._weights)}: a hook takes more arrays than its layer has")
        out = [np.asarray(w, dtype=np.float32) for w in self._weights[self._next : self._next + n]]
        self._next += n
        return out

    def one(self) -> np.ndarray:
        """The next array."""
        return self.take(1)[0]

    def finish(self) -> None:
        """Every array must have been taken by some hook."""
        if self._next != len(self._weights):
            raise AdapterError(f"the layer hooks took {self._next} of {len(self._weights)} weight arrays: "
                               "a hook skips its layer's weights")


def resolve_gpu(requested: str, available: bool, framework: str, evidence: str, remedy: str = "") -> bool:
    """Whether to run on the GPU: ``gpu`` needs one, ``auto`` takes one if there is one, ``cpu`` never does.

    Args:
        requested: the trial's ``device`` (``cpu``, ``gpu`` or ``auto``).
        available: whether the framework sees a usable GPU.
        framework: the framework's name as users know it ("PyTorch").
        evidence: the check that said no, quoted in the error ("torch.cuda.is_available() is False").
        remedy: what to do besides ``device = 'cpu'`` (an install hint), appended to the error.
    """
    if requested not in ("cpu", "gpu", "auto"):
        raise ConfigError(f"device = {requested!r} is not one of cpu, gpu, auto")
    want = requested == "gpu" or (requested == "auto" and available)
    if want and not available:
        extra = f" {remedy.rstrip('.')}, or" if remedy else ""
        raise ConfigError(f"device = 'gpu' was asked for, but {framework} sees no GPU ({evidence});{extra} "
                          "use device = 'cpu' or 'auto'")
    return want


def unknown_optimizer_error(adapter_name: str, name: str) -> ConfigError:
    """An optimizer the contract does not know is refused, never replaced by another."""
    return ConfigError(f"the {adapter_name} adapter has no optimizer {name!r}; "
                       f"use one of {', '.join(sorted(OPTIMIZER_HOOKS))}")
