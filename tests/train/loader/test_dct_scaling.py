"""``dct_scaling="off"``: the loader's JPEG crops decoded at full size instead of libjpeg's 1/2, 1/4,
1/8 scale, the same boxes either way; the option from train-imagenet's flag to the loader and into
the recorded recipe."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest
import torch
from PIL import Image

from tests.fixtures.loader import texture_image, write_shard_set
from tests.train.loader.test_crop_into import float_reference, jpeg
from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader import make_loader
from imagenet_shards.train.trainer import build, cli, flags
from imagenet_shards.train.trainer.config import TrainConfig
from imagenet_shards.train.trainer.distributed import DistInfo

turbo = pytest.mark.skipif(dec._jpegcrop is None, reason="imagenet_shards.train.loader._jpegcrop not built")
SIZE = (500, 375)


@pytest.fixture(scope="module")
def texture() -> bytes:
    return jpeg(texture_image(*SIZE, seed=21), restart_marker_blocks=2)


def _train_crop(data: bytes, seed: int, res: int, filter: str, dct_scaling: str, decoder: str = "turbo"):
    """decode_train's crop for ``seed`` (no flip), and the box it drew (the rng's first draws)."""
    box = dec.random_resized_crop_params(*SIZE, (0.08, 1.0), (3 / 4, 4 / 3), random.Random(seed))
    got = dec.decode_train(data, res=res, rng=random.Random(seed), hflip=False, decoder=decoder,
                           interpolation=filter, dct_scaling=dct_scaling)
    return got, box


@turbo
@pytest.mark.parametrize("filter", ["bilinear", "bicubic"])
def test_off_is_the_full_size_decode_within_the_stated_bound(texture, filter):
    """Off: within docs/loader.md's bound (1 level of the exact filter rounded, 1.1 / 1.2 unrounded,
    mean < 0.35) of the exact two-pass filter over libjpeg's *full-size* decode, on boxes that auto
    decodes at 1/2 .. 1/8, where auto's pixels differ and lie further from that full-size filter."""
    bound = {"bilinear": 1.1, "bicubic": 1.2}[filter]
    scaled = 0
    for seed in range(8):
        for res in (64, 40):
            off, box = _train_crop(texture, seed, res, filter, "off")
            auto, _ = _train_crop(texture, seed, res, filter, "auto")
            ref = float_reference(texture, box, res, False, filter, s=1)
            err = np.abs(off.astype(np.float64) - ref)
            assert np.abs(off - np.rint(ref)).max() <= 1 and err.max() <= bound and err.mean() < 0.35, (seed, res, box)
            if dec._dct_reduction(box[3], box[2], res, res) > 1:
                scaled += 1
                assert (auto != off).any(), (seed, res, box)
                assert np.abs(auto.astype(np.float64) - ref).mean() > err.mean()
            else:  # nothing to pre-scale: the same call
                assert np.array_equal(auto, off)
    assert scaled >= 8  # the boxes include pre-scaled ones (at 40 px almost every box is)


@turbo
def test_val_crops_off_and_auto(texture):
    """The val centre box (resize 160 -> crop 64 of 500 x 375: a box of 234 px, auto at 1/2): off is
    within the bound of the full-size filter, auto is not the same crop."""
    box = dec.center_crop_params(*SIZE, 160, 64)
    off = dec.decode_val(texture, resize=160, crop=64, decoder="turbo", dct_scaling="off")
    auto = dec.decode_val(texture, resize=160, crop=64, decoder="turbo")
    ref = float_reference(texture, box, 64, False, s=1)
    assert dec._dct_reduction(box[3], box[2], 64, 64) == 2
    assert np.abs(off - np.rint(ref)).max() <= 1 and np.abs(off - ref).mean() < 0.35
    assert (auto != off).any()


