"""From a checked config to the parts a run is made of: model, optimizer, schedule, loaders, scaler.

The loaders are imported lazily: a `--synthetic-data` run needs no shards (and no loader code).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from imagenet_shards.pipeline.storage.retry import redact
from imagenet_shards.train.trainer.config import TrainConfig, TrainError, imagenet_1k_sizes
from imagenet_shards.train.trainer.distributed import DistInfo, wrap_ddp
from imagenet_shards.train.trainer.engine import make_grad_scaler
from imagenet_shards.train.trainer.model import ModelEma, build_model, build_optimizer, load_weights
from imagenet_shards.train.trainer.prefetch import SyntheticBatches
from imagenet_shards.train.trainer.schedule import default_lr, make_lr_scheduler, schedule_for


@dataclass
class Parts:
    """What a run is made of once built (raw = the bare module; model = what the step calls)."""

    raw: torch.nn.Module
    model: torch.nn.Module
    ema: ModelEma | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler | None
    train_loader: object
    val_loader: object | None
    steps_per_epoch: int
    lr: float
    num_classes: int


def read_dataset(config: TrainConfig) -> tuple[dict | None, int, int]:
    """(manifest or None, num_classes, train samples); ImageNet-1k's sizes for --synthetic-data alone.

    TrainError for a manifest without val samples unless --no-val: evaluating on nothing would
    print `val top1 0.00% (0 images)` every epoch and keep no best checkpoint."""
    if not config.data:
        return None, *imagenet_1k_sizes()
    from imagenet_shards.pipeline.format.manifest import ManifestError, read_manifest
    try:
        manifest = read_manifest(config.data)
        found = manifest, len(manifest["classes"]), int(manifest["splits"]["train"]["num_samples"])
    except ManifestError as e:  # its message already says what to do
        raise TrainError(f"cannot read the manifest of --data {redact(config.data)}: {e}") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TrainError(f"cannot read the manifest of --data {redact(config.data)}: {e!r} "
                         f"(point --data at a prepare-shards output directory)") from None
    val = manifest["splits"].get("val")
    if not config.no_val and not config.synthetic_data and not (isinstance(val, dict) and val.get("num_samples")):
        what = "no val split" if val is None else "a val split of 0 samples"
        raise TrainError(f"--data {redact(config.data)} has {what}: there is nothing to evaluate on; prepare it "
                         "with --val (and --devkit), or pass --no-val to train without evaluation")
    return found


def batch_bytes(config: TrainConfig, manifest: dict | None, split: str = "train") -> int:
    """Bytes of one `split` batch as loader workers hand it over: uint8 crops at the largest size
    that split uses (train: the resolution ramp's largest; val: the centre crop), or (--gpu-decode)
    raw JPEG bytes at that split's mean size."""
    if config.gpu_decode and manifest is not None:
        entry = manifest["splits"].get(split, {})
        total = sum(int(s.get("bytes") or 0) for s in entry.get("shards", []))
        return config.batch_size * max(1, total // max(1, int(entry.get("num_samples") or 1)))
    side = max(config.res, config.end_res or 0) if split == "train" else config.val_crop
    return config.batch_size * 3 * side * side


def make_loaders(config: TrainConfig, info: DistInfo, num_classes: int, num_train: int, res: int):
    """(train loader, val loader or None) for this rank."""
    if config.synthetic_data:
        steps = max(1, num_train // (config.batch_size * info.world_size))
        if config.limit_batches:
            steps = min(steps, config.limit_batches)
        return SyntheticBatches(steps, config.batch_size, res, num_classes, info.device,
                                seed=config.seed + info.rank), None
    common = dict(workers=config.workers, seed=config.seed, rank=info.rank, world_size=info.world_size,
                  pin_memory=info.device.type == "cuda", persistent_workers=config.workers > 0,
                  cache_dir=config.cache_dir, cache_bytes=config.cache_size)
    train_extra, val_extra = {}, {}
    if config.gpu_decode:
        from imagenet_shards.train.loader.gpu_decode import make_gpu_decode_loader as make
        common["device"] = info.device
    else:
        from imagenet_shards.train.loader import make_loader as make
        common["aug"] = None if config.aug == "none" else config.aug
        common["bad_shards"] = "skip" if config.skip_bad_shards else "stop"  # a digest mismatch (loader/reading.py)
        common["dct_scaling"] = config.dct_scaling
        # accumulate: the loader keeps positions back to a step's start (a stop inside a step); with repeated
        # augmentation on fewer ranks than copies, the copies go to different micro-batches of a step
        train_extra = {"accumulate": config.accumulate, **({"repeats": config.ra_reps} if config.ra_reps > 1 else {})}
        val_extra = {"val_crop_ratio": config.val_crop_ratio, "keys": config.eval_real}
    try:
        train_loader = make(config.data, "train", config.batch_size, train=True, res=res,
                            interpolation=config.train_interpolation, **common, **train_extra)
        val_loader = None if config.no_val else make(config.data, "val", config.batch_size, train=False,
                                                     val_resize=config.val_res, val_crop=config.val_crop,
                                                     interpolation=config.val_interpolation, **common, **val_extra)
    except (OSError, ValueError) as e:
        raise TrainError(f"cannot open the shards of --data {redact(config.data)}: {e}") from None
    return train_loader, val_loader


def build(config: TrainConfig, info: DistInfo, num_classes: int, num_train: int, res: int) -> Parts:
    """Seeded model (same initial weights on every rank), optimizer, lr schedule, loaders, DDP,
    EMA and torch.compile, in the order they depend on each other."""
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    np.random.seed(config.seed)
    try:
        raw = build_model(config.arch, num_classes, zero_init_residual=config.zero_init_residual,
                          blurpool=config.blurpool)
        if config.weights:
            load_weights(raw, config.weights)
    except (ValueError, OSError) as e:
        raise TrainError(str(e)) from None
    if config.sync_bn and info.distributed:
        raw = torch.nn.SyncBatchNorm.convert_sync_batchnorm(raw)
    raw.to(info.device)
    if config.channels_last:
        raw.to(memory_format=torch.channels_last)
    train_loader, val_loader = make_loaders(config, info, num_classes, num_train, res)
    steps = len(train_loader) // config.accumulate
    steps = steps if not config.limit_batches else min(steps, config.limit_batches)
    if steps == 0:
        raise TrainError(f"the train split gives no full batch of {config.batch_size} per process over "
                         f"{info.world_size} processes" + (f" and {config.accumulate} accumulated batches"
                                                           if config.accumulate > 1 else "") + "; lower --batch-size")
    global_batch = config.batch_size * info.world_size * config.accumulate
    lr = config.lr if config.lr is not None else default_lr(global_batch)
    try:
        optimizer = build_optimizer(raw, lr=lr, momentum=config.momentum, nesterov=config.nesterov,
                                    weight_decay=config.wd, no_bn_wd=config.no_bn_wd, wd_exempt=config.wd_exempt,
                                    optimizer=config.optimizer, device=info.device)
        scheduler = make_lr_scheduler(optimizer, schedule_for(config, steps))
    except ValueError as e:
        raise TrainError(str(e)) from None
    model = wrap_ddp(raw, info)
    ema = None
    if config.ema:  # from the seeded init: same on all ranks
        ema = ModelEma(raw, config.ema, ramp=config.ema_ramp, copy_epochs=config.ema_copy_epochs)
    if config.compile:
        # dynamic=False: one static graph per train resolution (progressive resizing has a few,
        # rounded to multiples of 32) instead of a dynamic-shape graph that is slower at every size
        model = torch.compile(model, dynamic=False)
    torch.manual_seed(config.seed + info.rank)  # per-rank randomness (dropout, stochastic depth)
    return Parts(raw=raw, model=model, ema=ema, optimizer=optimizer, scheduler=scheduler,
                 scaler=make_grad_scaler(config.amp, info.device), train_loader=train_loader,
                 val_loader=val_loader, steps_per_epoch=steps, lr=lr, num_classes=num_classes)
