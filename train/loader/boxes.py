"""The crop boxes the loader draws, in original-image pixels, whatever the stored form (JPEG,
``decode``; pixel planes, ``decode_pixels``): torchvision's RandomResizedCrop box, its Resize +
CenterCrop box and FFCV's centre-crop-ratio box. Pure functions of the size and a seeded rng."""

from __future__ import annotations

import math
import random
from typing import Sequence


def random_resized_crop_params(width: int, height: int, scale: Sequence[float],
                               ratio: Sequence[float], rng: random.Random) -> tuple[int, int, int, int]:
    """(top, left, h, w) in original pixels, same distribution as torchvision's
    ``RandomResizedCrop.get_params`` (10 tries, then a centre crop clamped to ``ratio``)."""
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def center_crop_ratio_params(width: int, height: int, ratio: float) -> tuple[int, int, int, int]:
    """(top, left, c, c) of FFCV's ``CenterCropRGBImageDecoder`` box (ffcv/fields/rgb_image.py
    ``get_center_crop``): a square of side c = int(ratio x shorter side), offsets floored; the box is
    then resized to the output size (FFCV's ImageNet val: ratio 224/256, output 256)."""
    if not 0 < ratio <= 1:
        raise ValueError(f"val crop ratio must be in (0, 1], got {ratio}")
    c = max(1, int(ratio * min(width, height)))
    return (height - c) // 2, (width - c) // 2, c, c


def center_crop_params(width: int, height: int, resize: int, crop: int) -> tuple[float, float, float, float]:
    """(top, left, h, w) in original pixels (floats) of torchvision's ``Resize(resize)`` +
    ``CenterCrop(crop)``: shorter side to ``resize`` (longer side truncated like torchvision),
    then a centred ``crop`` square with torchvision's rounding. Needs ``crop <= resize``."""
    if crop > resize:
        raise ValueError(f"val crop {crop} is larger than the val resize {resize}")
    if width <= height:
        rw, rh = resize, int(resize * height / width)
    else:
        rw, rh = int(resize * width / height), resize
    top = int(round((rh - crop) / 2.0))
    left = int(round((rw - crop) / 2.0))
    sx, sy = width / rw, height / rh
    return top * sy, left * sx, crop * sy, crop * sx