def test_pil_path_off_is_pillows_full_decode_resize():
    """The Pillow path with off: no draft, so exactly Pillow's resize of the box on the full decode
    (row-limited decoding is exact); auto drafts to 1/4 here and gives other pixels."""
    data = jpeg(texture_image(*SIZE, seed=22))
    box = (40.0, 30.0, 300.0, 320.0)  # top, left, h, w: >= 4 x the 64 px output
    full = Image.open(io.BytesIO(data)).convert("RGB")
    want = np.asarray(full.resize((64, 64), Image.BILINEAR, box=(30.0, 40.0, 350.0, 340.0))).transpose(2, 0, 1)
    off = dec._write_chw(dec._pil_resized_crop(dec._open(data), *box, 64, 64, "bilinear", "off"), None)
    auto = dec._write_chw(dec._pil_resized_crop(dec._open(data), *box, 64, 64, "bilinear"), None)
    assert np.array_equal(off, want)
    assert (auto != off).any()


def test_bad_names_raise_one_clear_error(texture):
    with pytest.raises(ValueError, match="dct_scaling 'half'; choose one of auto, off"):
        dec.decode_val(texture, dct_scaling="half")
    with pytest.raises(ValueError, match="dct_scaling"):
        dec.decode_train(texture, res=32, rng=random.Random(0), dct_scaling="")


@pytest.fixture(scope="module")
def big_shards(tmp_path_factory):
    """Train and val images large enough that auto pre-scales 16 px crops."""
    return write_shard_set(tmp_path_factory.mktemp("dct"), train=8, val=4, shard_samples=4, size=(200, 150),
                           content="texture")


def _first_batch(loader):
    images, _ = next(iter(loader))
    return images.numpy()


def test_the_loader_takes_it_and_keeps_the_crops(big_shards):
    """make_loader(dct_scaling=off): the same crop stream (seed, epoch) as auto, other pixels."""
    common = dict(workers=0, res=16, val_resize=20, val_crop=16, seed=3)
    for split in ("train", "val"):
        off = make_loader(str(big_shards), split, 4, dct_scaling="off", **common)
        auto = make_loader(str(big_shards), split, 4, **common)
        assert off.dataset.cfg.dct_scaling == "off" and auto.dataset.cfg.dct_scaling == "auto"
        a, b = _first_batch(off), _first_batch(auto)
        assert a.shape == b.shape and (a != b).any()
        assert np.abs(a.astype(int) - b).mean() < 20  # the same boxes: close, not other crops
    with pytest.raises(ValueError, match="dct_scaling"):
        make_loader(str(big_shards), "train", 4, dct_scaling="none")


def test_the_trainer_flag_reaches_both_loaders_and_is_recorded(big_shards, tmp_path, capsys):
    parsed = flags.build_parser().parse_args(["--data", str(big_shards), "--out", str(tmp_path), "--dct-scaling", "off"])
    assert parsed.dct_scaling == "off"
    config = TrainConfig(data=str(big_shards), out=str(tmp_path), workers=0, batch_size=4, dct_scaling="off")
    info = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    train_loader, val_loader = build.make_loaders(config, info, num_classes=10, num_train=8, res=16)
    assert train_loader.dataset.cfg.dct_scaling == val_loader.dataset.cfg.dct_scaling == "off"
    assert cli.main(["--show", "--dct-scaling", "off"]) == 0
    assert json.loads(capsys.readouterr().out)["dct_scaling"] == "off"
    assert cli.main(["--show"]) == 0
    assert json.loads(capsys.readouterr().out)["dct_scaling"] == "auto"


def test_the_flags_choices_are_the_loaders():
    action = next(a for a in cli.build_parser()._actions if a.dest == "dct_scaling")
    assert tuple(action.choices) == dec.DCT_SCALINGS


@pytest.mark.parametrize("name", ["tv-rn50-v1", "tv-rn50-v2", "rsb-a3-rn50"])
def test_full_decode_recipes_select_it_cited_and_an_override_is_recorded(name, capsys):
    """The recipes whose source decodes in full record dct_scaling off with our measurement as the cite
    (docs/recipes.md 'Shard settings'); --dct-scaling auto on them is an override."""
    assert cli.main(["--recipe", name, "--show"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["dct_scaling"] == "off" and "bench_resize_paths" in d["cites"]["dct_scaling"]
    assert cli.main(["--recipe", name, "--show", "--dct-scaling", "auto"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["dct_scaling"] == "auto" and d["overrides"]["dct_scaling"] == "off"


def test_ffcv_recipes_keep_auto(capsys):
    assert cli.main(["--recipe", "ffcv-rn50-16", "--show"]) == 0
    assert json.loads(capsys.readouterr().out)["dct_scaling"] == "auto"
