"""Each recipe family end to end on the CPU at toy scale: the recipe's values with only the
arch/batch/epochs/resolution overridden (the lr is the recipe's, scaled to the toy global batch by
its own rule), on a tiny real shard set (4 learnable synthetic classes, 64 train and 100 val
images), clearing the learnability check: val top-1 at least 0.5 where chance is 0.25. The FFCV
run is in the default suite (the GPU check runs ffcv-rn50-16 and ffcv-rn18-16 next); the others
are marked slow, with a negative control: the same check misses when train and val labels disagree.

Seeded CPU runs are not bit-identical across CPU families (oneDNN/MKL pick other kernels per ISA),
so each run's length was set from a calibration over seeds, not from one run (see CALIBRATION).
"""

from __future__ import annotations

import json

import pytest
import torch

from imagenet_shards.train.loader import batching
from imagenet_shards.train.trainer.cli import config_from_argv
from imagenet_shards.train.trainer.recipe import describe
from imagenet_shards.train.trainer.state import checkpoint as ckpt
from imagenet_shards.train.trainer.watch.telemetry import read_metrics
from tests.fixtures.trainer import run_cli, write_tiny_shards

pytestmark = pytest.mark.usefixtures("one_thread")
TOY = ["--arch", "resnet18", "--batch-size", "8", "--res", "32", "--val-res", "36", "--val-crop", "32",
       "--workers", "0", "--device", "cpu", "--amp", "none", "--log-interval", "4"]
CLASSES, VAL_PER_CLASS = 4, 25  # 100 val images: one image is 1 % (with 20, one lucky image was 5 %)
CHANCE = 1 / CLASSES
LEARNS = 0.5  # twice chance, and under the worst calibrated seed below (0.63) by a wide margin
# CALIBRATION (a throwaway script, not kept): each run below for --seed 0..9 on an AMD EPYC (AVX-512),
# one thread, 100 val images, final val_top1; then a few seeds again with ONEDNN_MAX_CPU_ISA=AVX2,
# with torch.backends.mkldnn off, and with 2 threads + deterministic algorithms, to imitate another
# CPU family: other values per seed, the same spread. Each run's length is set so that the worst
# seed clears LEARNS by a wide margin; where it did not, the run got longer.
# FFCV, 4 epochs: 1.0 1.0 1.0 1.0 0.97 1.0 1.0 1.0 0.83 1.0: min 0.83, median 1.0 (3 epochs, as before:
# min 0.59, median 0.995).
FFCV = ["--recipe", "ffcv-rn18-16", "--epochs", "4", "--end-res", "40", "--ramp-epochs", "1,2"]
# tv v1, 4 epochs: 1.0 1.0 1.0 0.76 0.86 1.0 1.0 0.75 1.0 0.85: min 0.75, median 1.0.
TV_V1 = ["--recipe", "tv-rn50-v1", "--epochs", "4"]
# tv v2, 18 epochs: 0.94 1.0 0.97 0.77 0.95 0.97 0.74 0.82 0.93 0.72: min 0.72, median 0.935
# (6 epochs, as before: min 0.36, median 0.57, seed 0 0.82, so 0.6 held on one box by luck; 12: min 0.58,
# median 0.90). Seeds 0 1 2 with AVX2: 0.97 0.99 0.95; 0 1 without mkldnn: 0.86 1.0.
TV_V2 = ["--recipe", "tv-rn50-v2", "--epochs", "18", "--warmup-epochs", "1", "--ema-copy-epochs", "1"]
# RSB, 6 epochs: 0.79 0.63 0.85 0.85 0.83 0.76 0.74 0.94 0.82 0.93: min 0.63, median 0.825.
RSB = ["--recipe", "rsb-a3-rn50", "--epochs", "6", "--warmup-epochs", "1", "--no-eval-real"]


@pytest.fixture(scope="module")
def toy_shards(tmp_path_factory):
    return write_tiny_shards(tmp_path_factory.mktemp("toy-shards"), classes=CLASSES, val_per_class=VAL_PER_CLASS)


def _run(shards, out, *flags) -> list[dict]:
    argv = ["--data", shards, "--out", out, *TOY, *flags]
    assert run_cli(*argv) == 0
    records = read_metrics(out)
    start = next(r for r in records if r["kind"] == "start")
    config, _, _ = config_from_argv([str(a) for a in argv])
    assert start["recipe"] == config.recipe and start["recipe_overrides"] == config.recipe_overrides
    assert start["global_batch"] == 8 and start["lr_peak"] == pytest.approx(config.lr, rel=1e-3)
    saved = json.loads((out / "recipe.json").read_text())
    assert saved == json.loads(json.dumps(describe(config, world_size=1, num_train=64, steps_per_epoch=8)))
    return records


def _val_top1(records) -> float:
    last = [r for r in records if r["kind"] == "epoch"][-1]
    assert last["val_samples"] == CLASSES * VAL_PER_CLASS
    return last["val_top1"]


def _learned(records) -> None:
    assert _val_top1(records) >= LEARNS > CHANCE, [r for r in records if r["kind"] == "epoch"][-1]


