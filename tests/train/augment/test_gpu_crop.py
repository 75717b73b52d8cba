"""The batched resized crop of --gpu-decode against torchvision's per-image resized_crop."""

from __future__ import annotations

import random

import torch

from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.augment.gpu_crop import crop_batch


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


def test_bicubic_where_asked_matches_torchvision_bicubic():
    """Per image bilinear or bicubic (the `cubic` mask, as --train-interpolation random draws it):
    the bicubic crops against torchvision's antialiased bicubic resized_crop on float pixels (one
    unclipped float resample, as ours), the others still its bilinear uint8 one; at most one level."""
    import numpy as np
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as F
    g, rng = torch.Generator().manual_seed(1), random.Random(1)
    images, boxes = [], []
    for i in range(10):
        h, w = rng.choice([(75, 100), (100, 75), (30, 40)])
        base = torch.randint(0, 256, (3, h // 5 + 1, w // 5 + 1), generator=g, dtype=torch.uint8)
        images.append(F.resize(base, [h, w], antialias=True))
        boxes.append(dec.random_resized_crop_params(w, h, (0.08, 1.0), (3 / 4, 4 / 3), rng))
    cubic = np.arange(10) % 2 == 0
    flips = np.arange(10) % 3 == 0
    for size in (16, 56):
        out = crop_batch(images, boxes, flips, size, cubic)
        plain = crop_batch(images, boxes, flips, size)
        for img, (top, left, h, w), flip, bicubic, got, bilinear in zip(images, boxes, flips, cubic, out, plain):
            if not bicubic:
                assert (got == bilinear).all()
                continue
            ref = F.resized_crop(img.float(), top, left, h, w, [size, size], interpolation=InterpolationMode.BICUBIC,
                                 antialias=True).round().clamp(0, 255)
            ref = ref.flip(-1) if flip else ref
            assert (got.float() - ref).abs().max() <= 1
            assert (got != bilinear).any()


class Replay:
    """A random.Random stand-in that hands `random_resized_crop_params` prepared draws."""

    def __init__(self, area_frac, log_ratio, u_top, u_left):
        self.uniforms = [v for pair in zip(area_frac, log_ratio) for v in pair]
        self.positions = [u_top, u_left]

    def uniform(self, a, b):
        return self.uniforms.pop(0)

    def randint(self, a, b):
        return a + int(self.positions.pop(0) * (b - a + 1))


def test_batched_boxes_equal_the_per_image_functions_given_the_same_draws():
    import numpy as np
    from imagenet_shards.train.augment.gpu_crop import (ATTEMPTS, center_crop_boxes, random_resized_crop_boxes,
                                                       rrc_boxes_from_draws)
    rng = np.random.default_rng(0)
    n = 400
    widths = rng.integers(1, 700, n)
    heights = np.where(np.arange(n) % 7 == 0, rng.integers(1, 12, n), rng.integers(1, 700, n))  # some never fit
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    area_frac = rng.uniform(*scale, (n, ATTEMPTS))
    area_frac[::5] = 0.999  # with extreme ratios below: every try misses, the fallback runs
    log_ratio = rng.uniform(np.log(ratio[0]), np.log(ratio[1]), (n, ATTEMPTS))
    log_ratio[::5] = np.log(ratio[1])
    u_top, u_left = rng.random(n), rng.random(n)
    got = rrc_boxes_from_draws(widths, heights, ratio, area_frac, log_ratio, u_top, u_left)
    fallbacks = 0
    for i in range(n):
        want = dec.random_resized_crop_params(int(widths[i]), int(heights[i]), scale, ratio,
                                              Replay(area_frac[i], log_ratio[i], u_top[i], u_left[i]))
        assert tuple(got[i]) == want, i
        fallbacks += want[:2] == ((heights[i] - want[2]) // 2, (widths[i] - want[3]) // 2)
    assert fallbacks > 20
    drawn = random_resized_crop_boxes(widths, heights, scale, ratio, np.random.default_rng(1))
    assert ((drawn[:, 2] >= 1) & (drawn[:, 3] >= 1) & (drawn[:, 0] + drawn[:, 2] <= heights)
            & (drawn[:, 1] + drawn[:, 3] <= widths)).all()
    for resize, crop in ((256, 224), (36, 32), (40, 40)):
        boxes = center_crop_boxes(widths, heights, resize, crop)
        for i in range(n):
            assert tuple(boxes[i]) == dec.center_crop_params(int(widths[i]), int(heights[i]), resize, crop)


def test_padding_and_the_batched_crop_equal_the_per_image_ones():
    """One nested-tensor padding for the batch = the per-image copies; cropping a batch = cropping
    each image alone (the padding never reaches a weight)."""
    import numpy as np
    from imagenet_shards.train.augment.gpu_crop import padded
    g, rng = torch.Generator().manual_seed(1), np.random.default_rng(2)
    shapes = [(75, 100), (100, 75), (66, 100), (30, 40), (100, 100)] * 3
    images = [torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8) for h, w in shapes]
    canvas = padded(images, 100, 100)
    for i, img in enumerate(images):
        h, w = img.shape[-2:]
        assert torch.equal(canvas[i, :, :h, :w], img.float()) and canvas[i, :, h:].abs().sum() == 0
        assert canvas[i, :, :, w:].abs().sum() == 0
    from imagenet_shards.train.augment.gpu_crop import random_resized_crop_boxes
    boxes = random_resized_crop_boxes([s[1] for s in shapes], [s[0] for s in shapes], (0.08, 1), (3 / 4, 4 / 3), rng)
    flips = rng.random(len(shapes)) < 0.5
    batch = crop_batch(images, boxes, flips, 24)
    for i, img in enumerate(images):
        alone = crop_batch([img], boxes[i:i + 1], flips[i:i + 1], 24)[0]
        assert (batch[i].int() - alone.int()).abs().max() <= 1  # float sums in another order: rare ties
    assert sum(int((batch[i] != crop_batch([img], boxes[i:i + 1], flips[i:i + 1], 24)[0]).sum())
               for i, img in enumerate(images)) <= len(images)  # and those are rare
