"""Per-crop CPU time of the loader's JPEG decoders, and of the candidates tried for ``turbo``.

    python bench/bench_decoders.py DATA [--images 250] [--passes 5] [--res 224 176 128] [--json]
    python bench/bench_decoders.py BENCH --make 2000      # first write the bench set of docs/loader.md

DATA is a shard set (directory with manifest.json); the first ``--images`` train images are read
into memory. ``--make N`` first writes N photo-like JPEGs (500x375 / 500x333 / 375x500 / 500x400,
q90, the test fixtures' ``content="photo"``) as a 4-shard set at DATA, the bench set of
docs/loader.md and docs/benchmarks.md.

Two tables, CPU time per image (``time.process_time`` of this one process; torch limited to one
thread), for the same crops whatever the decoder (image i's crop is drawn from ``Random(i)``):

1. **decoders**: ``pil``, ``turbo`` and ``tvio`` through the loader's own ``decode_train`` /
   ``decode_val``, for train RandomResizedCrop to 128, 176 and 224 px and the val 256 -> 224 centre crop;
2. **candidates** at each ``--res``: ``pil`` as the reference; simplejpeg full decode at 1/2^k and at
   M/8 (+ PIL resize), with and without its fast options; PyTurboJPEG's lossless crop + decode at M/8
   and a plain M/8 decode (fast DCT); our region decode (``turbo``) and the same with libjpeg's fast
   IDCT + plain upsampling; and the entropy-decoding floor (1/8 scale, one iMCU column, down to the
   crop's last row, and all rows). A candidate whose package is not installed, or that the built
   extension cannot do (region decode at M/8 was a one-off build), prints ``not run: <reason>``.

Each figure: the median over ``--passes`` passes of the whole set, and in brackets the least
disturbed estimate (per chunk of 25 images the fastest pass, summed), for a machine shared with
other jobs. Pin it to one core (``taskset -c 0``). Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from imagenet_shards.train.bench.report import pil_description  # noqa: E402
from imagenet_shards.train import loader as D  # noqa: E402
from imagenet_shards.train.loader import decode as dec  # noqa: E402

SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
CHUNK = 25
BENCH_SIZES = [(500, 375), (500, 333), (375, 500), (500, 400)]


class NotRun(Exception):
    """A variant that cannot run here; its message is the reason."""


def load_images(data: str, n: int) -> list[bytes]:
    """The first ``n`` train JPEGs of the shard set ``data``, in manifest order."""
    out: list[bytes] = []
    for shard in D.split_shards(D.read_manifest(data), data, "train"):
        for rec in D.read_shard(shard.url):
            if rec.jpg is not None:
                out.append(rec.jpg)
                if len(out) == n:
                    return out
    return out


def make_bench_set(root: str, n: int) -> None:
    """Write the photo-like bench set (4 shards, q90) at ``root`` with the test fixtures' writer."""
    from tests.fixtures.loader import write_shard_set
    write_shard_set(root, num_samples=n, num_shards=4, num_classes=10, content="photo", size=BENCH_SIZES,
                    quality=90)


def time_per_image(fn: Callable[[int, bytes], object], images: list[bytes], passes: int) -> tuple[float, float]:
    """(median ms per image over ``passes`` passes, least disturbed ms per image) of ``fn(i, jpeg)``."""
    fn(0, images[0])  # first-call costs (imports, lazy initialisation) are not the decoder's
    chunks = [[] for _ in range(0, len(images), CHUNK)]
    totals = []
    for _ in range(passes):
        total = 0.0
        for c, start in enumerate(range(0, len(images), CHUNK)):
            t0 = time.process_time()
            for i in range(start, min(start + CHUNK, len(images))):
                fn(i, images[i])
            dt = time.process_time() - t0
            chunks[c].append(dt)
            total += dt
        totals.append(total)
    n = len(images)
    return 1000 * statistics.median(totals) / n, 1000 * sum(min(c) for c in chunks) / n


def _crop(i: int, width: int, height: int) -> tuple[float, float, float, float]:
    # the same draw decode_train makes first from Random(i): equal crops for every variant
    return dec.random_resized_crop_params(width, height, SCALE, RATIO, random.Random(i))


def _m8(crop_w: float, crop_h: float, res: int) -> int:
    """The smallest M (1..8) for which the crop scaled by M/8 still covers ``res`` x ``res``."""
    return max(1, min(8, math.ceil(8 * max(res / crop_w, res / crop_h))))


def _resize(pixels: np.ndarray, box: tuple[float, float, float, float], res: int) -> np.ndarray:
    return np.asarray(Image.fromarray(pixels).resize((res, res), Image.BILINEAR, box=box))


# ----------------------------------------------------------------------------- decoders (table 1)

