"""Shared fixtures: synthetic ILSVRC2012 archives built on the fly (no binary fixtures in git)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.synthetic import LAYOUTS, generate

# Small but complete: every quirk, all layouts. 6 classes x (12 train + 4 val).
SYNTHETIC_DEFAULTS = dict(classes=6, train_per_class=12, val_per_class=4, seed=0, quirks=True,
                          layouts=LAYOUTS)


@pytest.fixture(scope="session")
def make_synthetic(tmp_path_factory):
    """Factory: make_synthetic(**kwargs) -> Path of a fresh synthetic set (generate() keyword args,
    defaulting to SYNTHETIC_DEFAULTS). Each call writes a new directory."""

    def make(**kwargs) -> Path:
        out = tmp_path_factory.mktemp("synthetic-imagenet")
        generate(out, **{**SYNTHETIC_DEFAULTS, "progress": False, **kwargs})
        return out

    return make


@pytest.fixture(scope="session")
def synthetic_imagenet(make_synthetic) -> Path:
    """The shared tiny synthetic ILSVRC2012 (SYNTHETIC_DEFAULTS); its OUT/expected.json describes
    every member. Generated once per session: treat it as read-only (copy before changing it)."""
    return make_synthetic()


@pytest.fixture(scope="session")
def synthetic_shards(synthetic_imagenet, tmp_path_factory) -> Path:
    """`synthetic_imagenet` run through the real prepare-shards (16 samples a shard: 5 train + 2 val
    shards). Built once per session: read-only, copy it before damaging it."""
    from pipeline.prepare import Config, prepare

    src = synthetic_imagenet
    out = tmp_path_factory.mktemp("synthetic-shards") / "out"
    prepare(out=str(out), train=str(src / "ILSVRC2012_img_train.tar"), val=str(src / "ILSVRC2012_img_val.tar"),
            devkit=str(src / "ILSVRC2012_devkit_t12.tar.gz"), config=Config(shard_samples=16), workers=1,
            progress=False)
    return out
