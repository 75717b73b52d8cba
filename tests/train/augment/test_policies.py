"""timm's RandAugment strings and level formulas, in the CPU-side policies (augment/policies.py).
(Moved from tests/train/loader/test_repeated_aug.py with the code.)"""

from __future__ import annotations

import random

import pytest
import torch

from imagenet_shards.train.augment import policies as augment


# ----------------------------------------------------------------------------- timm RandAugment strings

def test_rand_augment_strings_are_parsed_as_timm_parses_them():
    assert augment.parse_rand_augment("rand-m6-mstd0.5-inc1") == {"magnitude": 6, "magnitude_std": 0.5,
                                                                  "increasing": True}
    assert augment.parse_rand_augment("rand-m9-n3-mstd101") == {"magnitude": 9, "num_layers": 3,
                                                               "magnitude_std": float("inf")}
    assert augment.parse_rand_augment("rand-inc0")["increasing"] is True  # timm: bool("0") is True
    assert augment.parse_rand_augment("rand-m7-mmax15") == {"magnitude": 7, "magnitude_max": 15}
    for bad in ("rand-q3", "rand-w0", "augmix-m3", "rand-mx"):
        if bad == "rand-mx":
            assert augment.parse_rand_augment(bad) == {}  # a section without a number is skipped, as in timm
            continue
        with pytest.raises(ValueError):
            augment.parse_rand_augment(bad)
    ra = augment.make_aug("rand-m6-mstd0.5-inc1")
    assert ra.ops == augment.RAND_INCREASING_OPS and ra.num_layers == 2 and ra.prob == 0.5
    torch.manual_seed(0)
    levels = [ra.level() for _ in range(2000)]
    assert min(levels) >= 0 and max(levels) <= 10
    assert sum(levels) / len(levels) == pytest.approx(6, abs=0.05)
    assert "rand-m6-mstd0.5-inc1" in augment.AugChoices(augment.AUG_NAMES)
    assert "rand-q3" not in augment.AugChoices(augment.AUG_NAMES) and "cutmix" not in augment.AugChoices(augment.AUG_NAMES)


def test_rand_augment_ops_follow_timms_level_formulas():
    img = torch.randint(0, 256, (3, 24, 24), dtype=torch.uint8)
    assert torch.equal(augment._apply("Invert", img, 5), 255 - img)
    assert int(augment._apply("PosterizeIncreasing", img, 10).max()) == 0       # 4 - int(10/10 * 4) = 0 bits
    assert torch.equal(augment._apply("SolarizeIncreasing", img, 0), img)       # threshold 256: nothing
    assert torch.equal(augment._apply("SolarizeIncreasing", img, 10), 255 - img)  # threshold 0: everything
    added = augment._apply("SolarizeAdd", img, 10)                              # +110 below 128, clipped
    assert torch.equal(added, torch.where(img < 128, (img.int() + 110).clamp(max=255).to(torch.uint8), img))
    a = augment.apply_aug(augment.make_aug("rand-m9-mstd0.5-inc1"), img, 3)
    b = augment.apply_aug(augment.make_aug("rand-m9-mstd0.5-inc1"), img, 3)
    assert torch.equal(a, b) and a.dtype == torch.uint8 and a.shape == img.shape
    shifted = augment._apply("TranslateXRel", torch.arange(24, dtype=torch.uint8).repeat(3, 24, 1), 10)
    assert not torch.equal(shifted, torch.arange(24, dtype=torch.uint8).repeat(3, 24, 1))
    random.seed(0)
