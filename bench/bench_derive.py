"""Does a lossless codec over the pixel form's planes pay, and does derive keep up with prepare?

    .venv/bin/python bench/bench_derive.py [--images 200] [--max-side 400] [--work DIR]

On an ImageNet-like synthetic set (`make-synthetic-imagenet --imagenet-like`: ImageNet's bytes per
pixel and size spread; N and 3N train images, no quirks), one worker each, in this process:
1. prepare-shards (archives -> JPEG shards) and prepare-shards derive (JPEG shards -> yuv420 at
   --max-side): CPU seconds for N and for 3N images, and the marginal rate (2N / the difference), so
   the start-up (index, plan, manifest) does not count;
2. over the derived payloads: bytes saved and decode cost of zlib level 1 (stdlib) against taking the
   raw planes as they are (a copy into a numpy array, what a loader does with the bytes at least).
   zstandard/lz4 are tried only if installed (they are not dependencies);
3. the pixel encoder alone, over the decoded and resized images of the 3N set's first shard: µs per
   image of derive's C encoder (`_jpegtran.yuv420`) and of numpy's reference (`pixels.encode`), best
   of 3 passes, and whether every payload is the same bytes.
Not a test: numbers depend on the machine and its load (printed: `uptime`); run it on a quiet one.
Note the content: synthetic photos, not ImageNet's, so the compression ratio is indicative only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from imagenet_shards.pipeline.format.tar import iter_tar
from imagenet_shards.pipeline.prepare.derive import derive
from imagenet_shards.pipeline.prepare.run import Config, prepare
from imagenet_shards.pipeline.tools.synthetic.generate import generate


def cpu_of(fn) -> float:
    """CPU seconds (this process and its children) that fn() took."""
    t = os.times()
    fn()
    u = os.times()
    return (u.user - t.user) + (u.system - t.system) + (u.children_user - t.children_user) \
        + (u.children_system - t.children_system)


def rates(work: Path, n: int, max_side: int) -> dict:
    """CPU s of prepare and derive for n images (one class of n train images, one val image)."""
    src, jpeg, pix = work / f"src-{n}", work / f"jpeg-{n}", work / f"pix-{n}"
    generate(src, classes=1, train_per_class=n, val_per_class=1, seed=1, quirks=False, progress=False,
             imagenet_like=True)
    t_prep = cpu_of(lambda: prepare(out=str(jpeg), train=str(src / "ILSVRC2012_img_train.tar"),
                                    val=str(src / "ILSVRC2012_img_val.tar"),
                                    devkit=str(src / "ILSVRC2012_devkit_t12.tar.gz"),
                                    config=Config(shard_samples=100), workers=1, progress=False))
    t_der = cpu_of(lambda: derive(str(jpeg), out=str(pix), max_side=max_side, workers=1, progress=False))
    m = json.loads((pix / "manifest.json").read_text())
    images = m["totals"]["samples"]
    jm = json.loads((jpeg / "manifest.json").read_text())
    return {"images": images, "prepare_cpu_s": t_prep, "derive_cpu_s": t_der,
            "jpeg_bytes": jm["totals"]["bytes"], "pixel_bytes": m["totals"]["bytes"], "pix": pix}


def payloads(pix: Path) -> list[bytes]:
    out = []
    for tar in sorted(pix.rglob("*.tar")):
        with open(tar, "rb") as f:
            out += [m.data for m in iter_tar(f) if m.ext == "yuv420"]
    return out


def per_image_us(fn, items) -> float:
    """Wall µs per item of ``fn`` over ``items``, the best of 3 passes."""
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for x in items:
            fn(x)
        best = min(best, time.perf_counter() - t)
    return best / len(items) * 1e6


def codec_figures(data: list[bytes]) -> dict:
    """Bytes and decode µs per image: raw (copy into numpy), zlib level 1, and zstd/lz4 if installed."""
    raw = sum(map(len, data))
    out = {"raw": {"bytes_per_image": raw / len(data),
                   "decode_us": per_image_us(lambda b: np.frombuffer(b, np.uint8).copy(), data)}}
    z = [zlib.compress(b, 1) for b in data]
    out["zlib1"] = {"bytes_per_image": sum(map(len, z)) / len(z), "decode_us": per_image_us(zlib.decompress, z),
                    "encode_us": per_image_us(lambda b: zlib.compress(b, 1), data)}
    try:
        import zstandard
        c, d = zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor()
        zs = [c.compress(b) for b in data]
        out["zstd1"] = {"bytes_per_image": sum(map(len, zs)) / len(zs), "decode_us": per_image_us(d.decompress, zs)}
    except ImportError:
        out["zstd1"] = "not installed"
    try:
        import lz4.frame
        lz = [lz4.frame.compress(b) for b in data]
        out["lz4"] = {"bytes_per_image": sum(map(len, lz)) / len(lz),
                      "decode_us": per_image_us(lz4.frame.decompress, lz)}
    except ImportError:
        out["lz4"] = "not installed"
    return out


def encoder_figures(jpeg: Path, max_side: int) -> dict:
    """µs per image of the C encoder and numpy's reference over one shard's decoded images (item 3)."""
    from imagenet_shards.pipeline.format import pixels
    from imagenet_shards.pipeline.prepare.encoders import _yuv420
    from imagenet_shards.pipeline.prepare.images import decode_resized

    with open(sorted(jpeg.rglob("*.tar"))[0], "rb") as f:
        rgbs = [decode_resized(m.data, f"longer:{max_side}") for m in iter_tar(f) if m.ext == "jpg"]

    out = {"images": len(rgbs), "numpy_us": per_image_us(pixels.encode, rgbs)}
    if _yuv420 is None:
        return {**out, "c_us": "not built (the _jpegtran extension, or its yuv420, is missing)"}
    c = lambda a: _yuv420(a, a.shape[1], a.shape[0])  # noqa: E731
    return {**out, "c_us": per_image_us(c, rgbs), "same_bytes": all(c(a) == pixels.encode(a) for a in rgbs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=200, help="N: the small run's train images (the large: 3N)")
    p.add_argument("--max-side", type=int, default=400)
    p.add_argument("--work", help="scratch folder (default: a temp folder, removed at the end)")
    args = p.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-pixels-"))
    try:
        print("load before:", os.getloadavg())
        small, large = rates(work, args.images, args.max_side), rates(work, 3 * args.images, args.max_side)
        di = large["images"] - small["images"]
        res = {
            "images": [small["images"], large["images"]],
            "prepare_img_per_cpu_s_marginal": di / (large["prepare_cpu_s"] - small["prepare_cpu_s"]),
            "derive_img_per_cpu_s_marginal": di / (large["derive_cpu_s"] - small["derive_cpu_s"]),
            "prepare_img_per_cpu_s_3N": large["images"] / large["prepare_cpu_s"],
            "derive_img_per_cpu_s_3N": large["images"] / large["derive_cpu_s"],
            "bytes_per_image": {"jpeg": large["jpeg_bytes"] / large["images"],
                                "yuv420": large["pixel_bytes"] / large["images"]},
            "codec": codec_figures(payloads(large["pix"])),
            "encoder": encoder_figures(work / f"jpeg-{3 * args.images}", args.max_side),
            "load_after": os.getloadavg(),
        }
        print(json.dumps(res, indent=1, default=str))
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
