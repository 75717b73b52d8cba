"""Each recipe family end to end on the CPU at toy scale: the recipe's values with only the
arch/batch/epochs/resolution overridden (the lr is the recipe's, scaled to the toy global batch by
its own rule), on the tiny real shard set (4 learnable synthetic classes), clearing the
learnability check: val top-1 at least 0.6 where chance is 0.25. The FFCV run is in the default
suite (the GPU check runs ffcv-rn50-16 and ffcv-rn18-16 next); the others are marked slow.
"""

from __future__ import annotations

import json

import pytest
import torch

from imagenet_shards.train.trainer import checkpoint as ckpt
from imagenet_shards.train.trainer.cli import config_from_argv
from imagenet_shards.train.trainer.recipe import describe
from imagenet_shards.train.trainer.telemetry import read_metrics
from tests.fixtures.trainer import run_cli

pytestmark = pytest.mark.usefixtures("one_thread")
TOY = ["--arch", "resnet18", "--batch-size", "8", "--res", "32", "--val-res", "36", "--val-crop", "32",
       "--workers", "0", "--device", "cpu", "--amp", "none", "--log-interval", "4"]
CHANCE = 0.25
LEARNS = 0.6


def _run(tiny_shards, out, *flags) -> list[dict]:
    argv = ["--data", tiny_shards, "--out", out, *TOY, *flags]
    assert run_cli(*argv) == 0
    records = read_metrics(out)
    start = next(r for r in records if r["kind"] == "start")
    config, _, _ = config_from_argv([str(a) for a in argv])
    assert start["recipe"] == config.recipe and start["recipe_overrides"] == config.recipe_overrides
    assert start["global_batch"] == 8 and start["lr_peak"] == pytest.approx(config.lr, rel=1e-3)
    saved = json.loads((out / "recipe.json").read_text())
    assert saved == json.loads(json.dumps(describe(config, world_size=1, num_train=64, steps_per_epoch=8)))
    return records


def _learned(records) -> float:
    last = [r for r in records if r["kind"] == "epoch"][-1]
    assert last["val_samples"] == 20
    assert last["val_top1"] >= LEARNS > CHANCE, last
    return last["val_top1"]


@pytest.mark.timeout(300)
def test_ffcv_family_toy_run_learns(tiny_shards, tmp_path):
    out = tmp_path / "ffcv"
    records = _run(tiny_shards, out, "--recipe", "ffcv-rn18-16", "--epochs", "3", "--end-res", "40",
                   "--ramp-epochs", "1,2")
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert [r["res"] for r in epochs] == [32, 32, 40]  # FFCV: min_res through start_ramp, max_res from end_ramp
    assert ["val_top1" in r for r in epochs] == [False, False, True]  # rn18 yaml: log_level 0, eval at the end
    start = next(r for r in records if r["kind"] == "start")
    assert start["recipe_scaling"]["lr"] == pytest.approx(0.5 * 8 / 1024, rel=1e-3)  # linear rule, per-GPU batch kept
    assert set(start["recipe_overrides"]) == {"batch_size", "epochs", "res", "end_res", "ramp_epochs", "val_res",
                                              "val_crop", "amp"}
    state = torch.load(out / ckpt.LATEST, weights_only=True)
    assert "layer2.0.conv1.blur_filter" in state["model"]  # BlurPool before the strided conv (BasicBlock: conv1)
    _learned(records)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_torchvision_family_toy_runs_learn(tiny_shards, tmp_path):
    _learned(_run(tiny_shards, tmp_path / "v1", "--recipe", "tv-rn50-v1", "--epochs", "4"))
    # v2: RA x4, TrivialAugment, MixUp/CutMix, zero-fill erasing, EMA every 32 steps (warmup shortened to 1 epoch)
    records = _run(tiny_shards, tmp_path / "v2", "--recipe", "tv-rn50-v2", "--epochs", "6", "--warmup-epochs", "1",
                   "--ema-copy-epochs", "1")
    assert all("ema_val_top1" in r for r in records if r["kind"] == "epoch")
    _learned(records)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rsb_family_toy_run_learns(tiny_shards, tmp_path):
    # LAMB + BCE (threshold 0.2) + timm RandAugment + MixUp/CutMix; the toy set is not ImageNet-1k, so no ReaL
    records = _run(tiny_shards, tmp_path / "rsb", "--recipe", "rsb-a3-rn50", "--epochs", "6", "--warmup-epochs", "1",
                   "--no-eval-real")
    _learned(records)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_recipe_state_resumes_bit_identically(tiny_shards, tmp_path):
    """LAMB's moments and step, the EMA's counters (every N steps, copy epochs) and the repeated-
    augmentation plan survive a stop and resume: 2 epochs straight == 1 + resume + 1."""
    flags = ["--data", tiny_shards, *TOY, "--recipe", "tv-rn50-v2", "--epochs", "2", "--warmup-epochs", "1",
             "--ema-copy-epochs", "1", "--ema-every", "3", "--optimizer", "lamb", "--lr", "0.002", "--res", "16",
             "--val-res", "20", "--val-crop", "16"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert run_cli(*flags, "--out", straight) == 0
    assert run_cli(*flags, "--out", split, "--stop-after-epochs", "1") == 0
    assert run_cli(*flags, "--out", split, "--resume", "auto") == 0
    a, b = ckpt.load_checkpoint(straight / ckpt.LATEST), ckpt.load_checkpoint(split / ckpt.LATEST)
    assert a["ema"]["updates"] == b["ema"]["updates"] == 2 * 3 and a["ema"]["n_averaged"] == b["ema"]["n_averaged"]
    assert a["optimizer"]["param_groups"][0]["step"] == b["optimizer"]["param_groups"][0]["step"] == 16
    for part in ("model",):
        for key in a[part]:
            assert torch.equal(a[part][key], b[part][key]), key
    for key in a["ema"]["module"]:
        assert torch.equal(a["ema"]["module"][key], b["ema"]["module"][key]), key
