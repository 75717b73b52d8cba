"""The recipe records against their sources: every number restated here from the source file (cited
beside it), the lr at chosen steps against the source's own formula (FFCV's code re-typed with
numpy; torchvision's and timm's schedules through torch's schedulers and timm's formula), FFCV's
resolution ramp, --show for every recipe, overrides, world-size scaling, unknown names.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from imagenet_shards.train.recipes import RECIPES, get_recipe
from imagenet_shards.train.trainer.cli import config_from_argv, main
from imagenet_shards.train.trainer.recipe import adjusted_ema_decay, describe
from imagenet_shards.train.trainer.schedule import schedule_for

N = 1281167  # ImageNet-1k train images: what --show assumes

# ----------------------------------------------------------------------------- FFCV (libffcv/ffcv-imagenet@4dd291a)

# rn50_configs/rn50_{E}_epochs.yaml: lr 1.7 (l.9), batch_size 512 (l.19), weight_decay 1e-4 (l.26), world_size 8
# (l.5), min/max_res 160/192 (l.16/15), start/end_ramp (l.17/14); rn18_configs: lr 0.5 (l.11), lr_peak_epoch 2
# (l.12), batch_size 1024 (l.22), weight_decay 5e-5 (l.29), world_size 1 (l.6), log_level 0 (l.9);
# README.md table: top_1, top_5, minutes.
FFCV = {
    "ffcv-rn50-16": (16, 11, 13, 0.738, 0.908, 14.9), "ffcv-rn50-24": (24, 17, 20, 0.756, 0.921, 21.7),
    "ffcv-rn50-32": (32, 23, 27, 0.766, 0.927, 28.7), "ffcv-rn50-40": (40, 29, 34, 0.772, 0.932, 35.6),
    "ffcv-rn50-56": (56, 41, 48, 0.780, 0.937, 49.4), "ffcv-rn50-88": (88, 65, 76, 0.784, 0.941, 77.2),
    "ffcv-rn18-16": (16, 11, 13, 0.669, 0.868, 35.0), "ffcv-rn18-24": (24, 17, 20, 0.688, 0.881, 51.6),
    "ffcv-rn18-32": (32, 23, 27, 0.700, 0.889, 68.9), "ffcv-rn18-40": (40, 29, 34, 0.706, 0.894, 85.5),
    "ffcv-rn18-56": (56, 41, 48, 0.713, 0.899, 119.4), "ffcv-rn18-88": (88, 65, 76, 0.724, 0.903, 187.3),
}


def ffcv_cyclic_lr(epoch, lr, epochs, peak=2):
    """train_imagenet.py:107-113 get_cyclic_lr, as written there."""
    return np.interp([epoch], [0, peak, epochs], [1e-4 * lr, lr, 0])[0]


def ffcv_iteration_lrs(epoch, iters, lr, epochs):
    """train_imagenet.py:356-358: the lrs of one epoch's iterations."""
    return np.interp(np.arange(iters), [0, iters], [ffcv_cyclic_lr(epoch, lr, epochs), ffcv_cyclic_lr(epoch + 1, lr, epochs)])


def ffcv_resolution(epoch, min_res, max_res, end_ramp, start_ramp):
    """train_imagenet.py:169-185 get_resolution, as written there."""
    if epoch <= start_ramp:
        return min_res
    if epoch >= end_ramp:
        return max_res
    interp = np.interp([epoch], [start_ramp, end_ramp], [min_res, max_res])
    return int(np.round(interp[0] / 32)) * 32


def show(*argv) -> dict:
    config, world, _ = config_from_argv([*argv, "--show"])
    return describe(config, world_size=world)


