"""Benchmark `imagenet_shards.pipeline.prepare.images.process_image` on one core against a naive PIL path.

    .venv/bin/python bench/bench_images.py [--typical 186] [--large 6] [--huge 4] [--odd 4] [--repeat 5]

The corpus is made in memory: mostly ImageNet-sized JPEGs (500x375-ish, natural-looking content:
smooth colour fields, edges and grain), a few 2000x1500, 4000x3000, 1600x1200 and 3264x2448
(the last two: ratios to the target that are not powers of two). Reported:
1. img/s of process_image (resize longer:500) vs the naive reference (PIL open -> full decode ->
   convert RGB -> LANCZOS resize to the same size -> save q90), per group, best of --repeat;
2. the DCT-domain draft on the large ones: decode time full vs draft, and the whole step;
3. the resampling choice on the large ones: ms per image and mean abs difference to an ideal
   (full decode, LANCZOS in float) for the candidate filters.
Not a test: numbers depend on the machine; run it on a quiet one.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time

import numpy as np
from PIL import Image

from imagenet_shards.pipeline.prepare.images import ImagePolicy, process_image, resized_size

TYPICAL_SIZES = [(500, 375), (375, 500), (500, 333), (400, 300), (500, 500), (333, 500)]


def natural_jpeg(width: int, height: int, rng: np.random.Generator, quality: int = 90) -> bytes:
    """A JPEG with photo-like statistics: smooth colour field, a few hard edges, sensor grain."""
    coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
    field = np.asarray(coarse.resize((width, height), Image.Resampling.BICUBIC), dtype=np.float32)
    yy, xx = np.mgrid[0:height, 0:width]
    for _ in range(4):  # hard-edged discs, like objects against a background
        cx, cy, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(0.05, 0.3) * min(width, height)
        field[(xx - cx) ** 2 + (yy - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
    field += rng.normal(0, 6, field.shape).astype(np.float32)
    buf = io.BytesIO()
    Image.fromarray(np.clip(field, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def naive(data: bytes, target: tuple[int, int]) -> bytes:
    im = Image.open(io.BytesIO(data))
    im.load()
    im = im.convert("RGB")
    if im.size != target:
        im = im.resize(target, Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def best_rate(fn, items, repeat: int) -> float:
    """Best-of-`repeat` items per CPU second of fn over items. CPU time, not wall time, so other
    processes on a shared machine disturb it less (PIL decodes, resizes and encodes on this thread)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for it in items:
            fn(it)
        best = min(best, time.process_time() - t0)
    return len(items) / best


def best_ms(fn, items, repeat: int) -> float:
    return 1000.0 / best_rate(fn, items, repeat)


def decode(data: bytes, draft_to: tuple[int, int] | None = None):
    im = Image.open(io.BytesIO(data))
    box = None
    if draft_to is not None:
        box = im.draft("RGB", draft_to)[1]
    im.load()
    return im, box


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--typical", type=int, default=186, help="number of <=500 px JPEGs")
    p.add_argument("--large", type=int, default=6, help="number of 2000x1500 JPEGs")
    p.add_argument("--huge", type=int, default=4, help="number of 4000x3000 JPEGs")
    p.add_argument("--odd", type=int, default=4, help="number of 1600x1200 / 3264x2448 JPEGs (ratio not 2^k)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--cpu", type=int, default=None, help="pin to this CPU (default: the first allowed)")
    args = p.parse_args(argv)

    if hasattr(os, "sched_setaffinity"):
        cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
    import PIL
    from PIL import features
    print(f"PIL {PIL.__version__} (libjpeg-turbo {features.version('jpg')}), one core, CPU time, "
          f"best of {args.repeat}")

    rng = np.random.default_rng(0)
    groups = {
        "typical (<=500 px)": [natural_jpeg(*TYPICAL_SIZES[i % len(TYPICAL_SIZES)], rng) for i in range(args.typical)],
        "2000x1500": [natural_jpeg(2000, 1500, rng) for _ in range(args.large)],
        "4000x3000": [natural_jpeg(4000, 3000, rng) for _ in range(args.huge)],
        "1600x1200/3264x2448": [natural_jpeg(*((1600, 1200), (3264, 2448))[i % 2], rng) for i in range(args.odd)],
    }
    groups["all"] = [d for g in list(groups.values()) for d in g]
    _vs_naive(groups, args.repeat)
    big = groups["2000x1500"] + groups["4000x3000"] + groups["1600x1200/3264x2448"]
    if big:
        _draft(groups, args.repeat)
        _resampling(big, args.repeat)
    if groups["typical (<=500 px)"]:
        _validation(groups["typical (<=500 px)"], args.repeat)
    return 0


