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
