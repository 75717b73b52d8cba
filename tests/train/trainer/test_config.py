"""The trainer's pure parts: node defaults, /dev/shm room, optimizer and DDP options, the EMA,
one-line loader errors, the --aug list. No training runs here except two tiny synthetic ones.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re

import pytest
import torch

from imagenet_shards.train.loader import decode
from imagenet_shards.train.recipes import RECIPES
from imagenet_shards.train.trainer import cli, distributed, flags
from imagenet_shards.train.trainer.watch import host
from imagenet_shards.train.trainer.config import TrainConfig, TrainError, check_flags, local_paths, resolve
from imagenet_shards.train.trainer.distributed import DistInfo
from imagenet_shards.train.trainer.model import ModelEma, build_optimizer, optimizer_impl
from imagenet_shards.train.trainer.prefetch import error_line
from imagenet_shards.train.trainer.watch.telemetry import read_metrics
from tests.fixtures.trainer import TINY, run_cli

CPU = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def _cuda_info(local_ranks: int = 1) -> DistInfo:
    return DistInfo(rank=0, world_size=local_ranks, local_rank=0, device=torch.device("cuda", 0),
                    local_world_size=local_ranks)


# ----------------------------------------------------------------------------- node defaults

def test_default_workers_share_the_node_between_ranks():
    assert host.default_workers(16, 1, cuda=True) == 14        # less the training and pin-memory threads
    assert host.default_workers(128, 8, cuda=True) == 14
    assert host.default_workers(16, 1, cuda=False) == 15
    assert host.default_workers(2, 1, cuda=True) == 1          # never 0: at least one worker
    assert host.default_workers(8, 16, cuda=True) == 1


def test_cgroup_quota_caps_the_cores(tmp_path):
    (tmp_path / "limited").write_text("250000 100000\n")
    (tmp_path / "unlimited").write_text("max 100000\n")
    assert host.cgroup_cpu_limit(str(tmp_path / "limited")) == 2
    assert host.cgroup_cpu_limit(str(tmp_path / "unlimited")) is None
    assert host.cgroup_cpu_limit(str(tmp_path / "absent")) is None


def test_resolve_fills_node_defaults_and_says_so():
    config = TrainConfig(data="d", out="o", epochs=16)
    cuda, notes = resolve(config, _cuda_info(8), cores=128)
    assert cuda.workers == 14 and cuda.channels_last is True and cuda.warmup_epochs == 2.0
    assert len(notes) == 1 and "--workers 14" in notes[0] and "128 usable cores / 8 rank(s)" in notes[0]
    cpu, _ = resolve(TrainConfig(data="d", out="o", epochs=2), CPU, cores=2)
    assert cpu.workers == 1 and cpu.channels_last is False and cpu.warmup_epochs == 0.5  # a quarter of 2
    asked = TrainConfig(data="d", out="o", workers=3, channels_last=False, warmup_epochs=0.0)
    kept, notes = resolve(asked, _cuda_info(), cores=64)
    assert (kept.workers, kept.channels_last, kept.warmup_epochs, notes) == (3, False, 0.0, [])


def test_shm_check_names_the_fix():
    batch = 256 * 3 * 176 * 176
    err = host.shm_error(free=64 * 10**6, workers=8, batch_bytes=batch, local_ranks=8)
    assert "--shm-size=" in err and "--workers" in err and "64.0 MB free" in err and "\n" not in err
    assert host.shm_error(free=64 * 10**9, workers=8, batch_bytes=batch, local_ranks=1) is None
    assert host.shm_error(free=1, workers=0, batch_bytes=batch, local_ranks=1) is None  # no workers, no shm
    assert host.shm_error(free=None, workers=8, batch_bytes=batch, local_ranks=1) is None  # no /dev/shm here
    # the val loader's persistent workers keep their rings too: both loaders count
    val = 256 * 3 * 224 * 224
    fits = 8 * host.BATCHES_PER_WORKER * batch + 1
    assert host.shm_error(free=fits, workers=8, batch_bytes=batch, local_ranks=1) is None
    err = host.shm_error(free=fits, workers=8, batch_bytes=batch, local_ranks=1, val_batch_bytes=val)
    assert err is not None and "(train) + 7 of 38.5 MB (val)" in err


def test_too_little_shm_stops_the_run_with_one_line(tiny_shards, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(host, "shm_free_bytes", lambda path=host.SHM: 64 * 10**6)
    out = tmp_path / "run"
    assert run_cli("--data", tiny_shards, "--out", out, *TINY, "--workers", "8", "--batch-size", "256",
                   "--res", "176") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: /dev/shm has 64.0 MB free") and len(err.splitlines()) == 1
    assert not out.exists()


# ----------------------------------------------------------------------------- flags and paths

def test_local_paths_refuses_urls_and_reads_file_urls():
    config = TrainConfig(data="s3://b/data", out="file:///tmp/run", resume="auto")
    assert local_paths(config).out == "/tmp/run" and local_paths(config).resume == "auto"
    for field in ("out", "cache_dir", "weights", "resume"):
        bad = TrainConfig(data=None, out="/tmp/r", **{field: "gs://bucket/x"}) if field != "out" else \
            TrainConfig(data=None, out="gs://bucket/x")
        with pytest.raises(TrainError, match="takes a local path, not a URL"):
            local_paths(bad)


def test_aug_with_gpu_decode_is_refused():
    info = _cuda_info()
    with pytest.raises(TrainError, match="--gpu-decode does not apply"):
        check_flags(TrainConfig(data="d", out="o", gpu_decode=True, aug="ra"), info)


def test_the_parser_is_made_from_the_config_and_returns_only_the_flags_given():
    parser = cli.build_parser()
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    dests = {a.dest for a in parser._actions} - {"help"}
    assert dests - set(flags.CLI_ONLY) == {f.name for f in flags.flag_fields()} == set(flags.defaults())
    assert fields - dests == {"recipe_overrides", "recipe_scaling"}  # set by --recipe, not flags
    assert all(a.default is argparse.SUPPRESS for a in parser._actions)  # the defaults are TrainConfig's alone
    assert vars(parser.parse_args([])) == {}
    assert vars(parser.parse_args(["--epochs", "16", "--no-tta", "--storage-option", "a=b"])) == {
        "epochs": 16, "tta": False, "storage_option": ["a=b"]}  # a flag equal to its default is still given
    config, world, show = cli.config_from_argv(["--out", "o"])
    assert (config, world, show) == (TrainConfig(data=None, out="o"), 1, False)


def test_recipe_help_names_every_registered_recipe():
    action = next(a for a in cli.build_parser()._actions if a.dest == "recipe")
    listed = action.help.split(": ", 1)[1].split("; ", 1)[0]
    names = set()
    for item in re.split(r", (?![^{]*})", listed):  # commas outside the braces
        stem, _, folded = item.partition("{")
        names |= {stem + tail for tail in folded.rstrip("}").split(",")} if folded else {item}
    assert names == set(RECIPES)


def test_aug_choices_are_the_decoders_table():
    action = next(a for a in cli.build_parser()._actions if a.dest == "aug")
    assert tuple(action.choices) == decode.AUG_NAMES
    for name in action.choices:
        decode.make_aug(None if name == "none" else name)  # every choice is one the loader knows


# ----------------------------------------------------------------------------- optimizer, DDP, EMA

def test_fused_sgd_on_cuda_so_fp16_never_syncs_the_host():
    assert optimizer_impl(torch.device("cuda", 0)) == {"fused": True}
    assert optimizer_impl(torch.device("cpu")) == {}
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    # torch builds a fused SGD over CPU tensors too, so the CUDA choice can be checked here
    opt = build_optimizer(model, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5, no_bn_wd=True,
                          device=torch.device("cuda", 0))
    assert opt.defaults["fused"] is True and getattr(opt, "_step_supports_amp_scaling", False)
    assert len(opt.param_groups) == 2
    plain = build_optimizer(model, lr=0.1, momentum=0.9, nesterov=False, weight_decay=5e-5, no_bn_wd=False)
    assert not plain.defaults.get("fused")


def test_ddp_options(monkeypatch):
    seen = {}

    class FakeDDP:
        def __init__(self, module, **kwargs):
            seen.update(kwargs)

    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", FakeDDP)
    module = torch.nn.Linear(2, 2)
    assert distributed.wrap_ddp(module, CPU) is module  # one process: no wrapper
    distributed.wrap_ddp(module, DistInfo(rank=0, world_size=2, local_rank=0, device=torch.device("cpu")))
    assert seen == {"device_ids": None, "broadcast_buffers": False, "gradient_as_bucket_view": True}


def test_ema_update_is_the_lerp_of_every_float_tensor():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    ema = ModelEma(model, decay=0.9)
    reference = copy.deepcopy(ema.module.state_dict())
    for step in range(1, 4):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        model.train()(torch.randn(2, 3, 8, 8))  # moves the BN buffers
        ema.update(model)
        d = min(0.9, (1 + step) / (10 + step))
        for key, value in model.state_dict().items():
            if value.is_floating_point():
                reference[key] = reference[key] * d + value * (1 - d)
            else:
                reference[key] = value.clone()
    for key, value in ema.module.state_dict().items():
        assert torch.allclose(value, reference[key], atol=1e-6), key


# ----------------------------------------------------------------------------- errors and runs

def test_worker_traceback_becomes_its_last_line():
    wrapped = ValueError("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
                         "last):\n  File \"x.py\", line 1, in f\n    raise ValueError(m)\nValueError: s.tar: "
                         "truncated tar member 'k.jpg'; run audit-shards\n")
    assert error_line(wrapped) == "s.tar: truncated tar member 'k.jpg'; run audit-shards"
    assert error_line(FileNotFoundError("cannot read http://h/x.tar: not found (HTTP 404)")) == \
        "cannot read http://h/x.tar: not found (HTTP 404)"
    assert error_line(RuntimeError()) == "RuntimeError"


@pytest.mark.timeout(300)
def test_fp16_records_scale_and_skipped_steps(tmp_path, monkeypatch):
    compiled = {}

    def fake_compile(model, **kwargs):
        compiled.update(kwargs)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    out = tmp_path / "run"
    assert run_cli("--synthetic-data", "--out", out, *TINY, "--epochs", "1", "--limit-batches", "2",
                   "--amp", "fp16", "--compile") == 0
    epoch = next(r for r in read_metrics(out) if r["kind"] == "epoch")
    assert epoch["amp_scale"] > 0 and isinstance(epoch["amp_skipped_steps"], int)
    assert epoch["first_step_seconds"] > 0 and epoch["main_cpu_fraction"] is not None
    assert compiled == {"dynamic": False}  # one static graph per resolution
