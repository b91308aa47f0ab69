"""Floating-point work of a training step, counted from the model description, and known GPU peaks.

Convention (the usual one of MFU papers): a multiply-add is 2 FLOPs; only convolutions and dense
layers are counted (bias adds, batch norm, ReLU, pooling and the loss are a few FLOPs per activation,
under 1% of ``osu_cnn``'s and ``deep_cnn``'s work, and they are memory-bound, not FLOP-bound).
A training step per sample is the forward pass, plus a backward pass that computes for every weighted
layer the gradient of its weights (as costly as its forward) and of its input (as costly again),
except for the first weighted layer, whose input is the data and needs no gradient (frameworks skip
it). So training = 3 x forward - forward of the first weighted layer.

MFU (model FLOPs utilisation) divides the achieved FLOP/s by the card's peak for the precision that
ran. The table holds dense peaks from the vendors' data sheets; fp32 is the CUDA-core figure, since
batchscope's fp32 runs do not ask for TF32 (cuDNN may still pick TF32 convolutions on Ampere and
later, so an fp32 MFU there can exceed what CUDA cores alone allow: the figure is then an upper-bound
reading, said so in docs/report.md). A card not in the table gives ``None`` ("unknown"), never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.models import Conv2D, Dense, Layer, ModelDescription, Residual, layer_output_shape

#: dense peak TFLOP/s per precision, by a substring of the NVML/PyTorch device name (first match wins,
#: so the more specific names come first)
GPU_PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200", {"fp32": 67.0, "bf16": 989.0, "fp16": 989.0}),
    ("H100 PCIe", {"fp32": 51.0, "bf16": 756.0, "fp16": 756.0}),
    ("H100", {"fp32": 67.0, "bf16": 989.0, "fp16": 989.0}),  # SXM
    ("A100", {"fp32": 19.5, "bf16": 312.0, "fp16": 312.0}),
    ("L4", {"fp32": 30.3, "bf16": 121.0, "fp16": 121.0}),
    ("V100", {"fp32": 15.7, "fp16": 125.0}),
    ("T4", {"fp32": 8.1, "fp16": 65.0}),
    ("GTX 1060", {"fp32": 4.4}),
)


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


def gpu_peak_tflops(gpu_name: str | None, precision: str) -> float | None:
    """The card's dense peak TFLOP/s for ``precision`` (``fp32``; ``amp`` reads as fp16), or None if unknown."""
    if not gpu_name:
        return None
    key = "fp16" if precision == "amp" else precision
    for name, peaks in GPU_PEAK_TFLOPS:
        if name.lower() in gpu_name.lower():
            return peaks.get(key)
    return None


def mfu_pct(achieved_gflop_per_s: float | None, gpu_name: str | None, precision: str) -> float | None:
    """Achieved FLOP/s as a percentage of the card's peak, or None (no GPU, unknown card or precision)."""
    peak = gpu_peak_tflops(gpu_name, precision)
    if achieved_gflop_per_s is None or peak is None:
        return None
    return achieved_gflop_per_s / (peak * 1e3) * 100.0
