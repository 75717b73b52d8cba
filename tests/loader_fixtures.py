"""Tiny shard sets in the docs/format.md layout, for the loader tests and bench-loader --compare.

Pixels encode the sample: with ``content="index"`` every image is one flat colour whose three
channels carry the sample index in base 16 (``index_of`` reads it back from any crop, JPEG
error included), so a test can tell exactly which sample came out. ``content="texture"`` gives
natural-looking images (smooth gradients plus grain) for decoder accuracy; ``content="photo"`` is a
faster, busier variant sized like ImageNet JPEGs, for benchmarks.
The label of sample i is ``i % num_classes``; keys look like the real ones.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageFilter

SPLIT_DIR_NAME = {"train": "train", "val": "validation"}
_STEP = 16  # base-16 digits, 16 intensity levels apart: far beyond JPEG error on a flat colour


def index_colour(i: int) -> tuple[int, int, int]:
    if not 0 <= i < 16 ** 3:
        raise ValueError("index colour codes 0..4095")
    return tuple(_STEP * ((i >> (4 * c)) & 15) + _STEP // 2 for c in range(3))


def index_of(pixels) -> int:
    """Sample index from a decoded uint8 image (array [3,H,W] or [H,W,3]) written with content='index'."""
    a = np.asarray(pixels).astype(np.float64)
    mean = a.reshape(3, -1).mean(1) if a.shape[0] == 3 else a.reshape(-1, 3).mean(0)
    digits = np.clip(np.round((mean - _STEP // 2) / _STEP), 0, 15).astype(int)
    return int(sum(int(d) << (4 * c) for c, d in enumerate(digits)))


def texture_image(w: int, h: int, seed: int) -> Image.Image:
    """A natural-ish RGB picture: a few low-frequency waves, slight blur, and sensor-like grain."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.full((h, w, 3), 128, np.float32)
    for _ in range(8):
        fx, fy = rng.uniform(0.002, 0.05, 2)
        ph, amp = rng.uniform(0, 6.3, 3), rng.uniform(10, 40, 3)
        for c in range(3):
            img[..., c] += amp[c] * np.sin(fx * x + fy * y + ph[c])
    img += rng.normal(0, 12, img.shape).astype(np.float32)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.7))
    a = np.asarray(im).astype(np.float32) + rng.normal(0, 6, img.shape).astype(np.float32)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def photo_image(w: int, h: int, seed: int) -> Image.Image:
    """Cheaper, busier stand-in for a photo (~100 KB at 500x375, q90, like ImageNet's average):
    an upscaled small texture for large structures, sharp-edged blobs, and grain."""
    from PIL import ImageDraw
    rng = np.random.default_rng(seed)
    img = texture_image(max(8, w // 4), max(8, h // 4), seed).resize((w, h), Image.BICUBIC)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(4, 12))):
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        x1, y1 = x0 + rng.integers(8, w // 2 + 9), y0 + rng.integers(8, h // 2 + 9)
        fill = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=fill)
    a = np.asarray(img).astype(np.float32) + rng.normal(0, 14, (h, w, 3)).astype(np.float32)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def _jpeg(img: Image.Image, quality: int) -> bytes:
    b = io.BytesIO()
    img.save(b, "JPEG", quality=quality)
    return b.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def sample_key(split: str, i: int, label: int) -> str:
    return f"n{label:08d}_{i}" if split == "train" else f"ILSVRC2012_val_{i + 1:08d}"


def write_shard_set(root, *, split: str = "train", num_samples: int = 40, num_shards: int = 4,
                    num_classes: int = 10, size: tuple[int, int] | Sequence[tuple[int, int]] = (64, 48),
                    corrupt_keys: Sequence[str] = (), missing_cls_keys: Sequence[str] = (),
                    content: str = "index", quality: int = 95, seed: int = 0) -> Path:
    """Write ``split`` of a shard set under ``root`` (merging into an existing manifest.json); returns root.

    Sample i (key from ``sample_key``) has label ``i % num_classes`` and goes to shard
    ``i * num_shards // num_samples`` (shards as even as possible, in index order). ``size`` is one
    (W, H) or a list cycled over samples. Keys in ``corrupt_keys`` get undecodable .jpg bytes;
    keys in ``missing_cls_keys`` have no .cls member.
    """
    root = Path(root)
    prefix = SPLIT_DIR_NAME[split]
    (root / split).mkdir(parents=True, exist_ok=True)
    sizes = [size] if isinstance(size[0], int) else list(size)
    corrupt, missing = set(corrupt_keys), set(missing_cls_keys)
    bounds = [k * num_samples // num_shards for k in range(num_shards + 1)]
    shards = []
    for s in range(num_shards):
        rel = f"{split}/imagenet1k-{prefix}-{s:06d}.tar"
        with tarfile.open(root / rel, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(bounds[s], bounds[s + 1]):
                label = i % num_classes
                key = sample_key(split, i, label)
                w, h = sizes[i % len(sizes)]
                if content == "index":
                    img = Image.new("RGB", (w, h), index_colour(i))
                elif content == "photo":
                    img = photo_image(w, h, seed * 1_000_003 + i)
                else:
                    img = texture_image(w, h, seed * 1_000_003 + i)
                jpg = b"\xff\xd8 not a jpeg " + bytes(range(64)) if key in corrupt else _jpeg(img, quality)
                meta = {"label": label, "wnid": f"n{label:08d}", "filename": f"{key}.JPEG", "width": w,
                        "height": h, "orig_width": w, "orig_height": h, "fixes": []}
                if key not in missing:  # member order as docs/format.md: .cls, .jpg, .json
                    _add(tar, f"{key}.cls", str(label).encode())
                _add(tar, f"{key}.jpg", jpg)
                _add(tar, f"{key}.json", json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())
        data = (root / rel).read_bytes()
        shards.append({"url": rel, "num_samples": bounds[s + 1] - bounds[s], "bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()})
    path = root / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {
        "format": "imagenet-shards-manifest", "format_version": 1,
        "tool": {"name": "imagenet-shards", "version": "0.1.0"}, "name": "imagenet1k", "splits": {}}
    manifest["classes"] = [{"index": c, "wnid": f"n{c:08d}", "name": f"class {c}"} for c in range(num_classes)]
    manifest["splits"][split] = {"num_samples": num_samples, "num_shards": num_shards, "shards": shards}
    manifest["num_samples"] = sum(s["num_samples"] for s in manifest["splits"].values())
    path.write_text(json.dumps(manifest, sort_keys=True, separators=(",", ":")))
    return root
