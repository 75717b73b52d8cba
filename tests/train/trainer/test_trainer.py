"""The streaming trainer on CPU: schedules, device-side batches, a real tiny run, resume, checkpoints.

Shard sets are made on the fly by `write_tiny_shards`: the synthetic generator's learnable classes
through the real prepare-shards, resized to 64 px; test_trainer_ddp.py uses it too.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from imagenet_shards.train.trainer.state import checkpoint as ckpt
from tests.fixtures.trainer import TINY, run_cli
from imagenet_shards.train.augment.device import DeviceAugment
from imagenet_shards.train.trainer.prefetch import DevicePrefetcher, SyntheticBatches, normalize
from imagenet_shards.train.trainer.schedule import default_lr, lr_factor, resolution_at
from imagenet_shards.train.trainer.watch.telemetry import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[3]
# ----------------------------------------------------------------------------- pure parts

def test_lr_schedule_shapes():
    kw = dict(total_steps=100, warmup_steps=10)
    assert lr_factor(0, schedule="cosine", **kw) == pytest.approx(0.1)
    assert lr_factor(9, schedule="cosine", **kw) == pytest.approx(1.0)
    assert lr_factor(10, schedule="cosine", **kw) == pytest.approx(1.0)
    assert lr_factor(55, schedule="cosine", **kw) == pytest.approx(0.5)
    assert lr_factor(100, schedule="cosine", **kw) == pytest.approx(0.0)
    assert lr_factor(55, schedule="linear", **kw) == pytest.approx(0.5)
    assert [lr_factor(s, schedule="step", **kw) for s in (54, 55, 77, 78)] == pytest.approx([1, 0.1, 0.1, 0.01])
    assert default_lr(256) == pytest.approx(0.1) and default_lr(1024) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        lr_factor(0, schedule="exp", **kw)


def test_progressive_resolution():
    kw = dict(start_res=160, end_res=192, ramp=(10, 14))
    assert [resolution_at(e, **kw) for e in (0, 10, 11, 12, 13, 14, 20)] == [160, 160, 160, 192, 192, 192, 192]
    assert resolution_at(12, start_res=128, end_res=256, ramp=(10, 14)) == 192
    assert resolution_at(5, start_res=176, end_res=None, ramp=(0, 0)) == 176


def test_normalize_and_channels_last():
    images = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    x = normalize(images, torch.bfloat16, channels_last=True)
    assert x.dtype == torch.bfloat16 and x.is_contiguous(memory_format=torch.channels_last)
    expected = (1 - 0.485) / 0.229
    assert float(x[0, 0, 0, 0]) == pytest.approx(expected, rel=1e-2)


def test_prefetcher_on_cpu_reports_wait_and_reseeds_per_epoch():
    loader = SyntheticBatches(3, 4, 16, 10, torch.device("cpu"))
    pre = DevicePrefetcher(loader, torch.device("cpu"), dtype=torch.float32, channels_last=True,
                           aug=DeviceAugment(num_classes=10, mixup=0.5, random_erase=0.5), seed=1)
    pre.set_epoch(3)
    first = list(pre)
    pre.set_epoch(3)
    again = list(pre)
    assert len(first) == 3 and all(b.wait_s >= 0 for b in first)
    assert first[0].images.shape == (4, 3, 16, 16) and first[0].targets.shape == (4, 10)
    assert all(torch.equal(a.images, b.images) for a, b in zip(first, again))


# ----------------------------------------------------------------------------- runs (CPU, tiny)

@pytest.mark.timeout(300)
def test_synthetic_data_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli("--synthetic-data", "--out", out, *TINY, "--epochs", "1", "--limit-batches", "3") == 0
    saved = json.loads((out / "synthetic.json").read_text())
    assert saved["img_per_s"] > 0 and saved["key"]["arch"] == "resnet18"
    assert not (out / ckpt.LATEST).exists()
    assert [r["kind"] for r in read_metrics(out)][-2:] == ["epoch", "final"]


@pytest.mark.timeout(300)
def test_bf16_run_metrics_eval_and_efficiency(tiny_shards, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli("--data", tiny_shards, "--out", out, *TINY, "--epochs", "1", "--amp", "bf16",
                   "--channels-last", "--ema", "0.99", "--warmup-epochs", "0.5", "--profile", "2",
                   "--measure-ceiling", "4", "--no-bn-wd", "--nesterov") == 0
    records = read_metrics(out)
    interval = next(r for r in records if r["kind"] == "train_interval")
    for field in ("epoch", "step", "lr", "loss", "acc", "img_per_s", "data_wait_fraction", "gpu_mem_gib", "res"):
        assert field in interval, field
    epoch = next(r for r in records if r["kind"] == "epoch")
    for field in ("epoch", "step", "lr", "train_loss", "train_acc", "val_top1", "val_top5", "val_loss",
                  "val_samples", "ema_val_top1", "ema_val_top5", "img_per_s", "data_wait_fraction",
                  "gpu_mem_gib", "res"):
        assert field in epoch, field
    assert epoch["val_samples"] == epoch["ema_val_samples"] == 4 * 5  # every val sample, once
    assert 0 <= epoch["data_wait_fraction"] <= 1 and epoch["gpu_mem_gib"] is None
    assert epoch["res"] == 32 and epoch["step"] == (4 * 16) // 8
    assert any(r["kind"] == "efficiency" for r in records)
    assert "loader efficiency = " in capsys.readouterr().out
    assert (out / ckpt.LATEST).exists() and (out / ckpt.BEST).exists()
    assert list((out / "profile").glob("trace-rank0.json"))
    state = torch.load(out / ckpt.LATEST, weights_only=True)  # loads without pickle
    assert state["epoch"] == 1 and state["arch"] == "resnet18" and state["ema"] is not None

    # --eval-only on the checkpoint gives the same numbers
    assert run_cli("--data", tiny_shards, "--out", tmp_path / "eval", *TINY, "--amp", "bf16",
                   "--channels-last", "--ema", "0.99", "--eval-only", "--resume", out / ckpt.LATEST) == 0
    evaluated = read_metrics(tmp_path / "eval")[-1]
    assert evaluated["kind"] == "eval" and evaluated["val_top1"] == pytest.approx(epoch["val_top1"])
    assert evaluated["val_samples"] == 20


def _weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)["model"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])  # 2: also mid-epoch in test_preemption
def test_resume_gives_identical_weights(tiny_shards, tmp_path, workers):
    common = ["--data", tiny_shards, *TINY, "--workers", workers, "--amp", "none", "--epochs", "2", "--warmup-epochs", "0.5",
              "--mixup", "0.2", "--cutmix", "1.0", "--random-erase", "0.25", "--ema", "0.9", "--lr", "0.05"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert run_cli(*common, "--out", straight) == 0
    # the split run: epoch 1 of the same 2-epoch schedule, stop, then resume for epoch 2
    assert run_cli(*common, "--out", split, "--stop-after-epochs", "1") == 0
    assert ckpt.load_checkpoint(split / ckpt.LATEST)["epoch"] == 1
    assert run_cli(*common, "--out", split, "--resume", "auto") == 0
    a, b = ckpt.load_checkpoint(straight / ckpt.LATEST), ckpt.load_checkpoint(split / ckpt.LATEST)
    assert a["epoch"] == b["epoch"] == 2 and a["step"] == b["step"]
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for key in a["ema"]["module"]:
        assert torch.equal(a["ema"]["module"][key], b["ema"]["module"][key]), key
    ra, rb = read_metrics(straight)[-1], read_metrics(split)[-1]
    assert ra["val_top1"] == rb["val_top1"] and ra["train_loss"] == rb["train_loss"]


# ----------------------------------------------------------------------------- checkpoints and errors

def _state(i: int, size: int = 1000) -> dict:
    return {"format": ckpt.FORMAT, "format_version": ckpt.FORMAT_VERSION, "i": i,
            "blob": torch.full((size,), float(i))}


def test_checkpoint_crash_after_temp_write_keeps_previous(tmp_path, monkeypatch):
    path = tmp_path / ckpt.LATEST
    ckpt.save_checkpoint(path, _state(1))

    def crash(src, dst):
        assert Path(src).exists()  # the new checkpoint was fully written to the temp file
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(ckpt.os, "replace", crash)
    with pytest.raises(OSError):
        ckpt.save_checkpoint(path, _state(2))
    monkeypatch.undo()
    assert ckpt.load_checkpoint(path)["i"] == 1
    assert [p.name for p in tmp_path.iterdir()] == [ckpt.LATEST]


SAVER = textwrap.dedent("""
    import sys, torch
    from imagenet_shards.train.trainer.state import checkpoint as ckpt
    i = 0
    while True:
        i += 1
        ckpt.save_checkpoint(sys.argv[1], {"format": ckpt.FORMAT, "format_version": ckpt.FORMAT_VERSION,
                                           "i": i, "blob": torch.full((2_000_000,), float(i))})
        print(i, flush=True)