def decoder_variants() -> list[tuple[str, str, Callable[[str], Callable]]]:
    """(crop label, decoder, factory(decoder) -> fn(i, jpeg)) for table 1."""
    def train(res):
        return lambda d: lambda i, b: dec.decode_train(b, res=res, rng=random.Random(i), decoder=d)

    def val(d):
        return lambda i, b: dec.decode_val(b, resize=256, crop=224, decoder=d)
    return [(f"train RRC -> {r} px", train(r)) for r in (128, 176, 224)] + [("val 256 -> 224 centre crop", val)]


def decoders_table(images: list[bytes], passes: int) -> list[dict]:
    """Table 1: one row per crop, ms per image for each of pil, turbo, tvio (or why not run)."""
    rows = []
    for label, factory in decoder_variants():
        row = {"crop": label}
        for d in ("pil", "turbo", "tvio"):
            if d == "turbo" and dec._jpegcrop is None:
                row[d] = "not run: the _jpegcrop extension is not built"
                continue
            row[d] = time_per_image(factory(d), images, passes)
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- candidates (table 2)

def _simplejpeg(res: int, *, m8: bool, fast: bool):
    try:
        import simplejpeg
    except ImportError:
        raise NotRun("not run: simplejpeg is not installed") from None

    def fn(i, b):
        h, w, _, _ = simplejpeg.decode_jpeg_header(b)
        top, left, ch, cw = _crop(i, w, h)
        if m8:  # the smallest M/8 that keeps the crop >= res
            m = _m8(cw, ch, res)
            px = simplejpeg.decode_jpeg(b, "RGB", fastdct=fast, fastupsample=fast,
                                        min_width=math.ceil(w * m / 8), min_height=math.ceil(h * m / 8))
        else:  # 1/2^k, the rule of the pil and turbo decoders
            s = dec._dct_reduction(cw, ch, res, res)
            px = simplejpeg.decode_jpeg(b, "RGB", fastdct=fast, fastupsample=fast, min_factor=s,
                                        min_width=math.ceil(w / s), min_height=math.ceil(h / s))
        f = px.shape[1] / w
        return _resize(px, (left * f, top * f, (left + cw) * f, (top + ch) * f), res)
    return fn


def _pyturbojpeg(res: int, *, crop: bool):
    try:
        from turbojpeg import TJFLAG_FASTDCT, TJPF_RGB, TurboJPEG
        tj = TurboJPEG()
    except ImportError:
        raise NotRun("not run: PyTurboJPEG is not installed") from None
    except Exception as e:  # e.g. libturbojpeg.so not found
        raise NotRun(f"not run: PyTurboJPEG cannot start: {type(e).__name__}: {e}".splitlines()[0]) from None

    def fn(i, b):
        w, h = tj.decode_header(b)[:2]
        top, left, ch, cw = _crop(i, w, h)
        m = _m8(cw, ch, res)
        x0, y0 = 0, 0
        if crop:  # lossless transform: the crop must start on an MCU (16 px for 4:2:0)
            x0, y0 = int(left) // 16 * 16, int(top) // 16 * 16
            b = tj.crop(b, x0, y0, min(w, math.ceil(left + cw)) - x0, min(h, math.ceil(top + ch)) - y0)
        px = tj.decode(b, pixel_format=TJPF_RGB, scaling_factor=(m, 8), flags=TJFLAG_FASTDCT)
        f = m / 8
        return _resize(np.ascontiguousarray(px),
                       ((left - x0) * f, (top - y0) * f, (left - x0 + cw) * f, (top - y0 + ch) * f), res)
    return fn


class _FastJpegcrop:
    """The built extension with libjpeg's fast integer IDCT and plain upsampling switched on."""

    def __init__(self, module):
        self.module = module

    def header(self, data):
        return self.module.header(data)

    def decode_region(self, *args, **kwargs):
        return self.module.decode_region(*args, fast=True, **kwargs)


def _turbo(res: int, *, fast: bool):
    if dec._jpegcrop is None:
        raise NotRun("not run: the _jpegcrop extension is not built")
    module = dec._jpegcrop

    def fn(i, b):
        dec._jpegcrop = _FastJpegcrop(module) if fast else module
        try:
            return dec.decode_train(b, res=res, rng=random.Random(i), decoder="turbo")
        finally:
            dec._jpegcrop = module
    return fn


def _entropy_floor(res: int, *, all_rows: bool):
    """Entropy decoding only: at 1/8 scale each 8x8 block's IDCT is one coefficient, and one iMCU
    column is converted; libjpeg still Huffman-decodes every block of every row it passes."""
    if dec._jpegcrop is None:
        raise NotRun("not run: the _jpegcrop extension is not built")
    jc = dec._jpegcrop

    def fn(i, b):
        w, h, _ = jc.header(b)
        top, _, ch, _ = _crop(i, w, h)
        last = math.ceil(h / 8) if all_rows else max(1, math.ceil((top + ch) / 8))
        return jc.decode_region(b, 8, 0, last - 1, 1, last)
    return fn


