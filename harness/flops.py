"""Floating-point work of a training step, counted from the model description, and known GPU peaks.

Convention (the usual one of MFU papers): a multiply-add is 2 FLOPs; only convolutions and dense
layers are counted (bias adds, batch norm, ReLU, pooling and the loss are a few FLOPs per activation,
under 1% of ``osu_cnn``'s and ``deep_cnn``'s work, and they are memory-bound, not FLOP-bound).
A training step per sample is the forward pass, plus a backward pass that computes for every weighted
layer the gradient of its weights (as costly as its forward) and of its input (as costly again),
except for the first weighted layer, whose input is the data and needs no gradient (frameworks skip
it). So training = 3 x forward - forward of the first weighted layer.

MFU (model FLOPs utilisation) divides the achieved FLOP/s by the card's dense peak for the arithmetic that ran
(:func:`mfu`): an fp32 trial's math mode as its framework read it back (``ieee``: the CUDA-core float32 peak;
``tf32``: the TF32 tensor-core peak), bf16 and amp their tensor-core peaks. The peaks, with their sources, are in
:mod:`harness.gpu_peaks`. A card not in the table, a math mode that mixes arithmetics or is unknown, and a result
above 100 % (impossible: the peak or the recorded arithmetic is wrong) give ``None`` with the reason, never a guess.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.gpu_peaks import find_gpu
from harness.models import Conv2D, Dense, Layer, ModelDescription, Residual, layer_output_shape


def forward_flop_per_sample(desc: ModelDescription) -> list[float]:
    """Forward FLOPs per sample of each weighted layer (convolutions and dense layers), in weight order.

    A residual block's layers count like any others (its body, then its shortcut); the add is not counted.
    """
    return _forward_flops(desc.layers, tuple(desc.input_shape))


def _forward_flops(layers: Sequence[Layer], shape: tuple[int, ...]) -> list[float]:
    out: list[float] = []
    for layer in layers:
        after = tuple(layer_output_shape(layer, shape))
        if isinstance(layer, Conv2D):
            c_out, h_out, w_out = after
            out.append(2.0 * layer.kernel * layer.kernel * shape[0] * c_out * h_out * w_out)
        elif isinstance(layer, Dense):
            out.append(2.0 * shape[0] * layer.units)
        elif isinstance(layer, Residual):
            out += _forward_flops(layer.body, shape) + _forward_flops(layer.shortcut, shape)
        shape = after
    return out


def train_flop_per_sample(desc: ModelDescription) -> float:
    """FLOPs of one training step per sample: forward + backward, by the convention of the module docstring."""
    per_layer = forward_flop_per_sample(desc)
    if not per_layer:
        return 0.0
    return 3.0 * sum(per_layer) - per_layer[0]


#: the tensor arithmetic of each mixed precision (fp32 is decided by the math mode)
_PRECISION_ARITHMETIC = {"bf16": "bf16", "amp": "fp16"}
#: the arithmetic of an fp32 trial by the math mode its framework read back
_MATH_ARITHMETIC = {"ieee": "fp32", "tf32": "tf32"}
#: the highest MFU that can be published: more is impossible, so the peak or the recorded arithmetic is wrong
MFU_MAX_PCT = 100.0


@dataclass(frozen=True)
class Mfu:
    """Model FLOPs utilisation of one trial: ``pct`` against ``peak_tflops`` (the card's dense peak for
    ``arithmetic``), or ``pct`` None with ``note`` saying why none is published."""

    pct: float | None
    peak_tflops: float | None
    arithmetic: str | None
    note: str


def arithmetic_of(precision: str, math_mode: str | None) -> tuple[str | None, str]:
    """(the arithmetic a trial's convolutions and matmuls ran in, or None; why not) from its precision and the math
    mode read back from its framework: bf16 -> bf16, amp -> fp16 tensor cores; fp32 under ``ieee`` -> CUDA-core
    fp32, under ``tf32`` -> TF32 tensor cores; anything else (one of the two in TF32, unknown, not recorded) has no
    single arithmetic."""
    if precision in _PRECISION_ARITHMETIC:
        return _PRECISION_ARITHMETIC[precision], ""
    if precision != "fp32":
        return None, f"precision {precision!r} has no known arithmetic"
    if math_mode in _MATH_ARITHMETIC:
        return _MATH_ARITHMETIC[math_mode], ""
    if math_mode in ("conv-tf32", "matmul-tf32"):
        return None, (f"math mode {math_mode}: convolutions and matmuls ran in different arithmetics, so no single "
                      "peak applies (set math_mode = 'ieee' or 'tf32')")
    return None, f"the math mode that ran is {math_mode or 'not recorded'}, so the peak to divide by is unknown"


def gpu_peak_tflops(gpu_name: str | None, precision: str, math_mode: str | None = "ieee") -> float | None:
    """The card's dense peak TFLOP/s for what a trial of ``precision`` under ``math_mode`` ran (harness.gpu_peaks),
    or None when the card, or its figure for that arithmetic, is unknown."""
    arithmetic, _ = arithmetic_of(precision, math_mode)
    row = find_gpu(gpu_name)
    return None if row is None or arithmetic is None else row.tflops(arithmetic)


def mfu(achieved_gflop_per_s: float | None, gpu_name: str | None, precision: str, math_mode: str | None) -> Mfu:
    """Achieved FLOP/s as a percentage of the dense peak of the arithmetic that ran (PaLM's MFU, appendix B).

    Never a wrong figure: an unknown card, an arithmetic the card has no peak for, a math mode that mixes two
    arithmetics or was not read back give no MFU; so does a result above :data:`MFU_MAX_PCT`, which is impossible
    and means the peak or the recorded arithmetic is wrong. ``note`` says which peak was used, or why none.
    """
    if achieved_gflop_per_s is None or not math.isfinite(achieved_gflop_per_s) or achieved_gflop_per_s < 0:
        return Mfu(None, None, None, "no achieved FLOP/s (a native model, or no timed steps)")
    row = find_gpu(gpu_name)
    if row is None:
        return Mfu(None, None, None, f"GPU {gpu_name!r} is not in the peak table (harness/gpu_peaks.py)")
    arithmetic, why = arithmetic_of(precision, math_mode)
    if arithmetic is None:
        return Mfu(None, None, None, why)
    peak = row.tflops(arithmetic)
    if peak is None:
        return Mfu(None, None, arithmetic, f"the {row.label} has no {arithmetic} peak (no such units)")
    pct = achieved_gflop_per_s / (peak * 1e3) * 100.0
    if pct > MFU_MAX_PCT:
        return Mfu(None, peak, arithmetic, f"{pct:.1f} % of the {row.label}'s dense {arithmetic} peak ({peak:g} "
                                           "TFLOP/s) is impossible: the arithmetic recorded is not what ran, or the "
                                           "peak is wrong; not published")
    return Mfu(pct, peak, arithmetic, f"against the {row.label}'s dense {arithmetic} peak, {peak:g} TFLOP/s")


def mfu_pct(achieved_gflop_per_s: float | None, gpu_name: str | None, precision: str,
            math_mode: str | None = "ieee") -> float | None:
    """:func:`mfu`'s percentage alone (None where none is published)."""
    return mfu(achieved_gflop_per_s, gpu_name, precision, math_mode).pct
