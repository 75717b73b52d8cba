"""The shard set of a fixed synthetic input is byte-identical to the one pinned here.

Pinned on 2026-12-01 (before the package moved under ``imagenet_shards``), re-pinned the same day
when prepare-shards began writing restart markers on a grid of cells (issue 12), and again when the
cells went from ~64 to ~32 px (issue 24), and the manifest alone when each shard gained its
``xxh3_128`` (issue 29 row 4: the new manifest less those six fields is the old pin's bytes) and again when it
recorded the stored form (`"form": "jpeg"`, issue 32: less that field it is the old pin's bytes), through the console
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
    "manifest.json": "22d4aaf0aa951d3fa3ac7b80b6a037ffe6cf255e846f3eb87aa04577932cb945",
    "train.wids.json": "7fda8d3c6c111923e484756cec4ba220706478c977ff583c1bd57ad6017781ce",
    "train/imagenet1k-train-000000.tar": "adeffb7148c8ddfc63f9b497bcc635f965e399c2606460ac65e2ce567803eae8",
    "train/imagenet1k-train-000001.tar": "a37815ebd46532d9cf4aeb7d796ce6acba47ebe0d88b7faa9745a33e9d46f96e",
    "train/imagenet1k-train-000002.tar": "69809b6c7292a6ec660d615e07decf62257ffb26c9976ad514889f51856d8cd9",
    "train/imagenet1k-train-000003.tar": "7e45ead93df22cf2569a9419d3e27f3e681ac0904fe4e3f3f184d965464ee62f",
    "val.wids.json": "78942694b8b45e30fdeeaeabda247c9511d7c1457b878f3641f35ad732c4058c",
    "val/imagenet1k-validation-000000.tar": "81e682e084aeeba15ac33c2213a576c8f4e181471845fc7d1a7f15e8d374d5b7",
    "val/imagenet1k-validation-000001.tar": "ec849de4b9ccd27bc956f2961e32486bbe3ae67437d332cb9961f08206a824d0",
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
