"""The resize filter of a crop (`--train-interpolation`, `--val-interpolation`): the names, and the
per-sample draw of timm's "random" train interpolation, in one place for the CPU loader
(`loader.decode`) and the GPU crops (`gpu_crop`).

timm 0.5.0 (huggingface/pytorch-image-models@93901e99) trains with `--train-interpolation random`
(train.py:219, its default): `RandomResizedCropAndInterpolation` picks `random.choice((BILINEAR,
BICUBIC))` for each image (timm/data/transforms.py:55, 141-142), i.e. each with probability 1/2.
Here the choice is one uniform draw from the sample's own stream, after its crop and flip, so a
seeded run picks the same filter for the same sample whatever the worker, and "bilinear" or
"bicubic" draw nothing (every other recipe's crops stay as they were).
"""

from __future__ import annotations

import random

import numpy as np

INTERPOLATIONS = ("bilinear", "bicubic")        # Pillow's BILINEAR and BICUBIC, antialiased
TRAIN_INTERPOLATIONS = (*INTERPOLATIONS, "random")  # random: timm's per-image choice of the two


def check(interpolation: str, *, train: bool) -> str:
    """The name, or ValueError naming the choices (random only for train crops)."""
    choices = TRAIN_INTERPOLATIONS if train else INTERPOLATIONS
    if interpolation not in choices:
        raise ValueError(f"unknown {'train' if train else 'val'} interpolation {interpolation!r}; choose one of "
                         f"{', '.join(choices)}")
    return interpolation


def draw(interpolation: str, rng: random.Random) -> str:
    """The filter of one train crop: `interpolation` itself, or for "random" bicubic with probability
    1/2 (one `rng.random()`)."""
    if interpolation != "random":
        return interpolation
    return "bicubic" if rng.random() < 0.5 else "bilinear"


def draws(interpolation: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """`draw` for a batch of `n` crops: bool [n], True where bicubic (one `rng.random(n)` for "random")."""
    if interpolation != "random":
        return np.full(n, interpolation == "bicubic")
    return rng.random(n) < 0.5
