"""The model catalogue: named networks described once, for any input shape and class count.

``model = "NAME"`` picks one of :data:`CATALOGUE`; ``model = "package.module:function"`` names your own
function ``(input_shape, classes) -> ModelDescription`` (:mod:`harness.models.user`). Both resolve
through :func:`build_description`.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.errors import ConfigError
from harness.models.description import (
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

Factory = Callable[[tuple[int, int, int], int], ModelDescription]


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


def basic_block(in_channels: int, filters: int, stride: int = 1) -> tuple[Layer, ...]:
    """ResNet's basic block: conv3x3(stride)-BN-ReLU-conv3x3-BN plus the shortcut, then ReLU.

    The shortcut is the identity where shapes allow, else a 1x1 convolution with the block's stride
    and BN (the "projection" shortcut, option B of He et al. 2015, which torchvision uses).
    """
    body = (Conv2D(filters, 3, "same", use_bias=False, stride=stride), BatchNorm(), ReLU(),
            Conv2D(filters, 3, "same", use_bias=False), BatchNorm())
    shortcut: tuple[Layer, ...] = ()
    if stride != 1 or in_channels != filters:
        shortcut = (Conv2D(filters, 1, "valid", use_bias=False, stride=stride), BatchNorm())
    return Residual(body=body, shortcut=shortcut), ReLU()


def _stages(width_in: int, plan: tuple[tuple[int, int, int], ...]) -> list[Layer]:
    """Residual stages: (filters, blocks, first stride) each; the first block of a stage downsamples."""
    layers: list[Layer] = []
    channels = width_in
    for filters, blocks, stride in plan:
        for i in range(blocks):
            layers += basic_block(channels, filters, stride if i == 0 else 1)
            channels = filters
    return layers


def resnet18(input_shape: tuple[int, int, int], classes: int) -> ModelDescription:
    """ResNet-18, ImageNet layout (He et al. 2015; torchvision's ``resnet18``), for any input size.

    Stem conv 7x7/2 64 -> BN -> ReLU -> max-pool 3x3/2 (pad 1); four stages of two basic blocks
    (64, 128, 256, 512 filters; stride 2 from the second stage, projection shortcuts there); global
    average pool; Dense. At 3x224x224 with 1,000 classes: 11,689,512 parameters, as torchvision counts.
    """
    layers: list[Layer] = [Conv2D(64, 7, "same", use_bias=False, stride=2), BatchNorm(), ReLU(),
                           MaxPool2D(3, stride=2, padding=1)]
    layers += _stages(64, ((64, 2, 1), (128, 2, 2), (256, 2, 2), (512, 2, 2)))
    layers += [GlobalAvgPool(), Dense(classes, init="glorot_uniform")]
    return ModelDescription(name="resnet18", input_shape=input_shape, classes=classes, layers=tuple(layers))


def resnet20(input_shape: tuple[int, int, int], classes: int) -> ModelDescription:
    """ResNet-20, the CIFAR layout of He et al. 2015 (section 4.2): 6n+2 layers with n = 3.

    Conv 3x3 16 -> BN -> ReLU; three stages of three basic blocks (16, 32, 64 filters; stride 2 from
    the second stage); global average pool; Dense. Shortcuts that change shape are 1x1 projections
    (option B), so it has 272,474 parameters at 10 classes (the paper's option A, zero padding, 0.27 M).
    """
    layers: list[Layer] = [Conv2D(16, 3, "same", use_bias=False), BatchNorm(), ReLU()]
    layers += _stages(16, ((16, 3, 1), (32, 3, 2), (64, 3, 2)))
    layers += [GlobalAvgPool(), Dense(classes, init="glorot_uniform")]
    return ModelDescription(name="resnet20", input_shape=input_shape, classes=classes, layers=tuple(layers))


CATALOGUE: dict[str, Factory] = {"osu_cnn": osu_cnn, "deep_cnn": deep_cnn, "tiny_cnn": tiny_cnn,
                                 "resnet18": resnet18, "resnet20": resnet20}


def check_model_name(name: str) -> None:
    """Refuse a model name that is neither in the catalogue nor a loadable, framework-free user function."""
    from harness.models.native import PREFIX, check_factory, is_native_model
    from harness.models.user import check_user_model, is_user_model

    if is_native_model(name):
        check_factory(name[len(PREFIX):], f"model {name!r}")  # not imported: it imports a framework
    elif is_user_model(name):
        check_user_model(name)  # not imported here: it runs once, in a bounded child, when described
    elif name not in CATALOGUE:
        raise ConfigError(f"unknown model {name!r}: not in the catalogue ({', '.join(sorted(CATALOGUE))}); or "
                          "name your own function as \"package.module:function\" (docs/models.md)")


def build_description(name: str, input_shape: tuple[int, int, int], classes: int) -> ModelDescription:
    """Look a model up (catalogue or ``package.module:function``) and describe it for this input."""
    from harness.models.native import is_native_model
    from harness.models.sandbox import describe_user_model
    from harness.models.user import is_user_model

    if is_native_model(name):
        raise ConfigError(f"model {name!r} is a framework's own model: it has no framework-neutral description "
                          "(no forecast, no shared weights); only its adapter can build it")
    if is_user_model(name):
        return describe_user_model(name, tuple(input_shape), classes)  # type: ignore[arg-type]
    check_model_name(name)
    desc = CATALOGUE[name](tuple(input_shape), classes)  # type: ignore[arg-type]
    desc.shapes()  # validates the input shape
    return desc
