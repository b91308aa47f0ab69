"""Harness-side augmentation: it changes the pixels, and depends only on (seed, epoch, sample)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.data.augment import Augmenter, apply, check_applicable, draws
from harness.errors import ConfigError


def images(n: int = 32, c: int = 2, h: int = 10, w: int = 12) -> np.ndarray:
    return np.random.default_rng(0).random((n, c, h, w), dtype=np.float32) + 0.5  # no zero pixels


def test_crop_flip_changes_the_pixels_and_keeps_the_shape():
    x = images()
    out = Augmenter("crop_flip", 3, seed=0, n_train=len(x))(x, np.arange(len(x)), epoch=0)
    assert out.shape == x.shape and out.dtype == np.float32
    changed = np.any(out != x, axis=(1, 2, 3))
    assert changed.mean() > 0.8  # a sample stays as it was only with offset (3, 3) and no flip
    assert np.any(out == 0)  # the zero padding shows at the borders


def test_none_is_the_identity():
    x = images()
    assert Augmenter("none", 4, 0, len(x))(x, np.arange(len(x)), 0) is x


def test_flip_mirrors_and_crop_shifts_exactly():
    x = images(n=4)
    d = draws("flip", 2, seed=1, epoch=0, n_train=4)
    out = apply(x, np.arange(4), d, 2)
    for i in range(4):
        np.testing.assert_array_equal(out[i], x[i, :, :, ::-1] if d.flip[i] else x[i])
    d = draws("crop", 2, seed=1, epoch=0, n_train=4)
    out = apply(x, np.arange(4), d, 2)
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    for i in range(4):
        dy, dx = d.dy_px[i], d.dx_px[i]
        np.testing.assert_array_equal(out[i], padded[i, :, dy : dy + 10, dx : dx + 12])


def test_a_sample_is_augmented_the_same_whatever_the_batch_it_is_in():
    """What makes it identical across frameworks, batch sizes and accumulation: (seed, epoch, index) only."""
    x = images()
    whole = Augmenter("crop_flip", 3, 7, len(x))(x, np.arange(len(x)), 2)
    idx = np.array([5, 17, 30])
    part = Augmenter("crop_flip", 3, 7, len(x))(x[idx], idx, 2)
    np.testing.assert_array_equal(part, whole[idx])


def test_epochs_and_seeds_draw_differently():
    x = images()
    idx = np.arange(len(x))
    a = Augmenter("crop_flip", 3, 0, len(x))
    e0, e1 = a(x, idx, 0).copy(), a(x, idx, 1)
    assert not np.array_equal(e0, e1)
    assert not np.array_equal(e0, Augmenter("crop_flip", 3, 1, len(x))(x, idx, 0))
    np.testing.assert_array_equal(e0, Augmenter("crop_flip", 3, 0, len(x))(x, idx, 0))


@pytest.mark.parametrize("kind, pad, shape, words", [
    ("crop", 4, (1, 8, 8), ["augment_pad_px = 4", "between 1 and 3"]),
    ("flip", 4, (64,), ["needs images", "(64,)"]),
    ("spin", 1, (1, 8, 8), ["'spin'", "crop_flip"]),
])
def test_inapplicable_augmentation_is_refused(kind, pad, shape, words):
    with pytest.raises(ConfigError) as e:
        check_applicable(kind, pad, shape)
    for w in words:
        assert w in str(e.value)
    check_applicable("none", pad, shape)
