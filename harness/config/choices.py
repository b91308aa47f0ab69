"""The enumerated settings of an experiment, as ``Literal`` types: one definition gives both the type that mypy
checks and the tuple of allowed values that validation, the command line and messages use.

Vocabulary layer: imports only the standard library, so :mod:`harness.config.trial` (which plugins reach through
``adapters.base``) can use these types.
"""

from __future__ import annotations

from typing import Literal, get_args

Device = Literal["auto", "cpu", "gpu"]
OptimizerName = Literal["sgd", "adam"]
LrPolicy = Literal["fixed", "linear", "sqrt"]
#: of an npz file's images (harness.data.npzfile)
DataLayout = Literal["auto", "nchw", "nhwc"]
#: what the worker's CPU does with denormal floats: flush them to zero, or leave the framework's default
Denormals = Literal["flush", "framework-default"]
#: harness-side augmentation, identical for every framework (harness/data/augment.py)
Augment = Literal["none", "crop", "flip", "crop_flip"]
#: what a study's file says it tests (the report computes that study's findings); "" for no study
Study = Literal["", "optimizer_batch", "augmentation", "lr_scaling", "batch_shapes", "oom_mitigations", "batch_ramp"]
#: fp32: float32 throughout; amp: float16 autocast with loss scaling; bf16: bfloat16 mixed precision
Precision = Literal["fp32", "amp", "bf16"]
#: the arithmetic of float32 convolutions and matmuls on a GPU: ieee (true float32 everywhere), tf32 (TensorFloat-32
#: tensor cores for convolutions and matmuls, Ampere and newer), framework-default (each framework as installed, its
#: actual mode read back and recorded); docs/precision.md, "Math mode"
MathMode = Literal["ieee", "tf32", "framework-default"]

DEVICES: tuple[str, ...] = get_args(Device)
OPTIMIZERS: tuple[str, ...] = get_args(OptimizerName)
LR_POLICIES: tuple[str, ...] = get_args(LrPolicy)
DATA_LAYOUTS: tuple[str, ...] = get_args(DataLayout)
DENORMALS: tuple[str, ...] = get_args(Denormals)
AUGMENTS: tuple[str, ...] = get_args(Augment)
STUDIES: tuple[str, ...] = get_args(Study)
PRECISIONS: tuple[str, ...] = get_args(Precision)
MATH_MODES: tuple[str, ...] = get_args(MathMode)