""")


@pytest.mark.timeout(120)
def test_sigkill_during_save_leaves_a_loadable_checkpoint(tmp_path):
    path = tmp_path / ckpt.LATEST
    rng = np.random.default_rng(0)
    for attempt in range(3):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        try:
            proc.stdout.readline()  # one save finished
            time.sleep(float(rng.uniform(0.0, 0.3)))  # then die at some point of a later save
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
        state = ckpt.load_checkpoint(path)
        assert state["i"] >= 1 and bool((state["blob"] == float(state["i"])).all())


def test_no_manifest_is_a_one_line_error(tmp_path, capsys):
    assert run_cli("--data", tmp_path / "nowhere", "--out", tmp_path / "run", *TINY) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "manifest" in err and len(err.splitlines()) == 1
    assert err.count("point") == 1 and err.endswith("point at the --out of a finished prepare-shards run")  # advice once


def test_checkpoint_of_another_arch_is_refused(tiny_shards, tmp_path, capsys):
    out = tmp_path / "run"
    ckpt.save_checkpoint(out / ckpt.LATEST, {**_state(1), "arch": "resnet50", "num_classes": 1000, "epoch": 1})
    assert run_cli("--data", tiny_shards, "--out", out, *TINY, "--resume", "auto") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "resnet50" in err and "1000 classes" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_gpu_decode_needs_cuda(tiny_shards, tmp_path, capsys):
    assert run_cli("--data", tiny_shards, "--out", tmp_path / "run", *TINY, "--gpu-decode") == 2
    assert "--gpu-decode needs CUDA" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_learns_synthetic_imagenet_end_to_end(tmp_path):
    """Archives -> prepare-shards -> train-imagenet: resnet18 at 64 px tells 10 synthetic classes
    apart on val (chance 10%), so train and val labels line up end to end. ~2 min on one core."""
    from imagenet_shards.pipeline.prepare.cli import main as prepare
    from imagenet_shards.pipeline.tools.synthetic.generate import generate
    src, shards, out = tmp_path / "src", tmp_path / "shards", tmp_path / "run"
    generate(src, classes=10, train_per_class=100, val_per_class=20, quirks=False, progress=False)
    assert prepare(["--train", str(src / "ILSVRC2012_img_train.tar"), "--val", str(src / "ILSVRC2012_img_val.tar"),
                    "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(shards),
                    "--resize", "longer:160", "--shard-samples", "128", "--workers", "2", "--quiet"]) == 0
    assert run_cli("--data", shards, "--out", out, "--arch", "resnet18", "--res", "64", "--val-res", "73",
                   "--val-crop", "64", "--batch-size", "32", "--epochs", "5", "--lr", "0.2", "--nesterov",
                   "--warmup-epochs", "1", "--workers", "2", "--device", "cpu", "--amp", "none") == 0
    last = [r for r in read_metrics(out) if r["kind"] == "epoch"][-1]
    assert last["val_samples"] == 200 and last["val_top1"] > 0.6, last
