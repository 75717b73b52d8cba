"""What the synthetic ILSVRC2012 holds: classes, devkit IDs, and every member with its kind (clean or
one of the real archive's quirks), size and encoding; `member_bytes` draws and encodes one.

A pure function of the arguments and the seed: the same arguments plan the same members.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.tools.synthetic.images import encode_sample, render

# kind -> (format, mode, expect, fixes, reason). fixes are the policy-independent ones, in the
# order docs/format.md applies them; "resized" and "restart_markers" are policy-dependent and never listed.
SAMPLE_FACTS = {
    "clean": ("JPEG", "RGB", "ok", [], None),
    "progressive": ("JPEG", "RGB", "ok", [], None),
    "exif_rotated": ("JPEG", "RGB", "ok", [], None),
    "large": ("JPEG", "RGB", "ok", [], None),
    "tiny": ("JPEG", "RGB", "ok", [], None),
    "png_as_jpeg": ("PNG", "RGB", "fix", ["converted_from_png"], None),
    "cmyk": ("JPEG", "CMYK", "fix", ["cmyk_to_rgb"], None),
    "grayscale": ("JPEG", "L", "fix", ["gray_to_rgb"], None),
    "rgba_png": ("PNG", "RGBA", "fix", ["converted_from_png", "alpha_over_white"], None),
    "palette_gif": ("GIF", "P", "fix", ["converted_from_gif", "palette_to_rgb"], None),
    "truncated": ("JPEG", "RGB", "reject", [], "truncated"),
    "empty": (None, None, "reject", [], "empty"),
    "non_image": (None, None, "skip", [], "not_an_image"),
}
# Quirks pinned to the real file names they have in ILSVRC2012 (manifests/imagenet-1k/facts.json).
NAMED_QUIRKS = (("png_as_jpeg", "n02105855", 2933), ("cmyk", "n01739381", 1309),
                ("cmyk", "n02077923", 14822))
# Quirks spread over the chosen classes (least-loaded class first, seeded tie-break).
SPREAD_QUIRKS = ("grayscale", "grayscale", "truncated", "empty", "exif_rotated", "large", "tiny",
                 "rgba_png", "palette_gif")
QUIRK_CLASSES = ("n01440764", "n01739381", "n02077923", "n02105855")  # tench + the named quirks
MIN_TRAIN_WITH_QUIRKS = 3  # 12 train quirks over >= 4 classes never need more than 3 slots a class
PROGRESSIVE_FRACTION = 0.10
LARGE_SIZE, TINY_SIZE = (4000, 3000), (32, 24)
# ImageNet-like sizes: (width, height, weight); the rest are random smaller or a few larger.
COMMON_SIZES = ((500, 375, 0.42), (375, 500, 0.18), (500, 333, 0.14), (333, 500, 0.06))
LARGER_SIZES = ((640, 480), (800, 600), (1024, 683))


@dataclass
class Planned:
    """One member to write: where it goes and how to draw and encode it."""

    split: str
    wnid: str
    number: int  # n in nXXXX_<n>.JPEG, or the val image number
    kind: str = "clean"
    size: tuple[int, int] = (500, 375)
    quality: int = 90
    info: dict = field(default_factory=dict)

    @property
    def filename(self) -> str:
        if self.split == "val":
            return f"ILSVRC2012_val_{self.number:08d}.JPEG"
        prefix = "._" if self.kind == "non_image" else ""
        return f"{prefix}{self.wnid}_{self.number}.JPEG"

    @property
    def member(self) -> str:
        return self.filename if self.split == "val" else f"{self.wnid}.tar/{self.filename}"


def choose_classes(num_classes: int, quirks: bool) -> list[str]:
    """Sorted WNIDs: the quirk classes (if quirks) plus ones evenly spaced through the 1000-class table."""
    table = [c.wnid for c in imagenet_1k_classes()]
    chosen = list(QUIRK_CLASSES) if quirks else []
    step = len(table) / num_classes
    candidates = [table[int(i * step)] for i in range(num_classes)] + table
    for wnid in candidates:
        if len(chosen) == num_classes:
            break
        if wnid not in chosen:
            chosen.append(wnid)
    return sorted(chosen)


def ilsvrc_ids(wnids: list[str], seed: int) -> dict[str, int]:
    """Devkit ILSVRC2012_ID (1..K) per WNID: a seeded permutation that is never the sorted order."""
    perm = np.random.default_rng([seed, 1]).permutation(len(wnids))
    if len(wnids) > 1 and np.array_equal(perm, np.arange(len(wnids))):
        perm = np.roll(perm, 1)
    return {w: int(p) + 1 for w, p in zip(wnids, perm)}


def _image_size(rng: np.random.Generator) -> tuple[int, int]:
    r = rng.random()
    for w, h, p in COMMON_SIZES:
        if r < p:
            return w, h
        r -= p
    if r < 0.03:
        return LARGER_SIZES[int(rng.integers(len(LARGER_SIZES)))]
    w = int(rng.integers(150, 500))
    h = int(min(500, max(100, w * rng.uniform(0.6, 1.4))))
    return (w, h) if rng.random() < 0.7 else (h, w)


def plan_samples(wnids: list[str], train_per_class: int, val_per_class: int, seed: int,
                 quirks: bool) -> list[Planned]:
    """Every member of both archives in archive order (train: class, then name; val: number)."""
    rng = np.random.default_rng([seed, 2])
    numbers = {}
    for wnid in wnids:
        picked = rng.choice(np.arange(1, max(20000, 2 * train_per_class)), train_per_class, replace=False)
        numbers[wnid] = [int(n) for n in picked]
    train = {w: {n: Planned("train", w, n) for n in numbers[w]} for w in wnids}
    extra = {w: [] for w in wnids}
    if quirks:
        load = {w: 0 for w in wnids}
        for kind, wnid, n in NAMED_QUIRKS:
            if n not in train[wnid]:  # give the real name to one of the class's slots
                del train[wnid][next(m for m, p in train[wnid].items() if p.kind == "clean")]
                train[wnid][n] = Planned("train", wnid, n)
            train[wnid][n].kind = kind
            load[wnid] += 1
        tie = {w: float(t) for w, t in zip(wnids, rng.random(len(wnids)))}
        for kind in SPREAD_QUIRKS:
            wnid = min(wnids, key=lambda w: (load[w], tie[w]))
            free = sorted(n for n, p in train[wnid].items() if p.kind == "clean")
            train[wnid][free[int(rng.integers(len(free)))]].kind = kind
            load[wnid] += 1
        # the AppleDouble companion of an image, in the same class tar
        wnid = wnids[int(rng.integers(len(wnids)))]
        extra[wnid].append(Planned("train", wnid, min(train[wnid]), "non_image"))
    val_classes = rng.permutation(np.repeat(np.arange(len(wnids)), val_per_class))
    val = [Planned("val", wnids[c], i + 1) for i, c in enumerate(val_classes)]
    if quirks and val:
        val[int(rng.integers(len(val)))].kind = "cmyk"
    ordered = []
    for wnid in wnids:
        ordered += sorted(list(train[wnid].values()) + extra[wnid], key=lambda p: p.filename)
    ordered += val
    for p in ordered:
        if p.kind == "clean" and rng.random() < PROGRESSIVE_FRACTION:
            p.kind = "progressive"
        p.size = LARGE_SIZE if p.kind == "large" else TINY_SIZE if p.kind == "tiny" else _image_size(rng)
        p.quality = 75 if p.kind == "large" else int(rng.integers(75, 96))
    return ordered


def member_bytes(p: Planned, style, seed: int, label: int) -> tuple[bytes, tuple[float, ...] | None]:
    """Draw and encode one planned member: (bytes, object box as fractions or None)."""
    if p.kind in ("empty", "non_image"):
        return encode_sample(p.kind, None, None, p.quality), None
    rng = np.random.default_rng([seed, label, 0 if p.split == "train" else 1, p.number])
    w, h = p.size
    image, box, mask = render(style, rng, w, h, downscale=16 if p.kind == "large" else 4)
    return encode_sample(p.kind, image, mask, p.quality, progressive=p.kind == "progressive"), box
