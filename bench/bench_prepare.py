"""Benchmark prepare-shards against a naive one-process reference on the same archives.

    .venv/bin/python bench/bench_prepare.py [--classes 10 --train-per-class 150] [--json]

Reference (what a hand-rolled script does): tarfile over the tar of tars, Pillow full decode,
convert("RGB"), LANCZOS resize to the same target, save JPEG q90, one process.
Reported: img/s per worker for both, the ratio, scaling from 1 to 2 workers, peak RSS per worker,
for two policies: the default `longer:500` (most ImageNet-like images pass through untouched) and
`longer:320` (every image is decoded, resized and re-encoded: the worst case).
Numbers are measured, never asserted; record them in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from PIL import Image

from imagenet_shards.pipeline.prepare.config import Config
from imagenet_shards.pipeline.prepare.images import parse_resize
from imagenet_shards.pipeline.prepare.run import prepare
from imagenet_shards.pipeline.tools.synthetic.generate import generate


def naive_reference(train_tar: Path, resize: str, quality: int = 90) -> tuple[int, float]:
    """tarfile + Pillow full decode + LANCZOS + save, one process: (images, seconds)."""
    mode, n = parse_resize(resize)
    count, t0 = 0, time.perf_counter()
    with tarfile.open(train_tar) as outer:
        for member in outer:
            with tarfile.open(fileobj=outer.extractfile(member)) as inner:
                for m in inner:
                    data = inner.extractfile(m).read()
                    try:
                        img = Image.open(io.BytesIO(data))
                        img = img.convert("RGB")
                    except Exception:
                        continue
                    w, h = img.size
                    side = max(w, h) if mode == "longer" else min(w, h)
                    if mode != "none" and side > n:
                        s = n / side
                        img = img.resize((max(1, round(w * s)), max(1, round(h * s))), Image.LANCZOS)
                    img.save(io.BytesIO(), "JPEG", quality=quality)
                    count += 1
    return count, time.perf_counter() - t0


def run_prepare(archives: Path, out: Path, resize: str, workers: int) -> tuple[int, float]:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    s = prepare(out=str(out), train=archives / "ILSVRC2012_img_train.tar", config=Config(
        resize=resize, shard_samples=100, splits=("train",)), workers=workers, progress=False)
    return s["images_processed"], time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train-per-class", type=int, default=150)
    p.add_argument("--work", default=None, help="working folder (default: a temp dir)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-prepare-"))
    archives = work / "archives"
    if not (archives / "expected.json").exists():
        generate(archives, classes=args.classes, train_per_class=args.train_per_class, val_per_class=1, seed=0,
                 quirks=True, progress=False)
    cores = len(os.sched_getaffinity(0))
    rows = []
    for resize in ("longer:500", "longer:320"):
        n_ref, t_ref = naive_reference(archives / "ILSVRC2012_img_train.tar", resize)
        n1, t1 = run_prepare(archives, work / "out1", resize, 1)
        row = {"resize": resize, "images": n1, "naive_img_s": n_ref / t_ref, "ours_1w_img_s": n1 / t1}
        row["ratio_vs_naive"] = row["ours_1w_img_s"] / row["naive_img_s"]
        if cores >= 2:
            n2, t2 = run_prepare(archives, work / "out2", resize, 2)
            row["ours_2w_img_s"] = n2 / t2
            row["scaling_1_to_2"] = row["ours_2w_img_s"] / (2 * row["ours_1w_img_s"])
        rows.append(row)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = {"machine": f"{platform.machine()} {cores} cores, {platform.processor() or 'cpu'}",
              "python": platform.python_version(), "pil": Image.__version__, "rows": rows,
              "peak_worker_rss_mb": round(peak_rss_mb, 1)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"machine: {result['machine']}, PIL {result['pil']}")
        print(f"{'resize':12s} {'images':>7s} {'naive img/s':>12s} {'ours 1w':>9s} {'ratio':>6s} {'ours 2w':>9s} {'scaling':>8s}")
        for r in rows:
            print(f"{r['resize']:12s} {r['images']:7d} {r['naive_img_s']:12.0f} {r['ours_1w_img_s']:9.0f} "
                  f"{r['ratio_vs_naive']:6.2f} {r.get('ours_2w_img_s', 0):9.0f} {r.get('scaling_1_to_2', 0):8.2f}")
        print(f"peak worker RSS: {result['peak_worker_rss_mb']:.0f} MB")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
