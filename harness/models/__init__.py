"""The framework-neutral model description and catalogue (plugins import these names from here).

* :mod:`harness.models.description`: the layer records, :class:`ModelDescription` (shapes, parameter
  counts, a JSON form) and :func:`init_weights`, the NumPy weights every framework starts from;
* :mod:`harness.models.catalogue`: the named networks and :func:`build_description`;
* :mod:`harness.models.user`: ``model = "package.module:function"``, imported with framework imports refused.
"""

from __future__ import annotations

from harness.models.catalogue import (
    CATALOGUE,
    Factory,
    basic_block,
    build_description,
    check_model_name,
    deep_cnn,
    osu_cnn,
    resnet18,
    resnet20,
    tiny_cnn,
)
from harness.models.description import (
    LAYER_TYPES,
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    Init,
    Layer,
    MaxPool2D,
    ModelDescription,
    ReLU,
    Residual,
    conv_output_side,
    init_weights,
    layer_from_spec,
    layer_output_shape,
    layer_to_spec,
)
from harness.models.native import is_native_model, native_name

__all__ = ["BatchNorm", "CATALOGUE", "Conv2D", "Dense", "Factory", "Flatten", "GlobalAvgPool", "Init",
           "LAYER_TYPES", "Layer", "MaxPool2D", "ModelDescription", "ReLU", "Residual", "basic_block",
           "build_description", "check_model_name", "conv_output_side", "deep_cnn", "init_weights",
           "is_native_model", "layer_from_spec", "layer_output_shape", "layer_to_spec", "native_name", "osu_cnn",
           "resnet18", "resnet20", "tiny_cnn"]
