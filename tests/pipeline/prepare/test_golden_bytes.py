"""The shard set of a fixed synthetic input is byte-identical to the one pinned here.

Pinned on 2026-12-01 (before the package moved under ``imagenet_shards``), re-pinned the same day
when prepare-shards began writing restart markers on a grid of cells (issue 12), through the console
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
    "manifest.json": "1a6123aa4901bc4c24e83d9851eb59ffe76ddd95b0e7dd1d3baea3f7c4a864b4",
    "train.wids.json": "20631bc0cbce0f080391822db54b1677f66d1bb85eb18c79acabfa7089a3241e",
    "train/imagenet1k-train-000000.tar": "17d235512a4790424b5ea05a37646b7bfc31f2cc378ee8afcc6898bdbbffcdaa",
    "train/imagenet1k-train-000001.tar": "cdf097892f5633cd62f5e84d4289879c12a2c0ae88c630709d3e9e139efbb5e5",
    "train/imagenet1k-train-000002.tar": "79d33959657a5b871ddbb8ad94a282ed3e16ab12e5beec7fc7791eb61227b1b7",
    "train/imagenet1k-train-000003.tar": "3340bb58141163fdda61fd4237073f569dd8909f9994d904cde0b2dc4a192466",
    "val.wids.json": "a8e8973a09f260b8f9863236eefb0dac20634911f1eb9d7e0ea39d603865fda2",
    "val/imagenet1k-validation-000000.tar": "d51cc8f960418cf8a972825c2b6219d763f3973d86dce37e2e1889945c1ff208",
    "val/imagenet1k-validation-000001.tar": "093d9b0c0c3616a51aa5ff9ed401b5949b5ae065da8ba781540b94e50e1df43e",
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
