"""Batch augmentation on the device, after normalization: MixUp/CutMix (timm's switch between them,
pairs i and B-1-i) and random erasing (timm's per-pixel noise, or torchvision's zero fill).

The prefetcher (trainer/prefetch.py) calls these with its per-epoch generators, so every draw is
a function of (seed, epoch, rank) and the batches before it; nothing here holds random state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

# timm's random-erasing defaults: erased area fraction, aspect ratio range, attempts per sample.
ERASE_AREA = (0.02, 1 / 3)
ERASE_RATIO = (0.3, 1 / 0.3)
ERASE_ATTEMPTS = 10


@dataclass(frozen=True)
class DeviceAugment:
    """Batch-level augmentation done on the device. Alphas of 0 switch MixUp/CutMix off.

    With both alphas > 0 each batch uses one of them, CutMix with probability `switch_prob`
    (timm's habit). Pairs are (i, B-1-i): the loader already shuffled, so no permutation needed.
    """

    num_classes: int
    mixup: float = 0.0
    cutmix: float = 0.0
    switch_prob: float = 0.5
    random_erase: float = 0.0
    erase_fill: str = "noise"  # "noise": N(0,1) per pixel (timm's "pixel" mode); "zero": 0 (torchvision's value=0)

    @property
    def mixes(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0


def cutmix_box(height: int, width: int, lam: float, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1) of a box covering ~(1-lam) of the image, centred uniformly, clipped."""
    cut = math.sqrt(1.0 - lam)
    ch, cw = int(height * cut), int(width * cut)
    cy, cx = int(rng.integers(height)), int(rng.integers(width))
    y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, height)
    x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, width)
    return y0, y1, x0, x1


def mix_batch(x: torch.Tensor, labels: torch.Tensor, aug: DeviceAugment,
              rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """MixUp or CutMix of sample i with sample B-1-i. Returns (images, soft targets float32 [B,C]).

    Label smoothing is left to the loss (CrossEntropyLoss smooths probability targets too).
    """
    use_cutmix = aug.cutmix > 0 and (aug.mixup <= 0 or rng.random() < aug.switch_prob)
    lam = float(rng.beta(aug.cutmix, aug.cutmix) if use_cutmix else rng.beta(aug.mixup, aug.mixup))
    flipped = x.flip(0)
    if use_cutmix:
        h, w = x.shape[-2:]
        y0, y1, x0, x1 = cutmix_box(h, w, lam, rng)
        x = x.clone()
        x[:, :, y0:y1, x0:x1] = flipped[:, :, y0:y1, x0:x1]
        lam = 1.0 - (y1 - y0) * (x1 - x0) / float(h * w)  # the area actually pasted
    else:
        x = x.mul(lam).add_(flipped, alpha=1.0 - lam)
    one_hot = torch.nn.functional.one_hot(labels, aug.num_classes).float()
    targets = one_hot.mul(lam).add_(one_hot.flip(0), alpha=1.0 - lam)
    return x, targets


def erase_boxes(batch: int, height: int, width: int, prob: float,
                rng: np.random.Generator) -> np.ndarray:
    """Per-sample erase boxes [B,4] (y0, x0, h, w); h = w = 0 where a sample is not erased."""
    boxes = np.zeros((batch, 4), dtype=np.int64)
    chosen = rng.random(batch) < prob
    area = height * width
    targets = rng.uniform(*ERASE_AREA, size=(batch, ERASE_ATTEMPTS)) * area
    ratios = np.exp(rng.uniform(math.log(ERASE_RATIO[0]), math.log(ERASE_RATIO[1]),
                                size=(batch, ERASE_ATTEMPTS)))
    hs = np.round(np.sqrt(targets * ratios)).astype(np.int64)
    ws = np.round(np.sqrt(targets / ratios)).astype(np.int64)
    fits = (hs < height) & (ws < width) & (hs > 0) & (ws > 0)
    us = rng.random((batch, ERASE_ATTEMPTS, 2))  # uniform positions, scaled per attempt below
    for i in np.flatnonzero(chosen & fits.any(axis=1)):
        j = int(np.argmax(fits[i]))
        h, w = int(hs[i, j]), int(ws[i, j])
        boxes[i] = (int(us[i, j, 0] * (height - h + 1)), int(us[i, j, 1] * (width - w + 1)), h, w)
    return boxes


def random_erase(x: torch.Tensor, boxes: np.ndarray, generator: torch.Generator, fill: str = "noise") -> torch.Tensor:
    """Fill each sample's box with per-pixel N(0,1) noise (timm's "pixel" mode, normalized space), or
    with 0 (`fill="zero"`: torchvision's RandomErasing default value, the mean after normalization)."""
    if not (boxes[:, 2] > 0).any():
        return x
    b, _, h, w = x.shape
    bx = torch.from_numpy(boxes)
    if x.device.type == "cuda":  # non_blocking from pageable memory would stall the stream: pin first
        bx = bx.pin_memory()
    bx = bx.to(x.device, non_blocking=True)
    rows = torch.arange(h, device=x.device).view(1, h, 1)
    cols = torch.arange(w, device=x.device).view(1, 1, w)
    y0, x0 = bx[:, 0].view(b, 1, 1), bx[:, 1].view(b, 1, 1)
    y1, x1 = y0 + bx[:, 2].view(b, 1, 1), x0 + bx[:, 3].view(b, 1, 1)
    mask = ((rows >= y0) & (rows < y1) & (cols >= x0) & (cols < x1)).unsqueeze(1)
    if fill == "zero":
        return x.masked_fill(mask, 0.0)
    noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=torch.float32)
    return torch.where(mask, noise.to(x.dtype), x)