@pytest.mark.timeout(300)
def test_ffcv_family_toy_run_learns(toy_shards, tmp_path, capsys):
    out = tmp_path / "ffcv"
    records = _run(toy_shards, out, *FFCV)
    # the start notes that the toy set (--resize longer:64) is not FFCV's rn18 data (400 px), in one line
    assert "note: ffcv-rn18-16's source trained on the images prepare-shards --resize longer:400 stores; --data was " \
           "prepared with --resize longer:64" in capsys.readouterr().out
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert [r["res"] for r in epochs] == [32, 32, 40, 40]  # FFCV: min_res through start_ramp, max_res from end_ramp
    assert ["val_top1" in r for r in epochs] == [False, False, False, True]  # rn18 yaml: log_level 0, eval at the end
    start = next(r for r in records if r["kind"] == "start")
    assert start["recipe_scaling"]["lr"] == pytest.approx(0.5 * 8 / 1024, rel=1e-3)  # linear rule, per-GPU batch kept
    assert set(start["recipe_overrides"]) == {"batch_size", "epochs", "res", "end_res", "ramp_epochs", "val_res",
                                              "val_crop", "amp"}
    state = torch.load(out / ckpt.LATEST, weights_only=True)
    assert "layer2.0.conv1.blur_filter" in state["model"]  # BlurPool before the strided conv (BasicBlock: conv1)
    _learned(records)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_torchvision_family_toy_runs_learn(toy_shards, tmp_path):
    _learned(_run(toy_shards, tmp_path / "v1", *TV_V1))
    # v2: RA x4, TrivialAugment, MixUp/CutMix, zero-fill erasing, EMA every 32 steps (warmup shortened to 1 epoch)
    records = _run(toy_shards, tmp_path / "v2", *TV_V2)
    assert all("ema_val_top1" in r for r in records if r["kind"] == "epoch")
    _learned(records)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rsb_family_toy_run_learns(toy_shards, tmp_path):
    # LAMB + BCE (threshold 0.2) + timm RandAugment + MixUp/CutMix; the toy set is not ImageNet-1k, so no ReaL
    _learned(_run(toy_shards, tmp_path / "rsb", *RSB))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_learnability_check_misses_when_train_labels_do_not_match_val(toy_shards, tmp_path, monkeypatch):
    """The negative control: train labels moved one class on (what a label-mapping bug between the
    splits does), val labels left true: the same FFCV run learns the wrong mapping and must stay
    under LEARNS. Calibration, --seed 0..3: 0.09 0.0 0.0 0.0. (A per-sample shuffle is no sure
    control with 4 tight classes: the model still maps each class to one label, right for each
    class 1 time in 4, so top-1 clusters at multiples of 0.25 and reaches 0.5 about 1 run in 4;
    train labels balanced noise per class, seeds 0 1 2 3: 0.0 0.01 0.25 0.12.)"""
    decode = batching.decode_record

    def moved_labels(rec, cfg, *args, **kwargs):
        image, label = decode(rec, cfg, *args, **kwargs)
        return image, ((label + 1) % CLASSES if cfg.train else label)

    monkeypatch.setattr(batching, "decode_record", moved_labels)
    assert _val_top1(_run(toy_shards, tmp_path / "moved", *FFCV)) < LEARNS


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_recipe_state_resumes_bit_identically(toy_shards, tmp_path):
    """LAMB's moments and step, the EMA's counters (every N steps, copy epochs) and the repeated-
    augmentation plan survive a stop and resume: 2 epochs straight == 1 + resume + 1."""
    flags = ["--data", toy_shards, *TOY, "--recipe", "tv-rn50-v2", "--epochs", "2", "--warmup-epochs", "1",
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


@pytest.mark.timeout(300)
def test_checkpoint_best_summary_and_report_follow_the_best_metric(tiny_shards, tmp_path, capsys):
    """issue 30 item 2: a run judged by ema_val_top1 (tv-rn50-v2's published figure) keeps as
    checkpoint-best the epoch where the EMA model was best, and says that figure at the end."""
    from imagenet_shards.train.report.cli import main as report_main

    out = tmp_path / "ema"
    argv = ["--data", tiny_shards, "--out", out, *TOY, "--epochs", "3", "--ema", "0.5", "--best-metric", "ema_val_top1"]
    assert run_cli(*argv) == 0
    records = read_metrics(out)
    epochs = [r for r in records if r["kind"] == "epoch"]
    best = max(r["ema_val_top1"] for r in epochs)
    first_best = next(r for r in epochs if r["ema_val_top1"] == best)  # the first epoch reaching it is the one kept
    saved = torch.load(out / ckpt.BEST, weights_only=False)
    assert saved["metrics"]["epoch"] == first_best["epoch"] and saved["best_top1"] == best
    start = next(r for r in records if r["kind"] == "start")
    final = next(r for r in records if r["kind"] == "final")
    assert start["best_metric"] == final["best_metric"] == "ema_val_top1" and final["best_metric_value"] == best
    assert f"ema_val_top1: {100 * epochs[-1]['ema_val_top1']:.2f} % at the end, best {100 * best:.2f} %" in \
        capsys.readouterr().out
    assert report_main([str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metric"] == {"metric": "ema_val_top1", "last": epochs[-1]["ema_val_top1"],
                                                             "best": best}
