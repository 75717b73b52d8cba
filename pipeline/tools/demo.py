"""`make demo`: the whole product on an embedded default, as a user would run it.

synthetic ILSVRC2012-layout archives -> prepare-shards -> audit-shards --deep -> a short CPU training run
-> report-run (one page of the run's curves and the loader verdict).
Each step is the real console script in a subprocess; the first step that fails stops the demo
with its exit code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from imagenet_shards.pipeline.console import OneLineParser

BIN = Path(sys.executable).parent


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m imagenet_shards.pipeline.tools.demo",
                      description=__doc__.splitlines()[0])
    p.add_argument("--out", default="demo-out", help="working folder (default demo-out)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train-per-class", type=int, default=100)
    p.add_argument("--val-per-class", type=int, default=20)
    p.add_argument("--epochs", type=int, default=6, help="CPU training epochs (default 6)")
    p.add_argument("--fresh", action="store_true", help="delete OUT first")
    return p


def _step(title: str, cmd: list[str]) -> int:
    """Run one step as a subprocess, framed by its title and result; its exit code."""
    print(f"\n=== {title}\n$ {' '.join(cmd)}", flush=True)
    t0 = time.monotonic()
    rc = subprocess.call(cmd)
    dt = time.monotonic() - t0
    print(f"--- {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {dt:.1f} s", flush=True)
    return rc


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    if args.fresh and out.exists():
        shutil.rmtree(out)
    archives, shards, run_dir = out / "archives", out / "shards", out / "run"
    ran = []
    os.environ.setdefault("PYTHONUNBUFFERED", "1")

    subprocess.call([sys.executable, "-m", "imagenet_shards.pipeline.tools.doctor", "--brief"])
    if not (archives / "expected.json").exists():
        rc = _step("1. generate synthetic ILSVRC2012 archives (real layout, learnable classes, planted quirks)",
                   [str(BIN / "make-synthetic-imagenet"), str(archives), "--classes", str(args.classes),
                    "--train-per-class", str(args.train_per_class), "--val-per-class", str(args.val_per_class),
                    "--seed", "0"])
        if rc:
            return rc
    else:
        print(f"\n=== 1. synthetic archives already in {archives} (delete it or use --fresh to regenerate)")
    ran.append("generate")

    steps = [
        ("2. prepare-shards: validate, fix, resize, shuffle, write shards + manifests", "prepare-shards",
         [str(BIN / "prepare-shards"), "--train", str(archives / "ILSVRC2012_img_train.tar"),
          "--val", str(archives / "ILSVRC2012_img_val.tar"),
          "--devkit", str(archives / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(shards),
          "--shard-samples", "200"]),
        ("3. audit-shards --deep: hashes, tar structure, labels vs class table, full decode", "audit-shards --deep",
         [str(BIN / "audit-shards"), str(shards), "--deep"]),
        ("4. train-imagenet on CPU: resnet18 at 64 px, short run; val top-1 shows labels line up", "train-imagenet",
         [str(BIN / "train-imagenet"), "--data", str(shards), "--out", str(run_dir), "--arch", "resnet18",
          "--epochs", str(args.epochs), "--batch-size", "64", "--res", "64", "--val-res", "72",
          "--val-crop", "64", "--workers", "2", "--device", "cpu", "--amp", "none",
          "--warmup-epochs", "1", "--lr", "0.2", "--resume", "auto"]),
        ("5. report-run: one page of the run's curves and the verdict on its data loading", "report-run",
         [str(BIN / "report-run"), str(run_dir), "--out", str(out / "report.png")]),
    ]
    for title, name, cmd in steps:
        rc = _step(title, cmd)
        if rc:
            return rc
        ran.append(name)

    print("\n=== demo summary")
    print(f"ran: {', '.join(ran)}")
    print(f"archives: {archives}\nshards:   {shards} (manifest.json, _info.json, *.wids.json)")
    print(f"run:      {run_dir} (metrics.jsonl, checkpoints, tensorboard/)")
    print(f"report:   {out / 'report.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
