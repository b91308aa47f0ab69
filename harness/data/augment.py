"""Augmentation done by the harness, in NumPy, so that every framework trains on the same pixels.

Frameworks each have their own random crop and flip (``torchvision``, ``keras.layers.RandomCrop``,
``mx.image``), with their own random streams: a study that compares batch sizes *across* frameworks
would then also compare augmentation streams. Here the worker augments the batch before handing it to
the adapter, and every random draw depends only on (seed, epoch, sample index):

* one generator per (seed, epoch) draws, for every training sample at once, its crop offsets and
  whether it is flipped; a sample's augmentation is therefore the same whatever the batch size, the
  accumulation steps or the framework, and changes from one epoch to the next;
* ``crop``: zero-pad ``pad_px`` pixels on each side, then cut an H x W window at a random offset in
  [0, 2 * pad_px] (Keras' and torchvision's "random crop with padding");
* ``flip``: mirror left-right with probability 1/2.

Flipping suits natural images (CIFAR-10, cats and dogs); on digits it makes some classes ambiguous,
so the studies on MNIST use it knowingly (the claim under test came from natural images).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import ConfigError

KINDS = ("none", "crop", "flip", "crop_flip")
#: mixed into the seed so the augmentation stream is not the data-order or weight stream of the same seed
_STREAM = 0xA06


@dataclass(frozen=True)
class EpochDraws:
    """Every training sample's augmentation in one epoch: crop offsets (rows, columns) and flips."""

    dy_px: np.ndarray  # (n_train,) int, in [0, 2 * pad_px]
    dx_px: np.ndarray
    flip: np.ndarray  # (n_train,) bool


def check_applicable(kind: str, pad_px: int, input_shape: tuple[int, ...]) -> None:
    """Refuse augmentation that cannot apply to this data (not an image, or padding as big as it)."""
    if kind not in KINDS:
        raise ConfigError(f"augment = {kind!r} is not one of {', '.join(KINDS)}")
    if kind == "none":
        return
    if len(input_shape) != 3 or min(input_shape[1:]) < 4:
        raise ConfigError(f"augment = {kind!r} needs images (channels, height, width) of at least 4x4 pixels; "
                          f"this data set's samples are {tuple(input_shape)}: use augment = 'none'")
    if "crop" in kind and not 0 < pad_px < min(input_shape[1:]) // 2:
        raise ConfigError(f"augment_pad_px = {pad_px} must be between 1 and {min(input_shape[1:]) // 2 - 1} "
                          f"for {input_shape[1]}x{input_shape[2]} images")


def draws(kind: str, pad_px: int, seed: int, epoch: int, n_train: int) -> EpochDraws:
    """The augmentation of every training sample in ``epoch`` (depends on nothing else)."""
    rng = np.random.default_rng([_STREAM, seed, epoch])
    crop = "crop" in kind
    dy = rng.integers(0, 2 * pad_px + 1, size=n_train) if crop else np.full(n_train, pad_px)
    dx = rng.integers(0, 2 * pad_px + 1, size=n_train) if crop else np.full(n_train, pad_px)
    flip = rng.random(n_train) < 0.5 if "flip" in kind else np.zeros(n_train, dtype=bool)
    return EpochDraws(dy_px=dy, dx_px=dx, flip=flip)


def apply(x: np.ndarray, idx: np.ndarray, d: EpochDraws, pad_px: int) -> np.ndarray:
    """Augment the batch ``x`` (N, C, H, W float32) whose rows are training samples ``idx``."""
    n, _, h, w = x.shape
    padded = np.pad(np.asarray(x, dtype=np.float32), ((0, 0), (0, 0), (pad_px, pad_px), (pad_px, pad_px)))
    rows = d.dy_px[idx][:, None] + np.arange(h)[None, :]  # (N, H): the window's rows per sample
    cols = d.dx_px[idx][:, None] + np.arange(w)[None, :]
    cols = np.where(d.flip[idx][:, None], cols[:, ::-1], cols)  # a flip reads the window right to left
    out = padded[np.arange(n)[:, None, None, None], np.arange(x.shape[1])[None, :, None, None],
                 rows[:, None, :, None], cols[:, None, None, :]]
    return np.ascontiguousarray(out, dtype=np.float32)


class Augmenter:
    """The worker's augmenter: draws once per epoch, applies per batch."""

    def __init__(self, kind: str, pad_px: int, seed: int, n_train: int) -> None:
        self.kind, self.pad_px, self.seed, self.n_train = kind, pad_px, seed, n_train
        self._epoch: int | None = None
        self._draws: EpochDraws | None = None

    def __call__(self, x: np.ndarray, idx: np.ndarray, epoch: int) -> np.ndarray:
        """``x`` augmented as the samples ``idx`` are in ``epoch`` (``x`` itself when kind is ``none``)."""
        if self.kind == "none":
            return x
        if epoch != self._epoch:
            self._draws = draws(self.kind, self.pad_px, self.seed, epoch, self.n_train)
            self._epoch = epoch
        assert self._draws is not None
        return apply(x, idx, self._draws, self.pad_px)