POLICY = ImagePolicy(resize="longer:500", quality=90)


def _target_of(data: bytes) -> tuple[int, int]:
    return resized_size(*Image.open(io.BytesIO(data)).size, POLICY.resize)


def _vs_naive(groups: dict[str, list[bytes]], repeat: int) -> None:
    print("\n1. process_image vs naive (open, decode, convert, LANCZOS, save q90), resize longer:500")
    print(f"{'group':20s} {'n':>4s} {'ours img/s':>11s} {'naive img/s':>12s} {'ratio':>6s} {'pass-through':>13s}")
    for name, items in groups.items():
        targets = {d: _target_of(d) for d in items}
        ours = best_rate(lambda d: process_image(d, POLICY), items, repeat)
        ref = best_rate(lambda d: naive(d, targets[d]), items, repeat)
        passed = sum(process_image(d, POLICY).passthrough for d in items)
        print(f"{name:20s} {len(items):4d} {ours:11.1f} {ref:12.1f} {ours / ref:5.2f}x {passed:6d}/{len(items)}")


def _draft(groups: dict[str, list[bytes]], repeat: int) -> None:
    print("\n2. DCT-domain draft on the large JPEGs (ms per image)")
    print(f"{'group':20s} {'decode full':>12s} {'decode draft':>13s} {'speed-up':>9s} "
          f"{'naive step':>11s} {'ours step':>10s} {'speed-up':>9s}")
    for name in ("2000x1500", "4000x3000", "1600x1200/3264x2448"):
        items = groups[name]
        if not items:
            continue
        targets = {d: _target_of(d) for d in items}
        full = best_ms(lambda d: decode(d), items, repeat)
        drafted = best_ms(lambda d: decode(d, targets[d]), items, repeat)
        ref = best_ms(lambda d: naive(d, targets[d]), items, repeat)
        ours = best_ms(lambda d: process_image(d, POLICY), items, repeat)
        print(f"{name:20s} {full:12.1f} {drafted:13.1f} {full / drafted:8.1f}x {ref:11.1f} {ours:10.1f} "
              f"{ref / ours:8.1f}x")


def _resampling(big: list[bytes], repeat: int) -> None:
    print("\n3. resampling on the large JPEGs: ms per image (decode + resize) and mean abs diff to"
          " full decode + LANCZOS in float")
    L, B = Image.Resampling.LANCZOS, Image.Resampling.BICUBIC

    def ideal(d):
        im, _ = decode(d)
        t = _target_of(d)
        bands = [b.convert("F").resize(t, L) for b in im.split()]
        return np.stack([np.asarray(b) for b in bands], -1)

    candidates = {
        "draft + LANCZOS (ours)": lambda d: _resized(d, L, 1, None),
        "draft + BICUBIC": lambda d: _resized(d, B, 1, None),
        "draft to 2x + LANCZOS": lambda d: _resized(d, L, 2, None),
        "BICUBIC reducing_gap=2": lambda d: _resized(d, B, 0, 2.0),
        "LANCZOS reducing_gap=3": lambda d: _resized(d, L, 0, 3.0),
        "LANCZOS, no draft": lambda d: _resized(d, L, 0, None),
    }
    refs = {d: ideal(d) for d in big}
    print(f"{'candidate':26s} {'ms/img':>8s} {'mean |diff|':>12s}")
    for name, fn in candidates.items():
        ms = best_ms(fn, big, repeat)
        err = np.mean([np.abs(np.asarray(fn(d), np.float32) - refs[d]).mean() for d in big])
        print(f"{name:26s} {ms:8.1f} {err:12.2f}")


def _validation(typical: list[bytes], repeat: int) -> None:
    print("\n4. validating a pass-through JPEG: full decode vs 1/8 DCT-scaled decode (same entropy"
          " decoding, ms per image)")
    full = best_ms(lambda d: decode(d), typical, repeat)
    scaled = best_ms(lambda d: decode(d, (1, 1)), typical, repeat)
    print(f"full {full:.2f} ms, scaled {scaled:.2f} ms ({full / scaled:.1f}x)")


def _resized(data: bytes, resample, draft: int, reducing_gap):
    """Decode + resize to longer:500; draft=0 full decode, 1 DCT-scale to >= target, 2 to >= 2x target
    (what Image.thumbnail does)."""
    im = Image.open(io.BytesIO(data))
    target = resized_size(*im.size, "longer:500")
    box = im.draft("RGB", (target[0] * draft, target[1] * draft))[1] if draft else None
    im.load()
    return im.resize(target, resample, box=box, reducing_gap=reducing_gap)


if __name__ == "__main__":
    sys.exit(main())