@pytest.mark.parametrize("name", list(FFCV))
def test_ffcv_records_match_the_yaml_and_the_readme(name):
    epochs, start_ramp, end_ramp, top1, top5, minutes = FFCV[name]
    rn50 = "rn50" in name
    r = get_recipe(name)
    v = r.value
    assert (v("arch"), v("epochs"), v("batch_size"), v("lr"), v("wd")) == (
        "resnet50" if rn50 else "resnet18", epochs, 512 if rn50 else 1024, 1.7 if rn50 else 0.5, 1e-4 if rn50 else 5e-5)
    assert r.world_size.value == (8 if rn50 else 1)
    assert (v("res"), v("end_res"), v("ramp_epochs")) == (160, 192, (start_ramp, end_ramp))
    assert (v("momentum"), v("nesterov"), v("label_smoothing"), v("optimizer"), v("loss")) == (0.9, False, 0.1, "sgd", "ce")
    assert (v("schedule"), v("lr_peak_epoch"), v("lr_start_factor"), v("lr_end_factor")) == ("triangle", 2.0, 1e-4, 0.0)
    assert (v("val_crop"), v("val_crop_ratio"), v("tta"), v("blurpool")) == (256, 224 / 256, True, True)
    assert (v("wd_exempt"), v("zero_init_residual"), v("amp"), v("eval_every")) == ("bn-name", False, "fp16", 1 if rn50 else 0)
    assert (r.published["top1"].value, r.published["top5"].value, r.published["minutes"].value) == (top1, top5, minutes)
    short = "rn50" if rn50 else "rn18"
    assert f"{short}_configs/{short}_{epochs}_epochs.yaml:" in r.hyper["lr"].source
    assert all(c.source for c in r.hyper.values())  # a source beside every value


