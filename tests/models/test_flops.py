"""FLOPs per sample from the model description, checked against a count by hand (harness/flops.py)."""

from __future__ import annotations

import pytest

from harness.flops import forward_flop_per_sample, gpu_peak_tflops, mfu_pct, train_flop_per_sample
from harness.models import build_description


def test_osu_cnn_on_digits_matches_a_hand_count():
    desc = build_description("osu_cnn", (1, 8, 8), 10)
    # conv 3x3, 1 -> 32 channels, same padding on 8x8: 2 * 9 * 1 * 32 * 64 = 36,864
    # pool 2 -> 32x4x4 = 512 features; dense 512 -> 128: 2 * 512 * 128 = 131,072; dense 128 -> 10: 2,560
    assert forward_flop_per_sample(desc) == [36_864.0, 131_072.0, 2_560.0]
    forward = 36_864 + 131_072 + 2_560
    # backward: weight and input gradients of every weighted layer, but no input gradient for the conv on the data
    assert train_flop_per_sample(desc) == 3 * forward - 36_864 == 474_624


def test_osu_cnn_on_cifar_shape_matches_a_hand_count():
    desc = build_description("osu_cnn", (3, 32, 32), 10)
    conv = 2 * 9 * 3 * 32 * 32 * 32
    dense1 = 2 * (32 * 16 * 16) * 128
    dense2 = 2 * 128 * 10
    assert train_flop_per_sample(desc) == 3 * (conv + dense1 + dense2) - conv


def test_mfu_needs_a_known_card_and_never_guesses():
    assert gpu_peak_tflops("NVIDIA H100 80GB HBM3", "fp32") == 67.0
    assert gpu_peak_tflops("NVIDIA H100 PCIe", "fp32") == 51.0
    assert gpu_peak_tflops("Some Future GPU", "fp32") is None
    assert gpu_peak_tflops(None, "fp32") is None
    assert mfu_pct(6700.0, "NVIDIA H100 80GB HBM3", "fp32") == pytest.approx(10.0)
    assert mfu_pct(6700.0, "cpu", "fp32") is None
    assert mfu_pct(None, "NVIDIA H100 80GB HBM3", "fp32") is None


def test_residual_networks_count_their_blocks_against_published_figures():
    """ResNet-18 at 224x224: 1.81 G multiply-adds (torchvision's "GFLOPS"); ResNet-20 at 32x32: ~41 M (He 2016).

    Counted only if the walk enters the residual blocks: the top level alone holds 2 of ResNet-18's 21 layers.
    """
    r18 = forward_flop_per_sample(build_description("resnet18", (3, 224, 224), 1000))
    assert len(r18) == 21  # stem conv, 8 blocks x 2 convs, 3 projection shortcuts, the classifier
    assert sum(r18) / 2 == pytest.approx(1.814e9, rel=1e-3)
    r20 = forward_flop_per_sample(build_description("resnet20", (3, 32, 32), 10))
    assert sum(r20) / 2 == pytest.approx(41e6, rel=0.01)
    # after the stride-2 stem conv and the stride-2 pool, the first block's convs see 56x56
    assert r18[1] == 2 * 9 * 64 * 64 * 56 * 56
    # the second stage opens with a stride-2 conv (body) and a stride-2 1x1 projection (shortcut): 28x28 out
    assert r18[5] == 2 * 9 * 64 * 128 * 28 * 28
    assert r18[7] == 2 * 1 * 64 * 128 * 28 * 28


def test_each_arithmetic_has_its_dense_peak_and_names_match_the_right_card():
    from harness.flops import mfu
    from harness.gpu_peaks import GPU_PEAKS, find_gpu

    h100 = "NVIDIA H100 80GB HBM3"
    assert gpu_peak_tflops(h100, "fp32", "tf32") == pytest.approx(494.7)  # 989.4 with sparsity, halved
    assert gpu_peak_tflops(h100, "fp32", "ieee") == 67.0
    assert gpu_peak_tflops(h100, "bf16", "ieee") == gpu_peak_tflops(h100, "amp", "tf32") == pytest.approx(989.4)
    assert gpu_peak_tflops("NVIDIA H100 PCIe", "fp32", "tf32") == 378.0
    assert gpu_peak_tflops(h100, "fp32", "conv-tf32") is None and gpu_peak_tflops(h100, "fp32", None) is None
    tf32 = mfu(49_470.0, h100, "fp32", "tf32")
    assert tf32.pct == pytest.approx(10.0) and tf32.peak_tflops == pytest.approx(494.7) and "tf32" in tf32.note
    assert mfu(6_700.0, h100, "fp32", "ieee").pct == pytest.approx(10.0)
    # the issue's H100 JAX trial: 105.5 % of the fp32 peak, while TF32 ran; against TF32's peak it is 14.3 %
    jax = 0.01 * 105.5 * 67_000.0
    assert mfu(jax, h100, "fp32", "ieee").pct is None  # above 100 %: not published
    assert mfu(jax, h100, "fp32", "tf32").pct == pytest.approx(105.5 * 67.0 / 494.7)
    names = {"NVIDIA A100-SXM4-80GB": "A100", "NVIDIA A100 80GB PCIe": "A100", "NVIDIA A10": "A10",
             "NVIDIA L4": "L4", "NVIDIA GeForce RTX 4090": "GeForce RTX 4090", "Tesla V100-SXM2-16GB": "V100 SXM2",
             "Tesla V100-PCIE-32GB": "V100 PCIe", "Tesla T4": "T4", "GeForce GTX 1060 6GB": "GeForce GTX 1060 6GB",
             "NVIDIA GeForce GTX 1060 3GB": "GeForce GTX 1060 3GB", "NVIDIA H100 NVL": "H100 NVL",
             "NVIDIA H200": "H200 SXM"}
    for name, label in names.items():
        row = find_gpu(name)
        assert row is not None and row.label == label, name
    for other in ("NVIDIA A10G", "NVIDIA L40S", "NVIDIA L40", "NVIDIA GeForce RTX 4090 D", "AMD Instinct MI300X",
                  "NVIDIA GeForce RTX 4090 Laptop GPU", "GeForce GTX 1060 with Max-Q Design", "NVIDIA GH200 480GB"):
        assert find_gpu(other) is None, other  # near names are other cards: no MFU rather than a wrong one
    for row in GPU_PEAKS:  # dense tensor peaks are above the CUDA-core float32 one, and TF32 is below 16-bit
        tensor = [p for p in (row.tf32_tflops, row.bf16_tflops, row.fp16_tflops) if p is not None]
        assert all(p >= row.fp32_tflops for p in tensor), row.label
        if row.tf32_tflops is not None and row.bf16_tflops is not None:
            assert row.tf32_tflops <= row.bf16_tflops, row.label
    assert gpu_peak_tflops("Tesla V100-SXM2-16GB", "fp32", "tf32") is None  # Volta has no TF32 units
    assert mfu(1.0, "Tesla V100-SXM2-16GB", "bf16", "ieee").pct is None
