"""Dense peak TFLOP/s of known GPUs, per arithmetic: the denominators of MFU (harness.flops.mfu).

One row per card (or per form factor where the peaks differ), matched against the NVML / framework device name by a
regular expression, first match wins (so ``H100 ... PCIe`` comes before the plain ``H100`` of the SXM module, and the
patterns keep ``A10`` from matching ``A100`` or ``A10G``, and ``L4`` from matching ``L40S``). A card not in the table,
or an arithmetic the card has no figure for, has no peak (None): MFU is then not published, never guessed.

The arithmetics: ``fp32`` is the CUDA-core (non-tensor) float32 rate, what ``math_mode = "ieee"`` runs on;
``tf32``, ``bf16``, ``fp16`` are the tensor-core rates with float32 accumulation (what TF32 math, ``precision =
"bf16"`` and ``precision = "amp"`` run on). All are *dense*: NVIDIA's data sheets for Ampere and later print the
tensor figures "with sparsity" (2:4 structured sparsity, which no batchscope model uses), twice the dense rate, so
those printed figures are halved here. Where a data sheet gives a boost-clock figure, that is the one used.

Sources (data sheets and architecture white papers, as published by NVIDIA):

* H100 SXM5 / PCIe / NVL: "NVIDIA H100 Tensor Core GPU" data sheet (2023): FP32 67 / 51 / 60; TF32 989 / 756 / 835*,
  BF16 and FP16 1,979 / 1,513 / 1,671* (* with sparsity: dense 494.7 / 378 / 417.5 and 989.4 / 756.5 / 835.5).
* H200 SXM / NVL: "NVIDIA H200 Tensor Core GPU" data sheet (2024): the H100 SXM5's / H100 NVL's compute figures.
* A100 (SXM4 and PCIe, 40 and 80 GB): "NVIDIA A100 Tensor Core GPU" data sheet: FP32 19.5; TF32 156 (312*);
  BF16 and FP16 312 (624*).
* A10: "NVIDIA A10 Tensor Core GPU" data sheet: FP32 31.2; TF32 62.5 (125*); BF16 and FP16 125 (250*).
* L4: "NVIDIA L4 Tensor Core GPU" data sheet: FP32 30.3; TF32 120*; BF16 and FP16 242* (dense 60, 121).
* GeForce RTX 4090: "NVIDIA Ada GPU Architecture" white paper, appendix table: FP32 82.6; TF32 82.6 (165.2*);
  BF16 and FP16 with FP32 accumulation 165.2 (330.4*) (GeForce runs FP32-accumulate at half the FP16-accumulate rate).
* V100 SXM2 / PCIe / V100S: "NVIDIA V100 Tensor Core GPU" data sheet: FP32 15.7 / 14 / 16.4; tensor (FP16 with
  FP32 accumulation) 125 / 112 / 130; no TF32, no BF16 (Volta).
* T4: "NVIDIA T4 Tensor Core GPU" data sheet: FP32 8.1; FP16 mixed precision 65; no TF32, no BF16 (Turing).
* GeForce GTX 1060 6 GB / 3 GB (the seed study's card): no tensor cores (Pascal); FP32 = 2 x CUDA cores (1,280 /
  1,152) x 1,708 MHz boost (NVIDIA's GTX 1060 specifications page) = 4.4 / 3.9. Its float16 runs at 1/64 of the
  float32 rate, not a rate worth a denominator, so it has no fp16 figure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError

#: the arithmetics a peak is given for
ARITHMETICS = ("fp32", "tf32", "bf16", "fp16")


@dataclass(frozen=True)
class GpuPeak:
    """One card's dense peaks in TFLOP/s (None: the card has no such units, or no published figure)."""

    pattern: str  # a regular expression searched (case-insensitive) in the device name
    label: str  # the card as named in messages and notes
    fp32_tflops: float
    tf32_tflops: float | None = None
    bf16_tflops: float | None = None
    fp16_tflops: float | None = None

    def tflops(self, arithmetic: str) -> float | None:
        """The dense peak for ``arithmetic`` (one of :data:`ARITHMETICS`)."""
        return {"fp32": self.fp32_tflops, "tf32": self.tf32_tflops, "bf16": self.bf16_tflops,
                "fp16": self.fp16_tflops}.get(arithmetic)


