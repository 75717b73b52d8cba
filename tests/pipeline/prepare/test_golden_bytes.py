"""The shard set of a fixed synthetic input is byte-identical to the one pinned here.

Pinned on 2026-12-01 (before the package moved under ``imagenet_shards``), through the console
scripts, so the check holds across any restructuring of the code: same generator arguments, same
prepare-shards arguments -> the same sha256 for every shard and manifest file. The bytes depend on
the JPEG encoder and the resampler, so the pins hold for the imaging stack that ``make test``
installs (pillow-simd on libjpeg-turbo 2.1.5); on another stack the test says so and skips.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, features

PINNED_STACK = ("12.1.1.post0", "2.1.5")
PINNED = {
    "_info.json": "89b8a37c01bb56b00274669cfcd562b5cbca8a1369f0d0a76b562d3733900a9f",
    "manifest.json": "dea90b69fd7923eaddce82ef46d7ce00a0344052b446357f46623a9bd2c946e0",
    "train.wids.json": "96e42225e393ca228184f6300d0f6597c3a7ca109947efc3d6cd5c3097df9e1a",
    "train/imagenet1k-train-000000.tar": "2ce0a3d8df5a355a14804060806272290dd12342f25fde863f5473caba78eda9",
    "train/imagenet1k-train-000001.tar": "144608e7739818932bc7151144f2f9179df138b6ad8b6815ac39276f6731c989",
    "train/imagenet1k-train-000002.tar": "987493cb9da46f5ac8f76282695c680c0d69b724c2d0b4522750e1c7cf0289fd",
    "train/imagenet1k-train-000003.tar": "ac30a489d63f59d1862e793be2bf3f2916fdad271caa63eac2d7c8e0a4fbb63e",
    "val.wids.json": "a493ccc07afcd228833ad828778323ef262e16c5fccb5c4fe207a5413fb52d01",
    "val/imagenet1k-validation-000000.tar": "367a1e823cbd03a3e5768b2a6771b17bfcc159f6830395e6141b8b9d728e5c52",
    "val/imagenet1k-validation-000001.tar": "7cf812677a2db3d7d248c2cf46d4722c7594276633b9d0bc0783d97a5749a7e3",
}


def _script(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_fixed_input_gives_the_pinned_shard_and_manifest_bytes(tmp_path):
    stack = (Image.__version__, features.version("libjpeg_turbo"))
    if stack != PINNED_STACK:
        pytest.skip(f"bytes pinned for PIL/libjpeg-turbo {PINNED_STACK}, this stack is {stack}")
    src, out = tmp_path / "src", tmp_path / "out"
    subprocess.run([_script("make-synthetic-imagenet"), str(src), "--classes", "4", "--train-per-class", "8",
                    "--val-per-class", "3", "--seed", "7", "--quiet"], check=True)
    subprocess.run([_script("prepare-shards"), "--train", str(src / "ILSVRC2012_img_train.tar"),
                    "--val", str(src / "ILSVRC2012_img_val.tar"), "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"),
                    "--out", str(out), "--shard-samples", "10", "--workers", "2", "--quiet"], check=True)
    written = {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in out.rglob("*") if p.is_file() and "_prepare" not in p.parts}
    assert written == PINNED
