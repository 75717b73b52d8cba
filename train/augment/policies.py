"""CPU-side augmentations the loader workers apply to a uint8 [3,H,W] crop (``--aug``). Pure per sample:
every random draw comes from torch's RNG, which ``apply_aug`` seeds from the sample's crop seed.

Names (``AUG_NAMES``): ``ra`` torchvision RandAugment(2, 9), ``ta`` TrivialAugmentWide (torchvision's
default nearest interpolation), ``ta_wide`` TrivialAugmentWide with bilinear interpolation (what
torchvision's reference ``--auto-augment ta_wide`` builds: references/classification/presets.py
passes its ``--interpolation``, default bilinear), ``aa`` AutoAugment(ImageNet), ``jitter``
ColorJitter(0.4). And timm's RandAugment strings, ``rand-m9-mstd0.5-inc1`` style, parsed as
``timm.data.auto_augment.rand_augment_transform`` (timm 0.5) parses them:

- sections after ``rand`` split at the first digit: ``m`` magnitude (int, default 10), ``n`` ops per
  image (default 2), ``mstd`` magnitude std (float; > 100 means uniform in [0, m]), ``mmax`` the
  magnitude's upper clip (default 10), ``inc`` the "increasing" op set, ``w`` op weights (refused:
  timm's weight set 0 only; no recipe here uses it). As in timm, ``inc`` takes any value (timm
  tests ``bool(val)`` of the string, so ``inc0`` also selects the increasing set).
- each image gets ``n`` ops drawn uniformly with replacement; each op runs with probability 0.5 at a
  magnitude drawn from N(m, mstd) and clipped to [0, mmax]; levels map to arguments with timm's
  formulas (``_OPS``); rotate/shear/translate fill with the ImageNet mean in uint8, (124, 116, 104),
  as timm's ``transforms_imagenet_train`` sets ``img_mean``; translations are relative (45 % at m 10).

Written with torchvision's tensor ops rather than timm's PIL ones (same formulas; the colour
ops are torchvision's re-implementations of PIL's ImageEnhance/ImageOps, equal up to rounding).
One difference is deliberate and listed in docs/recipes.md: timm picks bilinear or bicubic at
random for each geometric op (its "random" train interpolation); torchvision's tensor affine has no
bicubic, so every geometric op here is bilinear. RandomErasing is not here: it belongs after
normalization, on the device (`device`).
"""

from __future__ import annotations

import math
import re
from typing import Callable

import torch

# The named augmentations (train-imagenet --aug takes these and timm "rand-..." strings; "none", or
# None, is no augmentation).
AUG_NAMES = ("none", "ra", "ta", "ta_wide", "aa", "jitter")

LEVEL_DENOM = 10.0                 # timm's _LEVEL_DENOM: magnitude 10 = full-strength op
FILL = (124, 116, 104)             # round(255 * IMAGENET_DEFAULT_MEAN), timm's aa_params img_mean
TRANSLATE_PCT = 0.45               # timm's default translate_pct for the relative translations
RAND_OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
            "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
RAND_INCREASING_OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing",
                       "SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing",
                       "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel",
                       "TranslateYRel")


def _negate_half(v: float) -> float:
    """timm's _randomly_negate: -v with probability 1/2."""
    return -v if float(torch.rand(())) > 0.5 else v


def _enhance(level: float) -> float:               # [0.1, 1.9]
    return level / LEVEL_DENOM * 1.8 + 0.1


def _enhance_increasing(level: float) -> float:    # 1 -/+ 0.9 level, at least 0.1
    return max(0.1, 1.0 + _negate_half(level / LEVEL_DENOM * 0.9))


def _apply(name: str, img: torch.Tensor, level: float) -> torch.Tensor:
    """One timm RandAugment op at `level` (already clipped) on a uint8 [3,H,W] tensor."""
    from torchvision.transforms.v2 import functional as F
    bilinear = F.InterpolationMode.BILINEAR
    fill = list(FILL)
    base = name.replace("Increasing", "")
    if name == "AutoContrast":
        return F.autocontrast(img)
    if name == "Equalize":
        return F.equalize(img)
    if name == "Invert":
        return F.invert(img)
    if name == "Rotate":
        return F.rotate(img, _negate_half(level / LEVEL_DENOM * 30.0), interpolation=bilinear, fill=fill)
    if base == "Posterize":
        bits = int(level / LEVEL_DENOM * 4)
        bits = 4 - bits if name.endswith("Increasing") else bits
        return img if bits >= 8 else F.posterize(img, bits)
    if base == "Solarize":
        thresh = int(level / LEVEL_DENOM * 256)
        thresh = 256 - thresh if name.endswith("Increasing") else thresh
        return img if thresh >= 256 else F.solarize(img, thresh)
    if name == "SolarizeAdd":
        add = int(level / LEVEL_DENOM * 110)
        return torch.where(img < 128, (img.to(torch.int16) + add).clamp(max=255).to(torch.uint8), img)
    if base in ("Color", "Contrast", "Brightness", "Sharpness"):
        factor = _enhance_increasing(level) if name.endswith("Increasing") else _enhance(level)
        adjust = {"Color": F.adjust_saturation, "Contrast": F.adjust_contrast,
                  "Brightness": F.adjust_brightness, "Sharpness": F.adjust_sharpness}[base]
        return adjust(img, factor)
    if name in ("ShearX", "ShearY"):
        # PIL's AFFINE (1, f, 0, 0, 1, 0) shears about the top-left corner, hence center [0, 0]
        deg = math.degrees(math.atan(_negate_half(level / LEVEL_DENOM * 0.3)))
        shear = [deg, 0.0] if name == "ShearX" else [0.0, deg]
        return F.affine(img, angle=0.0, translate=[0.0, 0.0], scale=1.0, shear=shear, interpolation=bilinear,
                        fill=fill, center=[0.0, 0.0])
    if name in ("TranslateXRel", "TranslateYRel"):
        pct = _negate_half(level / LEVEL_DENOM * TRANSLATE_PCT)
        h, w = img.shape[-2:]
        # PIL's AFFINE (1, 0, p, 0, 1, 0) samples x + p: the content moves by -p
        shift = [-pct * w, 0.0] if name == "TranslateXRel" else [0.0, -pct * h]
        return F.affine(img, angle=0.0, translate=shift, scale=1.0, shear=[0.0, 0.0], interpolation=bilinear,
                        fill=fill)
    raise ValueError(f"unknown RandAugment op {name!r}")


