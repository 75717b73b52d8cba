"""The batched resized crop of --gpu-decode against torchvision's per-image resized_crop."""

from __future__ import annotations

import random

import torch

from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader.gpu_crop import crop_batch


def test_batched_crop_matches_torchvision_resized_crop():
    """One float resample of the padded batch vs torchvision's per-image uint8 resized_crop: at most
    one grey level apart (rounding of its two uint8 passes), flips included."""
    from torchvision.transforms.v2 import functional as F
    g, rng = torch.Generator().manual_seed(0), random.Random(0)
    images, boxes, flips = [], [], []
    for i in range(12):
        h, w = rng.choice([(75, 100), (100, 75), (66, 100), (30, 40)])
        base = torch.randint(0, 256, (3, h // 6 + 1, w // 6 + 1), generator=g, dtype=torch.uint8)
        images.append(F.resize(base, [h, w], antialias=True))
        boxes.append(dec.random_resized_crop_params(w, h, (0.08, 1.0), (3 / 4, 4 / 3), rng) if i % 2
                     else dec.center_crop_params(w, h, 36, 32))
        flips.append(i % 3 == 0)
    for size in (16, 32, 56):  # down- and upscaling
        out = crop_batch(images, boxes, flips, size)
        for img, (top, left, h, w), flip, got in zip(images, boxes, flips, out):
            t0, l0 = int(round(top)), int(round(left))
            ref = F.resized_crop(img, t0, l0, int(round(top + h)) - t0, int(round(left + w)) - l0, [size, size],
                                 antialias=True)
            ref = ref.flip(-1) if flip else ref
            assert (got.int() - ref.int()).abs().max() <= 1
