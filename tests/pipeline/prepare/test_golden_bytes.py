"""The shard set of a fixed synthetic input is byte-identical to the one pinned here.

Pinned on 2026-12-01 (before the package moved under ``imagenet_shards``), re-pinned the same day
when prepare-shards began writing a restart marker per MCU row (issue 12), through the console
scripts, so the check holds across any restructuring of the code: same generator arguments, same
prepare-shards arguments -> the same sha256 for every shard and manifest file. The bytes depend on
the JPEG encoder and the resampler, so the pins hold for the imaging stack that ``make test``
installs (pillow-simd on libjpeg-turbo 2.1.5, and the ``_jpegtran`` extension that rewrites
pass-through JPEGs); on another stack the test says so and skips.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, features

from imagenet_shards.pipeline.prepare import images

PINNED_STACK = ("12.1.1.post0", "2.1.5")
PINNED = {
    "_info.json": "89b8a37c01bb56b00274669cfcd562b5cbca8a1369f0d0a76b562d3733900a9f",
    "manifest.json": "de6c3314c4e6a9ab30a01eec570e5626aaccb3f2bfaaf2908d24c4dcc5c15820",
    "train.wids.json": "d3148a1d3fab620528704019b0f6d12cd9cd7f135d2e2ec049cd42661aa3903d",
    "train/imagenet1k-train-000000.tar": "76d226b77f1c0f5d163d7a519ee2e5c7b2632c0ce15162e5f58a927bc808ff1a",
    "train/imagenet1k-train-000001.tar": "ba3e9d815502b64f9b093a99c4dfcece24e811ebfca700156a7b5f779542a1ab",
    "train/imagenet1k-train-000002.tar": "3f73d5fac3d1c53a497778acd13a080d829fc5af3878a94988e140bf71f2c3c9",
    "train/imagenet1k-train-000003.tar": "0a1ccacb69fe105dee48dbf4d5fb0b4bd0f90b6cc3d9494d55a41b1a9e35e83c",
    "val.wids.json": "08217cda7909015e056021c2e7efc395ed884aac5875e006754d85ffc4e28fba",
    "val/imagenet1k-validation-000000.tar": "f265b2a66841c3ddc475419190b7220c50f588f956ac5fed5f39eead10eec8bf",
    "val/imagenet1k-validation-000001.tar": "2031cb0beed6310ef3e186e42f35eb8b91f517ba754bc1f35b5f7a3ef51b8e2c",
}


def _script(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_fixed_input_gives_the_pinned_shard_and_manifest_bytes(tmp_path):
    stack = (Image.__version__, features.version("libjpeg_turbo"))
    if stack != PINNED_STACK:
        pytest.skip(f"bytes pinned for PIL/libjpeg-turbo {PINNED_STACK}, this stack is {stack}")
    if images._jpegtran is None:
        pytest.skip("bytes pinned with the _jpegtran extension, which this install lacks")
    src, out = tmp_path / "src", tmp_path / "out"
    subprocess.run([_script("make-synthetic-imagenet"), str(src), "--classes", "4", "--train-per-class", "8",
                    "--val-per-class", "3", "--seed", "7", "--quiet"], check=True)
    subprocess.run([_script("prepare-shards"), "--train", str(src / "ILSVRC2012_img_train.tar"),
                    "--val", str(src / "ILSVRC2012_img_val.tar"), "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"),
                    "--out", str(out), "--shard-samples", "10", "--workers", "2", "--quiet"], check=True)
    written = {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in out.rglob("*") if p.is_file() and "_prepare" not in p.parts}
    assert written == PINNED
