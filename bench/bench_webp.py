"""What a WEBP image costs the loader beside the same image as JPEG (timm's imagenet-w21-webp-wds).

    python bench/bench_webp.py [--images 200] [--rounds 5] [--quality 90] [--json]

ImageNet-like photos (`make-synthetic-imagenet --imagenet-like`'s `images.photo_bytes`: ImageNet's
bytes per pixel and size spread), each encoded as a baseline JPEG and as a lossy WEBP at the same
quality, decoded by the loader's own functions (`train/loader/decode.py`: RandomResizedCrop 224 +
flip for train, resize 256 + centre crop 224 for val): WEBP through Pillow (the only path it has),
JPEG through Pillow and through the libjpeg-turbo region decoder (the loader's default where built).
CPU time per image, pinned to one core, the rounds interleaved (A, B, C, A, B, C, ...), best round
kept; file sizes beside. The box may be shared: CPU time, not wall.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import time

import numpy as np
from PIL import Image, features

from imagenet_shards.pipeline.tools.synthetic.images import class_styles, imagenet_like_size, photo_bytes
from imagenet_shards.train.loader import decode as dec


def images(n: int, quality: int, max_short: int | None) -> tuple[list[bytes], list[bytes]]:
    """`n` photos as (JPEG, WEBP) at `quality`; `max_short`: first shrunk so the shorter side is at most
    that (timm's imagenet-w21-webp-wds: 768)."""
    styles, jpegs, webps = class_styles(10, 0), [], []
    for i in range(n):
        rng = np.random.default_rng([i, 31])
        w, h = imagenet_like_size(rng)
        if max_short and min(w, h) > max_short:
            w, h = round(w * max_short / min(w, h)), round(h * max_short / min(w, h))
        data, _ = photo_bytes(styles[i % 10], rng, w, h, quality)
        img = Image.open(io.BytesIO(data)).convert("RGB")
        buf = io.BytesIO()
        img.save(buf, "WEBP", quality=quality)
        jpegs.append(data)
        webps.append(buf.getvalue())
    return jpegs, webps


def per_image_ms(blobs: list[bytes], how: str, decoder: str) -> float:
    rng = random.Random(0)
    t0 = time.process_time()
    for b in blobs:
        if how == "train":
            dec.decode_train(b, res=224, rng=rng, decoder=decoder)
        else:
            dec.decode_val(b, resize=256, crop=224, decoder=decoder)
    return (time.process_time() - t0) * 1e3 / len(blobs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--max-short", type=int, default=None, help="shrink first to this shorter side (timm's w21: 768)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not features.check("webp"):
        print("error: this Pillow has no WEBP codec (scripts/bootstrap.sh builds pillow-simd with libwebp-dev)",
              file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    jpegs, webps = images(args.images, args.quality, args.max_short)
    rows = [("webp", "pil", webps), ("jpeg", "pil", jpegs)]
    if dec.resolve_decoder("turbo") == "turbo":
        rows.append(("jpeg", "turbo", jpegs))
    best: dict = {}
    for _ in range(args.rounds):
        for how in ("train", "val"):
            for fmt, decoder, blobs in rows:
                ms = per_image_ms(blobs, how, decoder)
                key = f"{how} {fmt} ({decoder})"
                best[key] = min(best.get(key, ms), ms)
    result = {"images": args.images, "quality": args.quality, "max_short": args.max_short, "mean_bytes": {
        "jpeg": round(sum(map(len, jpegs)) / len(jpegs)), "webp": round(sum(map(len, webps)) / len(webps))},
        "ms_per_image": {k: round(v, 3) for k, v in best.items()}}
    for how in ("train", "val"):
        w = best[f"{how} webp (pil)"]
        result[f"{how}_webp_over_jpeg_pil"] = round(w / best[f"{how} jpeg (pil)"], 2)
        if f"{how} jpeg (turbo)" in best:
            result[f"{how}_webp_over_jpeg_turbo"] = round(w / best[f"{how} jpeg (turbo)"], 2)
    print(json.dumps(result, indent=None if not args.json else 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
