"""The framework-neutral model catalogue: shapes, parameter counts and initial weights."""

from __future__ import annotations

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.models import build_description, init_weights


def test_osu_cnn_on_cifar_matches_a_hand_count():
    desc = build_description("osu_cnn", (3, 32, 32), 10)
    conv = 32 * 3 * 3 * 3 + 32
    dense = 32 * 16 * 16 * 128 + 128
    out = 128 * 10 + 10
    assert desc.param_count() == conv + dense + out == 1_050_890
    assert desc.output_shape == (10,)


def test_deep_cnn_has_gigabytes_of_activations_at_batch_1024():
    desc = build_description("deep_cnn", (3, 32, 32), 10)
    gib = desc.activation_floats_per_sample() * 4 * 1024 / 2**30
    assert gib > 2, gib
    assert build_description("deep_cnn", (1, 8, 8), 10).output_shape == (10,)  # small inputs still fit


def test_init_weights_are_reproducible_and_follow_the_schemes():
    desc = build_description("osu_cnn", (1, 28, 28), 10)
    a, b = init_weights(desc, 3), init_weights(desc, 3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], init_weights(desc, 4)[0])
    assert [w.shape for w in a] == desc.weight_shapes()
    conv_limit = np.sqrt(6 / (1 * 9))
    assert np.abs(a[0]).max() <= conv_limit and np.abs(a[0]).max() > 0.9 * conv_limit
    assert not a[1].any()  # bias zeros
    dense_limit = np.sqrt(6 / (128 + 10))  # glorot on the output layer
    assert np.abs(a[4]).max() <= dense_limit


def test_unknown_model_and_bad_shapes_are_refused():
    with pytest.raises(ConfigError, match="unknown model 'vgg'"):
        build_description("vgg", (3, 32, 32), 10)
    with pytest.raises(ConfigError, match="does not fit input shape"):
        build_description("osu_cnn", (1, 1, 1), 10)


def test_residual_networks_have_the_published_parameter_counts():
    assert build_description("resnet18", (3, 224, 224), 1000).param_count() == 11_689_512  # torchvision's count
    resnet20 = build_description("resnet20", (3, 32, 32), 10)
    assert resnet20.param_count() == 272_474  # projection shortcuts; the paper's zero-padding ones: 0.27 M
    assert resnet20.shapes()[-3:] == [(64, 8, 8), (64,), (10,)]
    assert build_description("resnet18", (3, 224, 224), 1000).shapes()[3] == (64, 56, 56)  # stem + pool: /4
    assert build_description("resnet18", (3, 32, 32), 10).output_shape == (10,)  # any input size


def test_descriptions_travel_as_json_exactly():
    import json

    from harness.models import ModelDescription

    for name in ("resnet18", "deep_cnn", "osu_cnn"):
        desc = build_description(name, (3, 32, 32), 10)
        assert ModelDescription.from_spec(json.loads(json.dumps(desc.to_spec()))) == desc


def test_residual_paths_must_agree_and_strides_shrink_like_pytorch():
    from harness.models import Conv2D, Dense, GlobalAvgPool, ModelDescription, Residual, conv_output_side

    bad = ModelDescription("m", (3, 8, 8), 2, (Residual(body=(Conv2D(4, 3, stride=2),)), GlobalAvgPool(), Dense(2)))
    with pytest.raises(ConfigError, match=r"body gives \(4, 4, 4\) but its shortcut gives \(3, 8, 8\)"):
        bad.param_count()
    # PyTorch's Conv2d(k, stride=s, padding=k // 2): floor((H + 2*(k//2) - k) / s) + 1
    assert [conv_output_side(h, 3, 2, "same") for h in (7, 8, 32)] == [4, 4, 16]
    assert conv_output_side(224, 7, 2, "same") == 112 and conv_output_side(32, 1, 2, "valid") == 16


def test_a_tiny_models_state_is_printed_as_the_size_it_is_not_as_zero(capsys):
    from harness.cli.maxbatch import print_forecast
    from harness.cli.maxbatch_output import mib_text
    from harness.maxbatch.request import MaxBatchRequest

    desc = build_description("tiny_cnn", (3, 64, 64), 10)
    print_forecast(desc, MaxBatchRequest(framework="pytorch", model="tiny_cnn", optimizer="sgd", momentum=0.9), 400.0)
    state_mib = desc.param_count() * 4 * 3 / 2**20  # weights, gradients, momentum: a few KiB
    assert 0 < state_mib < 0.05
    text = capsys.readouterr().out
    assert f"model state {state_mib:.3g} MiB" in text and "model state 0.0 MiB" not in text
    assert [mib_text(x) for x in (0.0, 0.0114, 0.05, 337.24)] == ["0.0", "0.0114", "0.1", "337.2"]


def test_the_forecast_is_the_seeds_formula_from_the_description_alone(capsys):
    from harness.cli.maxbatch import print_forecast
    from harness.maxbatch.request import MaxBatchRequest

    desc = build_description("resnet20", (3, 32, 32), 10)
    req = MaxBatchRequest(framework="pytorch", model="resnet20", optimizer="sgd", momentum=0.9)
    print_forecast(desc, req, 1000.0)
    text = capsys.readouterr().out
    state_mib = 272_474 * 4 * 3 / 2**20  # weights, gradients, momentum
    per_sample_mib = desc.activation_floats_per_sample() * 4 * 2 / 2**20  # outputs and their gradients
    expected = int((1000 - state_mib) / per_sample_mib)
    assert "272,474 parameters" in text and f"model state {state_mib:.1f} MiB" in text
    assert f"about {expected:,} samples fit in 1000 MiB (power of two: {1 << (expected.bit_length() - 1)})" in text
