"""Where our loader's time goes, per image, on a shard set (CPU seconds of this one process).

    taskset -c 0 python bench/profile_loader.py DATA [--images 1000] [--res 224]

Stages, each timed over the same records with ``time.process_time`` (CPU, not wall: robust on a
shared machine), in microseconds per image:
- ``read``: tar records from the shards (``read_shard``: the shard mapped, its members sliced);
- ``read, records dropped``: the same over whole shards, each record dropped once counted (no fresh
  memory: what a loader worker's reading costs), and ``read, checked (ALG)``: the same with each
  shard hashed whole and compared with the manifest's digest, as the loader does
  (``read_shard(digest=...)``), for xxh3_128 and sha256: the check's cost is the difference;
- ``header``: ``_jpegcrop.header`` (the frame size, read from the SOF segment);
- ``whole image at 1/8``: a whole-image 1/8 DCT-scaled decode: every block entropy-decoded, next
  to no IDCT / colour work; the floor of any loader that must entropy-decode every block (ours
  does not, on shards with restart markers);
- ``crop_into``: the turbo decoder's one C call for the crop RandomResizedCrop drew, into a batch
  slot, flipped; split by the call itself (its ``times``, thread CPU clock) into
  ``... region decode`` (header, geometry, and libjpeg decoding only the restart cells around the
  crop) and ``... resample into the slot`` (the bilinear resample straight into the CHW planes);
- ``decode_train``: the whole per-sample call (crop parameters in Python, the C call, fall-backs);
- ``batches()``: the loader's batching stage over the records (decode + per-sample Python + assembly);
- ``dct_scaling auto / off``: the train crops' ``crop_into`` and the val crop's ``decode_val`` (resize
  ``res * 256 / 224``) with the loader's 1/2, 1/4, 1/8 DCT scaling and without it (``scale=8``:
  train-imagenet ``--dct-scaling off``), interleaved three times, the best of each, with the share of
  crops auto decodes scaled; the ratio off / auto is the cost of the full-size decode.
The difference between ``batches()`` and ``decode_train`` is per-sample Python; the loader all in
(its worker and main process, shuffle buffer, hand-off) is bench-loader's images per CPU-second.

A set in the pixel form (the manifest's ``form``: yuv420) gets its own stages instead (issue 32):
``read`` as above but the records read as the loader reads them (image members as views of the
mapping, ``read_shard(views=True)``), the digest check the same way; ``size (.json)``
(``decode_pixels.size_of``); ``crop draws`` (``sample_rng``, the RandomResizedCrop box and the
flip, as the loader draws them); ``yuv_crop_into`` (the one C call, into one batch slot);
``pixels_train`` (the per-sample call, its draws included); ``batches()`` (into one reused batch).
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np
import torch

from imagenet_shards.train import loader as D
from imagenet_shards.train.loader import _jpegcrop
from imagenet_shards.pipeline.format.manifest import manifest_form
from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader import decode_pixels as pix
from imagenet_shards.train.loader.batching import DecodeConfig, batches, sample_rng


def _cpu(fn, items) -> float:
    t0 = time.process_time()
    for x in items:
        fn(x)
    return time.process_time() - t0


def profile(data: str, *, images: int, res: int) -> dict:
    """Seconds of CPU per image for each stage (see the module docstring); ``images`` and ``mean_kb`` too."""
    manifest = D.read_manifest(data)
    shards = D.split_shards(manifest, data, "train")
    views = manifest_form(manifest) == pix.FORM
    t0 = time.process_time()
    recs = []
    for s in shards:
        for rec in D.read_shard(s.url, views=views):
            recs.append(rec)
            if len(recs) >= images:
                break
        if len(recs) >= images:
            break
    t_read = time.process_time() - t0
    entries = D.read_manifest(data)["splits"]["train"]["shards"]
    checked = {}
    for alg in (None, "xxh3_128", "sha256", None, "xxh3_128", "sha256"):  # twice, interleaved: best of 2
        t0, m = time.process_time(), 0
        for s, e in zip(shards, entries):
            if m >= len(recs):
                break
            m += sum(1 for _ in D.read_shard(s.url, digest=(alg, e[alg]) if alg in e else None, views=views))
        name = f"read, checked ({alg})" if alg else "read, records dropped"
        checked[name] = min(checked.get(name, 1.0), (time.process_time() - t0) / m)
    if views:
        return {"images": len(recs), "mean_kb": sum(len(r.jpg) for r in recs) / len(recs) / 1000, "read": t_read / len(recs),
                **checked, **_pixel_stages(recs, res)}
    jpgs = [r.jpg for r in recs]
    n = len(jpgs)
    sizes = [_jpegcrop.header(j)[:2] for j in jpgs]
    rng = random.Random(0)
    crops = [(dec.random_resized_crop_params(w, h, (0.08, 1.0), (3 / 4, 4 / 3), rng), rng.random() < 0.5)
             for w, h in sizes]
    slot = np.empty((3, res, res), np.uint8)
    split = np.zeros(2)
    out = {"images": n, "mean_kb": sum(map(len, jpgs)) / n / 1000,
           "read": t_read / n, **checked, "header": _cpu(_jpegcrop.header, jpgs) / n,
           "whole image at 1/8 (every block)": _cpu(lambda j: _jpegcrop.decode_region(j, 8, 0, 0, 1 << 20, 1 << 20),
                                                   jpgs) / n,
           "crop_into (the one C call)": _cpu(lambda jc: _jpegcrop.crop_into(jc[0], slot, *jc[1][0], jc[1][1],
                                                                             times=split), zip(jpgs, crops)) / n}
    out["... region decode"], out["... resample into the slot"] = split[0] / n, split[1] / n
    rng = random.Random(0)
    out["decode_train"] = _cpu(lambda j: dec.decode_train(j, res=res, rng=rng, decoder="turbo", out=slot), jpgs) / n
    cfg = DecodeConfig(train=True, res=res, decoder="turbo")
    t0 = time.process_time()
    for _ in batches(iter(recs), [64] * (n // 64), cfg, 0, fill=True):
        pass
    out["batches()"] = (time.process_time() - t0) / (64 * (n // 64))
    out.update(dct_scaling_rows(jpgs, crops, sizes, res))
    return out


def dct_scaling_rows(jpgs: list[bytes], crops: list, sizes: list, res: int) -> dict:
    """CPU seconds per image of the train crops (``crop_into``) and val crops (``decode_val``) with
    dct scaling auto and off (best of 3 interleaved), and the shares of crops auto scales."""
    slot = np.empty((3, res, res), np.uint8)
    resize = round(res * 256 / 224)
    val_boxes = [dec.center_crop_params(w, h, resize, res) for w, h in sizes]
    best: dict = {}
    for _ in range(3):
        for mode, num in (("auto", 0), ("off", 8)):
            t = _cpu(lambda jc: _jpegcrop.crop_into(jc[0], slot, *jc[1][0], jc[1][1], scale=num), zip(jpgs, crops))
            name = f"train crop_into, dct_scaling {mode}"
            best[name] = min(best.get(name, 1e9), t / len(jpgs))
            t = _cpu(lambda j: dec.decode_val(j, resize=resize, crop=res, decoder="turbo", out=slot, dct_scaling=mode),
                     jpgs)
            name = f"val decode_val, dct_scaling {mode}"
            best[name] = min(best.get(name, 1e9), t / len(jpgs))
    for kind in ("train crop_into", "val decode_val"):
        best[f"{kind}: off / auto"] = best[f"{kind}, dct_scaling off"] / best[f"{kind}, dct_scaling auto"]
    best["train crops auto scales"] = sum(dec._dct_reduction(b[3], b[2], res, res) > 1 for b, _ in crops) / len(crops)
    best["val crops auto scales"] = sum(dec._dct_reduction(b[3], b[2], res, res) > 1 for b in val_boxes) / len(crops)
    return best


def _pixel_stages(recs: list, res: int) -> dict:
    """The pixel form's stages over ``recs`` (the module docstring), seconds of CPU per image."""
    n, m = len(recs), len(recs) // 64
    sizes = [pix.size_of(r.meta) for r in recs]

    def draw(r, size):
        rng = sample_rng(1, r)
        return dec.random_resized_crop_params(*size, (0.08, 1.0), (3 / 4, 4 / 3), rng), rng.random() < 0.5

    crops = [draw(r, size) for r, size in zip(recs, sizes)]
    block = np.empty((64, 3, res, res), np.uint8)
    out = {"size (.json)": _cpu(lambda r: pix.size_of(r.meta), recs) / n,
           "crop draws": _cpu(lambda rs: draw(*rs), zip(recs, sizes)) / n,
           "yuv_crop_into (the one C call)": _cpu(lambda i: _jpegcrop.yuv_crop_into(
               recs[i].jpg, *sizes[i], block[i % 64], *crops[i][0], crops[i][1], "bilinear"), range(n)) / n,
           "pixels_train": _cpu(lambda i: pix.pixels_train(recs[i].jpg, recs[i].meta, res=res, rng=sample_rng(1, recs[i]),
                                                           out=block[i % 64]), range(n)) / n}
    cfg = DecodeConfig(train=True, res=res, form=pix.FORM)
    t0 = time.process_time()
    for _ in batches(iter(recs), [64] * m, cfg, 0, fill=True, ring=_OneBlock(block)):
        pass
    out["batches()"] = (time.process_time() - t0) / (64 * m)
    return out


class _OneBlock:
    """A stand-in for a worker's ``slots.SlotRing``: the same block for every batch (reused memory)."""

    worker = 0

    def __init__(self, block: np.ndarray):
        self.block = torch.from_numpy(block)

    def take(self, shape):
        return self.block[:shape[0]], 0, 0, True


def not_seconds(stage: str) -> bool:
    """The entries of ``profile`` that are ratios or shares, not CPU seconds per image."""
    return stage.endswith(("off / auto", "scales"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data")
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--res", type=int, default=224)
    args = p.parse_args(argv)
    r = profile(args.data, images=args.images, res=args.res)
    print(f"{r.pop('images')} images, {r.pop('mean_kb'):.0f} KB mean; CPU microseconds per image:")
    for k, v in r.items():
        print(f"  {k:38s} {v:8.2f}" if not_seconds(k) else f"  {k:38s} {v * 1e6:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