def _not_m8(res: int, *, fast: bool):
    raise NotRun("not run: the built _jpegcrop decodes at 1/2^k only (the M/8 variant was a one-off build)")


def candidate_variants(res: int) -> list[tuple[str, Callable[[], Callable]]]:
    """(label, factory) for table 2 at ``res``; a factory raises NotRun when the variant cannot run here."""
    def pil():
        return lambda i, b: dec.decode_train(b, res=res, rng=random.Random(i), decoder="pil")
    return [
        ("pil (reference)", pil),
        ("simplejpeg full decode at 1/2^k + PIL resize", lambda: _simplejpeg(res, m8=False, fast=False)),
        ("same, fastdct + fastupsample", lambda: _simplejpeg(res, m8=False, fast=True)),
        ("simplejpeg at M/8 (smallest M/8 >= what the crop needs)", lambda: _simplejpeg(res, m8=True, fast=False)),
        ("same, fast options", lambda: _simplejpeg(res, m8=True, fast=True)),
        ("PyTurboJPEG: lossless crop (tjTransform) + decode at M/8, fast DCT", lambda: _pyturbojpeg(res, crop=True)),
        ("PyTurboJPEG decode at M/8, fast DCT, no crop", lambda: _pyturbojpeg(res, crop=False)),
        ("libjpeg region decode, 1/2^k, RGBX + Pillow (turbo)", lambda: _turbo(res, fast=False)),
        ("same, fast IDCT + plain upsampling", lambda: _turbo(res, fast=True)),
        ("same at M/8", lambda: _not_m8(res, fast=False)),
        ("same at M/8, fast options", lambda: _not_m8(res, fast=True)),
        ("floor: entropy decoding down to the crop's last row", lambda: _entropy_floor(res, all_rows=False)),
        ("floor: entropy decoding of all rows", lambda: _entropy_floor(res, all_rows=True)),
    ]


def candidates_table(images: list[bytes], passes: int, res: int) -> list[dict]:
    """Table 2 at ``res``: one row per candidate, ms per image (or why it did not run)."""
    rows = []
    for label, factory in candidate_variants(res):
        try:
            fn = factory()
            rows.append({"variant": label, "ms": time_per_image(fn, images, passes)})
        except NotRun as e:
            rows.append({"variant": label, "ms": str(e)})
        except Exception as e:
            rows.append({"variant": label, "ms": f"not run: failed: {type(e).__name__}: {e}".splitlines()[0]})
    return rows


# ----------------------------------------------------------------------------- CLI

def _cell(v) -> str:
    return v if isinstance(v, str) else f"{v[0]:.2f} ({v[1]:.2f})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", metavar="DATA", help="shard set directory (holds manifest.json)")
    p.add_argument("--images", type=int, default=250, help="train images measured (default 250)")
    p.add_argument("--passes", type=int, default=5, help="passes over the images (default 5)")
    p.add_argument("--res", type=int, nargs="+", default=[224], help="train crop sizes of table 2 (default 224)")
    p.add_argument("--make", type=int, default=None, metavar="N", help="first write an N-image bench set at DATA")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if args.images < 1 or args.passes < 1 or min(args.res) < 1:
        print("error: --images, --passes and --res must be >= 1", file=sys.stderr)
        return 2
    if args.make:
        make_bench_set(args.data, args.make)
    try:
        images = load_images(args.data, args.images)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        return 2
    if not images:
        print(f"error: {args.data} has no train images", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    result = {"images": len(images), "mean_bytes": round(sum(map(len, images)) / len(images)),
              "passes": args.passes, "cores_usable": cores, "pil": pil_description(),
              "jpegcrop_libjpeg_turbo": getattr(dec._jpegcrop, "LIBJPEG_TURBO_VERSION", None),
              "decoders": decoders_table(images, args.passes),
              "candidates": {r: candidates_table(images, args.passes, r) for r in args.res}}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['images']} images, {result['mean_bytes'] / 1000:.0f} KB on average, {args.passes} passes, "
          f"{cores} usable cores, {result['pil']}, _jpegcrop on libjpeg-turbo {result['jpegcrop_libjpeg_turbo']}")
    print("ms per image (CPU): median of the passes (least disturbed estimate)\n")
    print(f"{'crop':<28} {'pil':>14} {'turbo':>14} {'tvio':>14}")
    for row in result["decoders"]:
        print(f"{row['crop']:<28} " + " ".join(f"{_cell(row[d]):>14}" for d in ("pil", "turbo", "tvio")))
    for r, rows in result["candidates"].items():
        print(f"\ncandidates, train RRC -> {r} px")
        for row in rows:
            print(f"  {row['variant']:<70} {_cell(row['ms'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