@pytest.mark.parametrize("name", ["ffcv-rn50-16", "ffcv-rn50-88", "ffcv-rn18-16", "ffcv-rn18-40"])
def test_ffcv_lr_per_iteration_and_resolution_follow_the_script(name):
    epochs, start_ramp, end_ramp = FFCV[name][:3]
    r = get_recipe(name)
    world = r.world_size.value
    d = show("--recipe", name, "--world-size", str(world))
    spe = d["steps_per_epoch"]
    assert spe == (N // world) // r.value("batch_size")  # drop_last: full batches per GPU
    assert d["lr_peak"] == r.value("lr") and d["global_batch"] == world * r.value("batch_size")
    config, _, _ = config_from_argv(["--recipe", name, "--world-size", str(world), "--show"])
    sched = schedule_for(config, spe)
    lr = r.value("lr")
    for step in (0, 1, spe - 1, spe, spe + spe // 3, 2 * spe, 2 * spe + 5, 7 * spe + 100, epochs * spe - 1):
        e, i = divmod(step, spe)
        assert lr * sched.factor(step) == pytest.approx(ffcv_iteration_lrs(e, spe, lr, epochs)[i], rel=1e-12, abs=1e-15)
    assert d["lr_at_epoch"] == pytest.approx([ffcv_cyclic_lr(e, lr, epochs) for e in range(epochs)])
    assert d["res_at_epoch"] == [ffcv_resolution(e, 160, 192, end_ramp, start_ramp) for e in range(epochs)]


def test_ffcv_resolution_rounding_matches_numpy_at_every_epoch():
    # the one place the formulas could part: round-half-to-even at 176 = 5.5 x 32 (epoch 12 of 16 -> 192)
    for name, (epochs, start_ramp, end_ramp, *_) in FFCV.items():
        config, _, _ = config_from_argv(["--recipe", name, "--show"])
        got = describe(config, world_size=1)["res_at_epoch"]
        assert got == [ffcv_resolution(e, 160, 192, end_ramp, start_ramp) for e in range(epochs)], name
    assert show("--recipe", "ffcv-rn50-16")["res_at_epoch"][11:13] == [160, 192]


def test_ffcv_ramp_rule_gives_every_published_ramp_and_scales_an_epochs_override(capsys):
    # issue 29 row 8: the configs' own rule (3E/4 - 1, 7E/8 - 1) reproduces every yaml file's ramp
    from imagenet_shards.train.trainer.recipe import scaled_ramp
    for name, (epochs, start_ramp, end_ramp, *_) in FFCV.items():
        assert scaled_ramp(get_recipe(name), epochs) == (start_ramp, end_ramp), name
        for other, (e2, s2, t2, *_) in FFCV.items():  # any length's recipe, retimed to another length: that file's
            if other[:9] == name[:9] and e2 != epochs:
                d = show("--recipe", name, "--epochs", str(e2))
                assert d["res_at_epoch"] == [ffcv_resolution(e, 160, 192, t2, s2) for e in range(e2)], (name, e2)
                assert d["scaling"]["ramp_epochs"]["this_run"] == [s2, t2]
    assert "ramp_epochs" not in show("--recipe", "ffcv-rn18-16", "--epochs", "16")["scaling"]  # not retimed
    # the repro: 4 epochs with --end-res 96 now ramps inside the run and says so in one line
    assert main(["--recipe", "ffcv-rn18-16", "--epochs", "4", "--end-res", "96", "--show"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["res_at_epoch"] == [160, 160, 160, 96]
    assert out.err.strip() == "note: ffcv-rn18-16: resolution ramp 11,13 of 16 epochs -> 2,2 of 4 (the source's configs' rule)"
    # an explicit --ramp-epochs wins over the rule
    assert show("--recipe", "ffcv-rn18-16", "--epochs", "8", "--ramp-epochs", "2,5")["res_at_epoch"] == [
        ffcv_resolution(e, 160, 192, 5, 2) for e in range(8)]
    # tv and rsb have no ramp: nothing scaled
    assert "ramp_epochs" not in show("--recipe", "rsb-a3-rn50", "--world-size", "4", "--epochs", "10")["scaling"]


def test_end_res_without_a_ramp_inside_the_run_is_a_warning(capsys):
    assert main(["--recipe", "ffcv-rn18-16", "--ramp-epochs", "15,16", "--show"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["res_at_epoch"] == [160] * 16  # what will run
    (line,) = [x for x in out.err.splitlines() if x.startswith("warning:")]
    assert "--end-res 192 has no effect" in line and "--ramp-epochs" in line
    assert main(["--recipe", "ffcv-rn18-16", "--ramp-epochs", "14,15", "--show"]) == 0  # epoch 15 at 192: a ramp
    assert "warning" not in capsys.readouterr().err
    assert main(["--epochs", "4", "--res", "64", "--end-res", "96", "--show"]) == 0  # no recipe: default ramp 2,3
    assert "warning" not in capsys.readouterr().err
    assert main(["--epochs", "2", "--res", "64", "--end-res", "96", "--show"]) == 0  # default ramp 1,1: none inside
    assert "warning: --end-res 96 has no effect: the resolution ramp 1,1" in capsys.readouterr().err


# ----------------------------------------------------------------------------- torchvision

def test_torchvision_v1_record_and_step_schedule_against_torch_steplr():
    r = get_recipe("tv-rn50-v1")
    v = r.value
    # references/classification/train.py@bde124ee parse_args defaults; README: 8x V100; resnet.py:366 76.130
    assert (v("epochs"), v("batch_size"), v("lr"), v("momentum"), v("wd"), v("lr_step_epochs"), v("lr_gamma")) == (
        90, 32, 0.1, 0.9, 1e-4, 30, 0.1)
    assert (v("label_smoothing"), v("wd_exempt"), v("res"), v("val_res"), v("val_crop"), v("amp")) == (
        0.0, "none", 224, 256, 224, "none")
    assert r.world_size.value == 8 and r.published["top1"].value == 0.7613
    d = show("--recipe", "tv-rn50-v1", "--world-size", "8")
    spe = d["steps_per_epoch"]
    assert spe == (N // 8) // 32 and d["global_batch"] == 256 and d["lr_peak"] == 0.1
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    steplr = torch.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    config, _, _ = config_from_argv(["--recipe", "tv-rn50-v1", "--world-size", "8", "--show"])
    sched = schedule_for(config, spe)
    for epoch in range(90):
        for i in (0, spe // 2, spe - 1):  # constant within an epoch: StepLR steps per epoch
            assert 0.1 * sched.factor(epoch * spe + i) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9)
        opt.step()
        steplr.step()


def test_torchvision_v2_record_schedule_against_torch_and_ema_adjustment():
    r = get_recipe("tv-rn50-v2")
    v = r.value
    # the IMAGENET1K_V2 command (pytorch/vision#3995) and train.py's defaults
    assert (v("epochs"), v("batch_size"), v("lr"), v("wd"), v("label_smoothing"), v("mixup"), v("cutmix")) == (
        600, 128, 0.5, 2e-5, 0.1, 0.2, 1.0)
    assert (v("warmup_epochs"), v("lr_start_factor"), v("lr_end_factor"), v("res"), v("val_res"), v("val_crop")) == (
        5.0, 0.01, 0.0, 176, 232, 224)
    assert (v("aug"), v("random_erase"), v("random_erase_fill"), v("ra_reps"), v("wd_exempt")) == (
        "ta_wide", 0.1, "zero", 4, "norm")
    assert (v("ema"), v("ema_every"), v("ema_ramp"), v("ema_copy_epochs")) == (0.99998, 32, False, 5)
    assert r.published["top1"].value == 0.80858 and r.ema_adjust
    d = show("--recipe", "tv-rn50-v2", "--world-size", "8")
    # RASampler: floor(N // 256 * 256 / 8) samples per rank, in batches of 128
    assert d["steps_per_epoch"] == (N // 256 * 256 // 8) // 128
    # where the 4 copies go: 8 ranks; on 1 and 2 GPUs the accumulated micro-batches take the source's 8
    # ranks' places (the same steps an epoch); 3 GPUs x 3: 9 slots, one copy per forward, not one step
    assert d["ra_placement"] == {"repeats": 4, "over": "ranks", "slots": 8, "one_copy_per_forward": True,
                                 "copies_in_one_step": True}
    for world, placement in ((1, ("micro-batches", 8, True)), (2, ("micro-batches", 8, True)),
                             (3, ("micro-batches", 9, False))):
        few = show("--recipe", "tv-rn50-v2", "--world-size", str(world))
        got = few["ra_placement"]
        assert (got["over"], got["slots"], got["copies_in_one_step"]) == placement and got["one_copy_per_forward"]
        assert few["steps_per_epoch"] == (N // 256 * 256 // world) // (few["batch_size_per_gpu"] * few["accumulate"])
    # train.py: adjust = world_size * batch_size * model_ema_steps / epochs; decay = 1 - min(1, (1 - d) * adjust)
    assert d["ema"]["decay"] == pytest.approx(1 - (1 - 0.99998) * 8 * 128 * 32 / 600)
    assert adjusted_ema_decay(0.99998, global_batch=1024, every=32, epochs=600) == d["ema"]["decay"]
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=5)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=600 - 5, eta_min=0.0)
    seq = torch.optim.lr_scheduler.SequentialLR(opt, schedulers=[warm, cos], milestones=[5])
    torch_lrs = []
    for _ in range(600):
        torch_lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        seq.step()
    assert d["lr_at_epoch"] == pytest.approx(torch_lrs, rel=1e-6, abs=1e-12)


# ----------------------------------------------------------------------------- ResNet Strikes Back A3

def timm_cosine_lr(epoch, lr=8e-3, warmup_lr=1e-4, min_lr=1e-6, warmup=5, t_initial=100):
    """timm 0.5 CosineLRScheduler._get_lr (t_in_epochs, warmup_prefix False, cycle_limit 1)."""
    if epoch < warmup:
        return warmup_lr + epoch * (lr - warmup_lr) / warmup
    if epoch >= t_initial:
        return min_lr
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * epoch / t_initial))


def test_rsb_a3_record_and_timm_cosine():
    r = get_recipe("rsb-a3-rn50")
    v = r.value
    # arXiv 2110.00476 Table 1 (A3) and timm 0.5.0's defaults
    assert (v("epochs"), v("lr"), v("wd"), v("warmup_epochs"), v("res"), v("val_crop"), v("val_res")) == (
        100, 8e-3, 0.02, 5.0, 160, 224, 235)
    assert r.world_size.value * v("batch_size") == 2048
    assert (v("optimizer"), v("loss"), v("bce_target_thresh"), v("label_smoothing"), v("mixup"), v("cutmix")) == (
        "lamb", "bce", 0.2, 0.0, 0.1, 1.0)
    assert (v("aug"), v("ra_reps"), v("ema"), v("random_erase"), v("wd_exempt"), v("zero_init_residual")) == (
        "rand-m6-mstd0.5-inc1", 1, None, 0.0, "1d", True)
    assert r.published["top1"].value == 0.781 and r.published["real_top1"].value == 0.8448
    d = show("--recipe", "rsb-a3-rn50", "--world-size", "4")
    assert d["global_batch"] == 2048 and d["lr_peak"] == 8e-3 and d["eval_real"] is True
    assert d["lr_at_epoch"] == pytest.approx([timm_cosine_lr(e) for e in range(100)], rel=1e-9)
    assert d["val_crop_ratio"] == pytest.approx(224 / 235)  # floor(224 / 0.95) = 235
    # timm 0.5.0 train.py:219 --train-interpolation random (the crop), eval at the model's bicubic
    assert (d["train_interpolation"], d["val_interpolation"]) == ("random", "bicubic")
    assert "train.py:219" in d["cites"]["train_interpolation"] and "bicubic" in d["cites"]["val_interpolation"]
    plain = show("--recipe", "rsb-a3-rn50", "--train-interpolation", "bilinear", "--val-interpolation", "bilinear")
    assert (plain["train_interpolation"], plain["val_interpolation"]) == ("bilinear", "bilinear")
    assert plain["overrides"] == {"train_interpolation": "random", "val_interpolation": "bicubic"}
    # on one GPU the source's 2048 as 4 x 512 accumulated, lr 8e-3; an explicit --batch-size 512 there
    # changes the global batch: timm's sqrt rule for LAMB, the absolute warmup-start and floor lrs kept
    kept = show("--recipe", "rsb-a3-rn50", "--world-size", "1")
    assert (kept["global_batch"], kept["accumulate"], kept["lr_peak"]) == (2048, 4, 8e-3)
    assert kept["lr_at_epoch"] == pytest.approx([timm_cosine_lr(e) for e in range(100)], rel=1e-9)
    one = show("--recipe", "rsb-a3-rn50", "--world-size", "1", "--batch-size", "512")
    lr1 = 8e-3 * math.sqrt(512 / 2048)
    assert one["lr_peak"] == pytest.approx(lr1) and one["scaling"]["rule"] == "sqrt"
    assert one["lr_at_epoch"] == pytest.approx([timm_cosine_lr(e, lr=lr1) for e in range(100)], rel=1e-9)


# ----------------------------------------------------------------------------- --show, overrides, scaling

@pytest.mark.parametrize("name", list(RECIPES))
def test_show_prints_the_resolved_recipe_for_every_name(name, capsys):
    assert main(["--recipe", name, "--show"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("arch", "epochs", "batch_size_per_gpu", "global_batch", "lr_peak", "lr_schedule", "lr_at_epoch",
                "res_at_epoch", "val_res", "val_crop_ratio", "tta", "blurpool", "label_smoothing", "weight_decay",
                "bn_weight_decay", "optimizer", "loss", "mixup", "cutmix", "ema", "source", "published_top1"):
        assert key in d, key
    assert d["recipe"] == name and len(d["lr_at_epoch"]) == len(d["res_at_epoch"]) == d["epochs"]
    want = ("random", "bicubic") if name.startswith("rsb-") else ("bilinear", "bilinear")  # others: the default
    assert (d["train_interpolation"], d["val_interpolation"]) == want
    assert d["published_top1"] == get_recipe(name).published["top1"].value and d["what_we_changed"]


def test_world_size_scaling_accumulate_and_overrides_are_recorded():
    one = show("--recipe", "ffcv-rn50-16", "--world-size", "1")  # the source's 4096 as 512 x 8 accumulated
    assert (one["lr_peak"], one["global_batch"], one["batch_size_per_gpu"], one["accumulate"]) == (1.7, 4096, 512, 8)
    assert one["steps_per_epoch"] == (N // 512) // 8 and "8 accumulated" in one["scaling"]["note"]
    acc = show("--recipe", "ffcv-rn50-16", "--world-size", "1", "--accumulate", "8")
    assert acc["lr_peak"] == 1.7 and acc["global_batch"] == 4096 and acc["steps_per_epoch"] == (N // 512) // 8
    assert acc["overrides"] == {}  # --accumulate is not one of the recipe's values
    small = show("--recipe", "ffcv-rn50-16", "--world-size", "1", "--batch-size", "512")  # an explicit batch
    assert small["lr_peak"] == pytest.approx(1.7 / 8) and small["global_batch"] == 512
    assert "1.7" in small["scaling"]["note"] and "0.2125" in small["scaling"]["note"]  # the source's and ours
    explicit = show("--recipe", "ffcv-rn50-16", "--world-size", "1", "--lr", "0.9", "--epochs", "8", "--no-tta")
    assert explicit["lr_peak"] == 0.9 and "explicit --lr" in explicit["scaling"]["how"]
    assert explicit["overrides"] == {"lr": 1.7, "epochs": 16, "tta": True}
    assert explicit["tta"] is False and len(explicit["lr_at_epoch"]) == 8
    same = show("--recipe", "ffcv-rn50-16", "--epochs", "16")  # a flag equal to the recipe's value changes nothing
    assert same["overrides"] == {}


# issue 30: on 1, 2, 4, 8, 16 ranks every recipe keeps its source's global batch and lr
@pytest.mark.parametrize("world", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("name", ["ffcv-rn50-16", "ffcv-rn18-16", "tv-rn50-v1", "tv-rn50-v2", "rsb-a3-rn50"])
def test_every_world_size_keeps_the_source_global_batch_and_lr(name, world):
    r = get_recipe(name)
    source_global = r.world_size.value * r.value("batch_size")
    d = show("--recipe", name, "--world-size", str(world))
    assert d["global_batch"] == world * d["batch_size_per_gpu"] * d["accumulate"] == source_global
    assert d["lr_peak"] == r.value("lr") and d["lr_at_epoch"] == show("--recipe", name, "--world-size",
                                                                      str(r.world_size.value))["lr_at_epoch"]
    assert d["batch_size_per_gpu"] <= r.value("batch_size")  # never more per GPU than the source's
    assert d["accumulate"] == max(1, source_global // (world * r.value("batch_size")))  # only as much as needed
    note = d["scaling"]["note"]
    if world == r.world_size.value:
        assert note is None  # the source's own world size: nothing adapted
    else:  # one line, naming the split and both lrs
        assert "\n" not in note and f"{world} GPU(s)" in note and str(source_global) in note
    if name == "tv-rn50-v2":  # torchvision's EMA adjustment at the source's global batch
        assert d["ema"]["decay"] == pytest.approx(1 - (1 - 0.99998) * 1024 * 32 / 600)


def test_a_global_batch_no_world_size_splits_evenly_falls_short_and_says_so():
    d = show("--recipe", "ffcv-rn18-16", "--world-size", "3")  # 1024 over 3 ranks: no whole split
    assert d["global_batch"] == 3 * 341 and d["lr_peak"] == pytest.approx(0.5 * 1023 / 1024)
    assert "does not split evenly" in d["scaling"]["note"]


def test_accumulate_that_cannot_hold_the_source_batch_is_one_line(capsys):
    assert main(["--recipe", "ffcv-rn50-16", "--world-size", "1", "--accumulate", "2", "--show"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give --batch-size too" in err


def test_show_with_data_uses_the_shard_set_train_count(tiny_shards, capsys):
    manifest = json.loads((tiny_shards / "manifest.json").read_text())
    count = int(manifest["splits"]["train"]["num_samples"])
    assert main(["--recipe", "ffcv-rn18-16", "--data", str(tiny_shards), "--batch-size", "8", "--show"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert count != N and d["train_samples"] == count and d["steps_per_epoch"] == count // 8


def test_show_prints_the_world_size_note_and_uses_the_data_train_count(tmp_path, capsys):
    assert main(["--recipe", "ffcv-rn18-16", "--world-size", "8", "--show"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("note: ffcv-rn18-16 on 8 GPU(s): the source's global batch 1024 as 8 x 128")
    assert json.loads(captured.out)["train_samples"] == N
    data = tmp_path / "shards"
    data.mkdir()
    (data / "manifest.json").write_text("{}")
    assert main(["--recipe", "ffcv-rn18-16", "--data", str(data), "--show"]) == 2  # an unreadable manifest: one line
    assert capsys.readouterr().err.startswith("error: cannot read the manifest")


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_names_the_shard_setting_of_its_source_data(name):
    r = get_recipe(name)  # torchvision and timm read the original JPEGs; FFCV wrote its sets at 500 / 400 px
    expected = "longer:400" if name.startswith("ffcv-rn18") else "longer:500" if name.startswith("ffcv-") else "none"
    d = show("--recipe", name)
    assert d["shards_resize"] == r.shards_resize.value == expected
    assert d["cites"]["shards_resize"] == r.shards_resize.source and "bench_resize_paths" in r.shards_resize.source


def test_show_notes_shards_prepared_with_another_resize_and_not_the_matching_one(tiny_shards, tmp_path, capsys):
    from tests.fixtures.trainer import write_tiny_shards
    shrunk = json.loads((tiny_shards / "manifest.json").read_text())["fixed"]["counts"]["resized"]
    assert main(["--recipe", "tv-rn50-v1", "--data", str(tiny_shards), "--show"]) == 0  # prepared --resize longer:64
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if "prepare-shards --resize" in line]
    assert notes == [f"note: tv-rn50-v1's source trained on the images prepare-shards --resize none stores; --data was "
                     f"prepared with --resize longer:64 ({shrunk} image(s) shrunk): its crops can differ from the "
                     f"source's (docs/recipes.md, 'Shard settings')"] and shrunk > 0
    assert json.loads(captured.out)["shards_resize"] == "none"
    originals = write_tiny_shards(tmp_path / "originals", classes=2, train_per_class=3, val_per_class=1,
                                  resize="none")
    assert main(["--recipe", "tv-rn50-v1", "--data", str(originals), "--show"]) == 0
    captured = capsys.readouterr()
    assert "--resize" not in captured.err and json.loads(captured.out)["shards_resize"] == "none"
    assert main(["--recipe", "ffcv-rn50-16", "--data", str(originals), "--show"]) == 0  # FFCV's 500 px bound: not none
    assert "--resize longer:500 stores; --data was prepared with --resize none (0 image(s) shrunk)" in capsys.readouterr().err
    from imagenet_shards.train.trainer.recipe import shards_note
    manifest = json.loads((originals / "manifest.json").read_text())
    config, _, _ = config_from_argv(["--recipe", "tv-rn50-v1", "--show"])
    manifest["config"]["resize"] = "longer:500"  # as prepared at the default with no image over 500 px: the originals
    assert shards_note(config, manifest) is None
    manifest["fixed"]["counts"]["resized"] = 1
    assert "--resize longer:500 (1 image(s) shrunk)" in shards_note(config, manifest)


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_names_the_metric_its_published_figure_is(name):
    r = get_recipe(name)
    expected = "ema_val_top1" if name == "tv-rn50-v2" else "val_top1"  # v2: the post's '+ EMA' row
    assert r.metric.value == expected and r.metric.source
    d = show("--recipe", name)
    assert d["published_metric"] == d["best_metric"] == expected
    assert d["published_metric_tta"] is name.startswith("ffcv-")  # FFCV's figure is with flip TTA
    assert d["published_cites"]["metric"] == r.metric.source


def test_best_metric_falls_back_when_the_run_drops_its_part_and_refuses_an_impossible_one(tmp_path, capsys):
    config, _, _ = config_from_argv(["--recipe", "tv-rn50-v2", "--ema", "0", "--show"])  # EMA off: raw model
    assert config.best_metric == "val_top1"
    config, _, _ = config_from_argv(["--recipe", "tv-rn50-v2", "--best-metric", "val_top1", "--show"])
    assert config.best_metric == "val_top1"  # an explicit choice wins
    assert main(["--out", str(tmp_path / "r"), "--synthetic-data", "--best-metric", "ema_val_top1"]) == 2
    assert "--best-metric ema_val_top1 needs --ema" in capsys.readouterr().err


def test_unknown_recipe_is_one_line_listing_the_known_ones(capsys):
    assert main(["--recipe", "ffcv-rn50-17", "--show"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: unknown --recipe 'ffcv-rn50-17'")
    assert all(name in err for name in RECIPES)


def test_world_size_flag_only_with_show(tmp_path, capsys):
    assert main(["--recipe", "ffcv-rn18-16", "--out", str(tmp_path / "r"), "--world-size", "2",
                 "--synthetic-data"]) == 2
    assert "--world-size is for --show" in capsys.readouterr().err



def test_the_recipes_are_data_that_import_nothing_from_the_trainer_or_the_loader():
    """Every import in train/recipes/, at the top or inside a function, is of the standard library or
    of train/recipes itself (resolving and describing a recipe are the trainer's: trainer/recipe.py)."""
    from imagenet_shards.train import recipes

    imported = set()
    for path in Path(recipes.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
    ours = {m for m in imported if m.startswith("imagenet_shards")}
    assert ours and all(m.startswith("imagenet_shards.train.recipes") for m in ours), ours
    assert not {m.split(".")[0] for m in imported - ours} - set(sys.stdlib_module_names) - {"__future__"}
