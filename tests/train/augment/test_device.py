"""Batch augmentation on the device (augment/device.py): MixUp/CutMix targets, erase boxes, noise
and zero fill, on CPU tensors. (Moved from tests/train/trainer/test_trainer.py and
test_recipe_parts.py with the code.)"""

from __future__ import annotations

import numpy as np
import torch

from imagenet_shards.train.augment.device import DeviceAugment, erase_boxes, mix_batch, random_erase


def test_mixup_cutmix_targets_are_distributions_and_seeded():
    aug = DeviceAugment(num_classes=5, mixup=0.2, cutmix=1.0)
    x = torch.randn(6, 3, 8, 8)
    labels = torch.tensor([0, 1, 2, 3, 4, 0])
    for seed in range(5):
        a = mix_batch(x, labels, aug, np.random.default_rng(seed))
        b = mix_batch(x, labels, aug, np.random.default_rng(seed))
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert torch.allclose(a[1].sum(1), torch.ones(6))
        assert a[1].shape == (6, 5)


def test_random_erase_touches_only_boxes():
    rng = np.random.default_rng(0)
    boxes = erase_boxes(16, 32, 32, prob=0.5, rng=rng)
    assert ((boxes[:, 2] > 0) == (boxes[:, 3] > 0)).all() and (boxes[:, 2] > 0).any()
    assert (boxes[:, 0] + boxes[:, 2] <= 32).all() and (boxes[:, 1] + boxes[:, 3] <= 32).all()
    x = torch.zeros(16, 3, 32, 32)
    y = random_erase(x, boxes, torch.Generator().manual_seed(0))
    changed = (y != 0).any(dim=1)
    for i, (top, left, h, w) in enumerate(boxes):
        inside = torch.zeros(32, 32, dtype=torch.bool)
        inside[top:top + h, left:left + w] = True
        assert not changed[i][~inside].any()
        assert changed[i][inside].float().mean() > 0.9 if h else not changed[i].any()


# ----------------------------------------------------------------------------- erasing (torchvision's fill)

def test_zero_fill_erasing_writes_zeros_inside_the_boxes_only():
    x = torch.ones(2, 3, 8, 8)
    boxes = np.array([[1, 2, 3, 4], [0, 0, 0, 0]])
    y = random_erase(x, boxes, torch.Generator().manual_seed(0), fill="zero")
    assert float(y[0, :, 1:4, 2:6].abs().sum()) == 0 and float(y[0].sum()) == 3 * (64 - 12)
    assert torch.equal(y[1], x[1])
