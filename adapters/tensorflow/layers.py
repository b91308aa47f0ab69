"""TensorFlow's model layers: the build template's hooks as Keras layers (:class:`KerasLayers`), max-pooling padding
that never wins a max, and the float32 logits layer that records the dtype the model computed in. Keras is passed
in, never imported here; the weight layouts between the description and Keras are :mod:`adapters.tensorflow.convert`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from adapters.building import LayerSite, WeightFeed
from adapters.tensorflow.convert import (
    IDENTITY,
    ConverterPair,
    conv_from_keras,
    conv_to_keras,
    flatten_dense_converters,
)
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

#: the lowest finite value of each compute dtype (float32 for fp32, bfloat16's for bf16, float16's for amp)
LOWEST_FINITE = {"fp32": float(np.finfo(np.float32).min), "bf16": -3.3895313892515355e38,
                 "amp": float(np.finfo(np.float16).min)}


def max_padding(keras: Any, pad: int, precision: str = "fp32") -> Any:
    """Symmetric padding that never wins a max (PyTorch and MXNet pad max-pooling with -inf; Keras cannot).

    Finite, and finite in the compute dtype (float32's lowest rounds to -inf in bfloat16 and float16): no inf
    may reach an arithmetic op in the backward pass.
    """
    lowest = LOWEST_FINITE.get(precision, LOWEST_FINITE["fp32"])
    return keras.layers.Lambda(
        lambda t: keras.ops.pad(t, [[0, 0], [pad, pad], [pad, pad], [0, 0]], constant_values=lowest))


def float32_logits(keras: Any) -> Any:
    """The model's last layer under every precision: casts the logits to float32 (Keras' mixed-precision guide:
    the output must be float32 for a stable softmax and loss) and records, in training, the dtype they arrived
    in: the dtype the layers before it really computed in (``autocast=False``: Keras must not cast its input)."""

    class Float32Logits(keras.layers.Layer):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(dtype="float32", autocast=False, name="float32_logits")
            self.seen_dtype: str | None = None

        def call(self, x: Any, training: Any = None) -> Any:
            if training:  # runs when the step is traced: the dtype of the traced training graph's tensor
                self.seen_dtype = keras.backend.standardize_dtype(x.dtype)
            return keras.ops.cast(x, "float32")

    return Float32Logits()


class KerasLayers:
    """The TensorFlow adapter's build-template hooks (``begin_model`` and one ``layer_*`` per layer type): each
    applies its Keras layer to the current tensor of a functional model and queues its weights, converted to
    Keras' layout. A mixin of :class:`adapters.tensorflow.TensorFlowAdapter`, which gives it ``tf``, the device and
    the precision, and whose ``end_model`` assigns the queued weights."""

    tf: Any
    keras: Any
    device_name: str
    precision: str
    build_layers: Callable[[Sequence[Layer], tuple[int, ...], WeightFeed], None]  # Adapter's template walk

    def begin_model(self, model: ModelDescription) -> None:
        import keras

        self.keras = keras
        c, h, w = model.input_shape
        # the functional API, not Sequential: a residual block has two paths that meet in an Add. Each hook
        # applies its layer to the current tensor ``self._x``.
        self._inputs = self._x = keras.Input(shape=(h, w, c))
        # (Keras layer, names of its trainable weights in canonical order, weights, one converter pair each)
        self._pending: list[tuple[Any, tuple[str, ...], list[np.ndarray], list[ConverterPair]]] = []
        self._bn: list[Any] = []

    def layer_conv2d(self, layer: Conv2D, site: LayerSite, weights: WeightFeed) -> None:
        padding = layer.padding
        if layer.stride > 1 and padding == "same":
            # Keras' "same" pads asymmetrically (more at the bottom/right) at stride 2; the description pads
            # kernel // 2 on every side, like PyTorch and MXNet: pad explicitly, then convolve.
            self._add(self.keras.layers.ZeroPadding2D(layer.kernel // 2, data_format="channels_last"))
            padding = "valid"
        k = self.keras.layers.Conv2D(layer.filters, layer.kernel, strides=layer.stride, padding=padding,
                                     use_bias=layer.use_bias, data_format="channels_last")
        names: tuple[str, ...] = ("kernel", "bias") if layer.use_bias else ("kernel",)
        convs: list[ConverterPair] = [(conv_to_keras, conv_from_keras)]
        self._add(k, names, weights.take(len(names)), convs + [IDENTITY] * layer.use_bias)

    def layer_batchnorm(self, layer: BatchNorm, site: LayerSite, weights: WeightFeed) -> None:
        k = self.keras.layers.BatchNormalization(axis=-1, momentum=layer.momentum, epsilon=layer.eps)
        self._bn.append(k)
        self._add(k, ("gamma", "beta"), weights.take(2), [IDENTITY, IDENTITY])

    def layer_relu(self, layer: ReLU, site: LayerSite, weights: WeightFeed) -> None:
        self._add(self.keras.layers.ReLU())

    def layer_maxpool2d(self, layer: MaxPool2D, site: LayerSite, weights: WeightFeed) -> None:
        if layer.padding:
            self._add(max_padding(self.keras, layer.padding, self.precision))
        self._add(self.keras.layers.MaxPooling2D(layer.size, strides=layer.stride or layer.size,
                                                 data_format="channels_last"))

    def layer_globalavgpool(self, layer: GlobalAvgPool, site: LayerSite, weights: WeightFeed) -> None:
        self._add(self.keras.layers.GlobalAveragePooling2D(data_format="channels_last"))

    def layer_flatten(self, layer: Flatten, site: LayerSite, weights: WeightFeed) -> None:
        self._add(self.keras.layers.Flatten())

    def layer_dense(self, layer: Dense, site: LayerSite, weights: WeightFeed) -> None:
        kernel_conv = IDENTITY
        if isinstance(site.previous, Flatten) and site.previous_in_shape and len(site.previous_in_shape) == 3:
            kernel_conv = flatten_dense_converters(site.previous_in_shape)  # reads a (C, H, W) flatten
        self._add(self.keras.layers.Dense(layer.units), ("kernel", "bias"), weights.take(2), [kernel_conv, IDENTITY])

    def layer_residual(self, layer: Residual, site: LayerSite, weights: WeightFeed) -> None:
        block_input = self._x
        outputs = []
        for path in (layer.body, layer.shortcut):  # weights: the body's, then the shortcut's
            self._x = block_input
            self.build_layers(path, site.in_shape, weights)
            outputs.append(self._x)  # an empty shortcut leaves the block's input: the identity
        self._add(self.keras.layers.Add(), inputs=outputs)

    def _add(self, k: Any, names: tuple[str, ...] = (), arrays: list[np.ndarray] | None = None,
             converters: list[ConverterPair] | None = None, inputs: Any = None) -> None:
        with self.tf.device(self.device_name):  # the layer's variables are made as it is applied
            self._x = k(self._x if inputs is None else inputs)
        if names:
            self._pending.append((k, names, arrays or [], converters or []))