class TimmRandAugment:
    """timm's RandAugment semantics (module docstring) on uint8 [3,H,W] tensors, from torch's RNG."""

    def __init__(self, *, magnitude: float = 10, num_layers: int = 2, magnitude_std: float = 0.0,
                 magnitude_max: float | None = None, increasing: bool = False, prob: float = 0.5):
        self.magnitude, self.num_layers, self.prob = magnitude, num_layers, prob
        self.magnitude_std, self.magnitude_max = magnitude_std, magnitude_max
        self.ops = RAND_INCREASING_OPS if increasing else RAND_OPS

    def level(self) -> float:
        """One op's magnitude: N(m, mstd) (uniform in [0, m] when mstd is inf), clipped to [0, mmax]."""
        m = float(self.magnitude)
        if self.magnitude_std == float("inf"):
            m = float(torch.rand(())) * m
        elif self.magnitude_std > 0:
            m = m + self.magnitude_std * float(torch.randn(()))
        return max(0.0, min(m, float(self.magnitude_max or LEVEL_DENOM)))

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        picks = torch.randint(len(self.ops), (self.num_layers,)).tolist()
        for i in picks:
            if self.prob < 1.0 and float(torch.rand(())) > self.prob:
                continue
            img = _apply(self.ops[i], img, self.level())
        return img

    def __repr__(self) -> str:
        return (f"TimmRandAugment(m={self.magnitude}, n={self.num_layers}, mstd={self.magnitude_std}, "
                f"mmax={self.magnitude_max}, ops={'increasing' if self.ops is RAND_INCREASING_OPS else 'default'})")


def parse_rand_augment(spec: str) -> dict:
    """timm's parse of a "rand-..." string -> TimmRandAugment keyword arguments; ValueError if malformed."""
    parts = spec.split("-")
    if parts[0] != "rand":
        raise ValueError(f"not a RandAugment string: {spec!r} (expected rand-m9-mstd0.5-inc1 style)")
    kw: dict = {}
    for part in parts[1:]:
        cs = re.split(r"(\d.*)", part)
        if len(cs) < 2:
            continue  # timm skips sections without a number
        key, val = cs[:2]
        try:
            if key == "mstd":
                kw["magnitude_std"] = float("inf") if float(val) > 100 else float(val)
            elif key == "mmax":
                kw["magnitude_max"] = int(val)
            elif key == "inc":
                kw["increasing"] = bool(val)  # timm: bool of the string, so any value selects the set
            elif key == "m":
                kw["magnitude"] = int(val)
            elif key == "n":
                kw["num_layers"] = int(val)
            elif key == "w":
                raise ValueError(f"{spec!r}: the weighted op choice (w) is not supported")
            else:
                raise ValueError(f"{spec!r}: unknown RandAugment section {part!r} (known: m, n, mstd, mmax, inc)")
        except ValueError as e:
            if "RandAugment" in str(e) or "not supported" in str(e):
                raise
            raise ValueError(f"{spec!r}: bad value in section {part!r}") from None
    return kw


def _named(aug: str):
    from torchvision.transforms import v2  # imported only when an augmentation is used
    if aug == "ra":
        return v2.RandAugment(num_ops=2, magnitude=9)
    if aug == "ta":
        return v2.TrivialAugmentWide()
    if aug == "ta_wide":
        return v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR)
    if aug == "aa":
        return v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET)
    return v2.ColorJitter(0.4, 0.4, 0.4)


def make_aug(aug: str | None) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The augmentation named `aug` (one of `AUG_NAMES`, or a timm "rand-..." string) on a uint8
    [3,H,W] tensor, or None for "none"/None; ValueError for anything else."""
    if aug in (None, "none"):
        return None
    if isinstance(aug, str) and aug.startswith("rand-"):
        return TimmRandAugment(**parse_rand_augment(aug))
    if aug not in AUG_NAMES:
        raise ValueError(f"unknown aug {aug!r}; choose one of {', '.join(AUG_NAMES)} or a timm RandAugment "
                         f"string such as rand-m9-mstd0.5-inc1")
    return _named(aug)


class AugChoices(tuple):
    """`AUG_NAMES` as argparse choices that also admit valid timm "rand-..." strings (listing shows the names)."""

    def __contains__(self, value) -> bool:
        if tuple.__contains__(self, value):
            return True
        try:
            return isinstance(value, str) and value.startswith("rand-") and make_aug(value) is not None
        except ValueError:
            return False


def apply_aug(aug, img: torch.Tensor, seed: int) -> torch.Tensor:
    """Run a torch-RNG-driven augmentation deterministically from ``seed`` without disturbing
    the caller's global torch RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return aug(img)
