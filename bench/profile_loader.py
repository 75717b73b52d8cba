"""Where our loader's time goes, per image, on a shard set (CPU seconds of this one process).

    taskset -c 0 python bench/profile_loader.py DATA [--images 1000] [--res 224]

Stages, each timed over the same records with ``time.process_time`` (CPU, not wall: robust on a
shared machine), in microseconds per image:
- ``read``: tar records from the shards (``read_shard``);
- ``header``: ``_jpegcrop.header`` (libjpeg header parse);
- ``whole image at 1/8``: a whole-image 1/8 DCT-scaled decode: every block entropy-decoded, next
  to no IDCT / colour work; the floor of any loader that must entropy-decode every block (ours
  does not, on shards with restart markers);
- ``region decode``: ``decode_region`` for the crop RandomResizedCrop drew (the turbo path's C part:
  only the restart cells around the crop when the JPEGs have prepare-shards' markers);
- ``resize``: Pillow's bilinear resample of that region to res x res;
- ``to batch``: the resized image into a uint8 CHW batch slot, flipped (``decode._write_chw``:
  Pillow's memory read in place through its Arrow export, split into planes in C);
- ``decode_train``: the whole per-sample call (geometry, C, resize, Python);
- ``batches()``: the loader's batching stage over the records (decode + per-sample Python + assembly).
The difference between ``batches()`` and the sum of its parts is per-sample Python overhead.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time

import numpy as np
from PIL import Image

from imagenet_shards.train import loader as D
from imagenet_shards.train.loader import _jpegcrop
from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader.batching import DecodeConfig, batches


def _cpu(fn, items) -> float:
    t0 = time.process_time()
    for x in items:
        fn(x)
    return time.process_time() - t0


def profile(data: str, *, images: int, res: int) -> dict:
    """Microseconds of CPU per image for each stage (see the module docstring)."""
    shards = D.split_shards(D.read_manifest(data), data, "train")
    t0 = time.process_time()
    recs = []
    for s in shards:
        for rec in D.read_shard(s.url):
            recs.append(rec)
            if len(recs) >= images:
                break
        if len(recs) >= images:
            break
    t_read = time.process_time() - t0
    jpgs = [r.jpg for r in recs]
    n = len(jpgs)
    sizes = [_jpegcrop.header(j)[:2] for j in jpgs]
    rng = random.Random(0)
    crops = [dec.random_resized_crop_params(w, h, (0.08, 1.0), (3 / 4, 4 / 3), rng) for w, h in sizes]
    geo = []
    for (top, left, h, w) in crops:
        s = dec._dct_reduction(w, h, res, res)
        x0, y0, x1, y1 = left / s, top / s, (left + w) / s, (top + h) / s
        rx = max(1.0, (x1 - x0) / res)
        ry = max(1.0, (y1 - y0) / res)
        geo.append((s, x0, y0, x1, y1, int(math.floor(x0 - rx)) - 10, int(math.floor(y0 - ry)) - 2,
                    int(math.ceil(x1 + rx)) + 10, int(math.ceil(y1 + ry)) + 2))
    regions = [_jpegcrop.decode_region(j, g[0], *g[5:]) for j, g in zip(jpgs, geo)]
    out = {"images": n, "mean_kb": sum(map(len, jpgs)) / n / 1000,
           "read": t_read / n, "header": _cpu(_jpegcrop.header, jpgs) / n,
           "whole image at 1/8 (every block)": _cpu(lambda j: _jpegcrop.decode_region(j, 8, 0, 0, 1 << 20, 1 << 20),
                                                   jpgs) / n,
           "region decode": _cpu(lambda jg: _jpegcrop.decode_region(jg[0], jg[1][0], *jg[1][5:]), zip(jpgs, geo)) / n}

    def resize(rg):
        (pixels, rx, ry, width, rows), g = rg
        img = Image.frombuffer("RGBX", (width, rows), pixels, "raw", "RGBX", 0, 1)
        return img.resize((res, res), Image.BILINEAR, box=(g[1] - rx, g[2] - ry, g[3] - rx, g[4] - ry))
    outs = [resize(rg) for rg in zip(regions, geo)]
    out["resize"] = _cpu(resize, zip(regions, geo)) / n
    slot = np.empty((3, res, res), np.uint8)

    out["to batch"] = _cpu(lambda img: dec._write_chw(img, slot, True), outs) / n
    rng = random.Random(0)
    out["decode_train"] = _cpu(lambda j: dec.decode_train(j, res=res, rng=rng, decoder="turbo"), jpgs) / n
    cfg = DecodeConfig(train=True, res=res, decoder="turbo")
    t0 = time.process_time()
    for _ in batches(iter(recs), [64] * (n // 64), cfg, 0, fill=True):
        pass
    out["batches()"] = (time.process_time() - t0) / (64 * (n // 64))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data")
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--res", type=int, default=224)
    args = p.parse_args(argv)
    r = profile(args.data, images=args.images, res=args.res)
    print(f"{r.pop('images')} images, {r.pop('mean_kb'):.0f} KB mean; CPU microseconds per image:")
    for k, v in r.items():
        print(f"  {k:34s} {v * 1e6:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