#: dense peaks, first match wins (more specific patterns first); sources in the module docstring
GPU_PEAKS: tuple[GpuPeak, ...] = (
    GpuPeak(r"\bH200\b.*\bNVL\b", "H200 NVL", 60.0, 417.5, 835.5, 835.5),
    GpuPeak(r"\bH200\b", "H200 SXM", 67.0, 494.7, 989.4, 989.4),
    GpuPeak(r"\bH100\b.*\bPCIe\b", "H100 PCIe", 51.0, 378.0, 756.5, 756.5),
    GpuPeak(r"\bH100\b.*\bNVL\b", "H100 NVL", 60.0, 417.5, 835.5, 835.5),
    GpuPeak(r"\bH100\b", "H100 SXM", 67.0, 494.7, 989.4, 989.4),
    GpuPeak(r"\bA100\b", "A100", 19.5, 156.0, 312.0, 312.0),  # SXM4 and PCIe: the same peaks
    GpuPeak(r"\bA10\b", "A10", 31.2, 62.5, 125.0, 125.0),  # not A10G (AWS's variant: other clocks)
    GpuPeak(r"\bL4\b", "L4", 30.3, 60.0, 121.0, 121.0),  # not L40 / L40S
    GpuPeak(r"\bRTX 4090\b(?! D\b)(?!.*\b(Laptop|Mobile)\b)", "GeForce RTX 4090", 82.6, 82.6, 165.2, 165.2),
    GpuPeak(r"\bV100S\b", "V100S PCIe", 16.4, None, None, 130.0),
    GpuPeak(r"\bV100\b.*\bPCIE\b", "V100 PCIe", 14.0, None, None, 112.0),
    GpuPeak(r"\bV100\b", "V100 SXM2", 15.7, None, None, 125.0),
    GpuPeak(r"\bT4\b", "T4", 8.1, None, None, 65.0),
    # desktop cards only: the notebook ones (Max-Q, Mobile) run at other clocks
    GpuPeak(r"\bGTX 1060 3GB\b(?!.*\b(Max-Q|Mobile|Laptop)\b)", "GeForce GTX 1060 3GB", 3.9),
    GpuPeak(r"\bGTX 1060\b(?!.*\b(Max-Q|Mobile|Laptop)\b)", "GeForce GTX 1060 6GB", 4.4),
)


def find_gpu(gpu_name: str | None) -> GpuPeak | None:
    """The table's row for the device called ``gpu_name`` (as NVML or the framework names it), or None."""
    if not gpu_name:
        return None
    return next((row for row in GPU_PEAKS if re.search(row.pattern, gpu_name, re.IGNORECASE)), None)


def has_tf32_units(gpu_name: str | None) -> bool | None:
    """Whether the named card has TF32 tensor cores (by the table); None for a card not in it."""
    row = find_gpu(gpu_name)
    return None if row is None else row.tf32_tflops is not None


def refuse_tf32_without_units(math_modes: Iterable[str], gpus: Sequence[Mapping[str, Any]], source: str) -> None:
    """Refuse ``math_mode = "tf32"`` before anything runs where every GPU NVML lists is known (by the table) to have no
    TF32 tensor cores (Volta, Turing, Pascal): it could not be applied. Unknown cards are left to the worker, whose
    adapter reads the mode back and fails the trial if TF32 did not run."""
    if "tf32" not in set(math_modes) or not gpus:
        return
    names = [str(g.get("name") or "") for g in gpus]
    if all(has_tf32_units(name) is False for name in names):
        raise ConfigError(f"{source}: math_mode = 'tf32' was asked for, but {', '.join(names)} has no TF32 tensor "
                          "cores (they came with Ampere, compute capability 8.0), so it would not be applied; set "
                          "math_mode = 'ieee' (what this GPU computes float32 in) or 'framework-default'")
