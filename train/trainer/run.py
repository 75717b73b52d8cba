"""`train(config)`: the whole run, from the manifest to the last checkpoint.

Per epoch: set resolution and epoch on the loader -> train -> average BN statistics across ranks
-> evaluate (model, then EMA) -> metrics record -> checkpoint-latest (and -best). Checkpoints are
written only at epoch ends, so a resume always starts at an epoch boundary and recomputes the
schedules from the epoch number alone.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.storage.fs import redact
from imagenet_shards.train.trainer import ceiling
from imagenet_shards.train.trainer import checkpoint as ckpt
from imagenet_shards.train.trainer.distributed import DistInfo, average_buffers, barrier, gather_objects, init_distributed, print0
from imagenet_shards.train.trainer.engine import (AMP_DTYPES, EpochStats, ModelEma, build_model, build_optimizer, evaluate,
                          load_weights, make_autocast, make_grad_scaler, train_one_epoch)
from imagenet_shards.train.trainer.prefetch import DeviceAugment, DevicePrefetcher, SyntheticBatches
from imagenet_shards.train.trainer.schedule import default_lr, default_ramp, make_lr_scheduler, resolution_at
from imagenet_shards.train.trainer.telemetry import MetricsLog, gpu_memory_gib

IMAGENET_TRAIN_SAMPLES = 1281167  # sizes a --synthetic-data epoch when there is no --data


class TrainError(Exception):
    """A run that cannot start or continue for a reason the user can fix (exit code 2)."""


@dataclass
class TrainConfig:
    """Everything a run depends on; saved in each checkpoint. Field names match the CLI flags."""

    data: str | None
    out: str
    arch: str = "resnet50"
    epochs: int = 16
    batch_size: int = 256                    # per process
    lr: float | None = None                  # None: default_lr(global batch)
    momentum: float = 0.9
    nesterov: bool = False
    wd: float = 5e-5
    no_bn_wd: bool = False
    label_smoothing: float = 0.1
    schedule: str = "cosine"
    warmup_epochs: float = 0.0
    res: int = 176
    end_res: int | None = None
    ramp_epochs: tuple[int, int] | None = None
    val_res: int = 256
    val_crop: int = 224
    amp: str = "bf16"
    channels_last: bool = False
    compile: bool = False
    ema: float | None = None
    mixup: float = 0.0
    cutmix: float = 0.0
    aug: str = "none"
    random_erase: float = 0.0
    workers: int = 8
    device: str = "auto"
    resume: str | None = None
    eval_only: bool = False
    synthetic_data: bool = False
    profile: int = 0
    seed: int = 0
    weights: str | None = None
    gpu_decode: bool = False
    sync_bn: bool = False
    limit_batches: int | None = None
    stop_after_epochs: int | None = None
    measure_ceiling: int = 0
    log_interval: int = 50
    cache_dir: str | None = None             # local LRU copy of remote shards (train/shard_cache.py)
    cache_size: int | None = None            # its cap in bytes (None: 90% of that disk)
    storage_option: list = field(default_factory=list)  # KEY=VALUE for the --data URL; saved as keys only
    extra: dict = field(default_factory=dict)  # room for experiments; saved, otherwise unused


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


def _check_flags(config: TrainConfig, info: DistInfo) -> None:
    if config.gpu_decode and info.device.type != "cuda":
        raise TrainError("--gpu-decode needs CUDA (this run is on the CPU; drop --gpu-decode)")
    if config.eval_only and not (config.weights or config.resume):
        raise TrainError("--eval-only needs --weights FILE or --resume auto|PATH")
    if config.amp not in AMP_DTYPES:
        raise TrainError(f"unknown --amp {config.amp!r} (expected bf16, fp16 or none)")
    if not config.data and not config.synthetic_data:
        raise TrainError("--data DIR is needed (a prepare-shards output with manifest.json), or --synthetic-data")


def _dataset_size(config: TrainConfig) -> tuple[int, int]:
    """(num_classes, train samples) from the manifest; ImageNet-1k's for --synthetic-data alone."""
    if not config.data:
        return 1000, IMAGENET_TRAIN_SAMPLES
    from imagenet_shards.pipeline.format.manifest import read_manifest
    try:
        manifest = read_manifest(config.data)
        return len(manifest["classes"]), int(manifest["splits"]["train"]["num_samples"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TrainError(f"cannot read the manifest of --data {redact(config.data)}: {e} "
                         f"(point --data at a prepare-shards output directory)") from None


def _resume_state(config: TrainConfig, num_classes: int) -> tuple[dict | None, Path | None]:
    if not config.resume:
        return None, None
    path = Path(config.out) / ckpt.LATEST if config.resume == "auto" else Path(config.resume)
    if not path.exists():
        if config.resume == "auto" and not config.eval_only:
            return None, None
        raise TrainError(f"--resume {config.resume}: no checkpoint at {path}")
    try:
        state = ckpt.load_checkpoint(path)
    except Exception as e:  # torn or foreign file: say which and why
        raise TrainError(f"cannot load checkpoint {path}: {e}") from None
    if state["arch"] != config.arch or state["num_classes"] != num_classes:
        raise TrainError(f"checkpoint {path} is --arch {state['arch']} with {state['num_classes']} classes, "
                         f"this run is --arch {config.arch} with {num_classes} classes "
                         f"(use the same --arch/--data, or a new --out)")
    return state, path


def _make_loaders(config: TrainConfig, info: DistInfo, num_classes: int, num_train: int, res: int):
    """(train loader, val loader or None). imagenet_shards.train.loader.dataset is imported lazily: synthetic runs need no shards."""
    if config.synthetic_data:
        steps = max(1, num_train // (config.batch_size * info.world_size))
        if config.limit_batches:
            steps = min(steps, config.limit_batches)
        return SyntheticBatches(steps, config.batch_size, res, num_classes, info.device,
                                seed=config.seed + info.rank), None
    common = dict(workers=config.workers, seed=config.seed, rank=info.rank, world_size=info.world_size,
                  pin_memory=info.device.type == "cuda", persistent_workers=config.workers > 0,
                  cache_dir=config.cache_dir, cache_bytes=config.cache_size)
    if config.gpu_decode:
        from imagenet_shards.train.loader.gpu_decode import make_gpu_decode_loader as make
        common["device"] = info.device
    else:
        from imagenet_shards.train.loader.dataset import make_loader as make
        common["aug"] = None if config.aug == "none" else config.aug
    try:
        train_loader = make(config.data, "train", config.batch_size, train=True, res=res, **common)
        val_loader = make(config.data, "val", config.batch_size, train=False, val_resize=config.val_res,
                          val_crop=config.val_crop, **common)
    except (OSError, ValueError) as e:
        raise TrainError(f"cannot open the shards of --data {redact(config.data)}: {e}") from None
    return train_loader, val_loader


def _build(config: TrainConfig, info: DistInfo, num_classes: int, num_train: int, res: int) -> Parts:
    torch.manual_seed(config.seed)  # same initial weights on every rank
    random.seed(config.seed)
    np.random.seed(config.seed)
    try:
        raw = build_model(config.arch, num_classes)
        if config.weights:
            load_weights(raw, config.weights)
    except (ValueError, OSError) as e:
        raise TrainError(str(e)) from None
    if config.sync_bn and info.distributed:
        raw = torch.nn.SyncBatchNorm.convert_sync_batchnorm(raw)
    raw.to(info.device)
    if config.channels_last:
        raw.to(memory_format=torch.channels_last)
    train_loader, val_loader = _make_loaders(config, info, num_classes, num_train, res)
    steps = len(train_loader) if not config.limit_batches else min(len(train_loader), config.limit_batches)
    if steps == 0:
        raise TrainError(f"the train split gives no full batch of {config.batch_size} per process over "
                         f"{info.world_size} processes; lower --batch-size")
    lr = config.lr if config.lr is not None else default_lr(config.batch_size * info.world_size)
    optimizer = build_optimizer(raw, lr=lr, momentum=config.momentum, nesterov=config.nesterov,
                                weight_decay=config.wd, no_bn_wd=config.no_bn_wd)
    scheduler = make_lr_scheduler(optimizer, total_steps=config.epochs * steps,
                                  warmup_steps=int(config.warmup_epochs * steps), schedule=config.schedule)
    model = raw
    if info.distributed:
        ids = [info.device.index] if info.device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(raw, device_ids=ids)
    ema = ModelEma(raw, config.ema) if config.ema else None  # after DDP's broadcast: same on all ranks
    if config.compile:
        model = torch.compile(model)
    torch.manual_seed(config.seed + info.rank)  # per-rank randomness (dropout, stochastic depth)
    return Parts(raw=raw, model=model, ema=ema, optimizer=optimizer, scheduler=scheduler,
                 scaler=make_grad_scaler(config.amp, info.device), train_loader=train_loader,
                 val_loader=val_loader, steps_per_epoch=steps, lr=lr, num_classes=num_classes)


def _restore(parts: Parts, state: dict, path: Path, config: TrainConfig, info: DistInfo) -> int:
    """Load a checkpoint into the built parts; returns the global step to continue from."""
    parts.raw.load_state_dict(state["model"])
    if parts.ema is not None and state.get("ema"):
        parts.ema.load_state_dict(state["ema"])
    epoch = state["epoch"]
    if config.eval_only:
        return state["step"]
    optimizer, scheduler = parts.optimizer, parts.scheduler
    saved_groups = len(state["optimizer"]["param_groups"])
    if saved_groups != len(optimizer.param_groups):
        raise TrainError(f"checkpoint {path} has {saved_groups} optimizer parameter groups, this run has "
                         f"{len(optimizer.param_groups)} (resume with the same --no-bn-wd setting)")
    optimizer.load_state_dict(state["optimizer"])
    if parts.scaler is not None and state.get("scaler"):
        parts.scaler.load_state_dict(state["scaler"])
    scheduler.load_state_dict(state["scheduler"])
    # Position and lr come from this run (epoch x its steps/epoch, its --lr), so a run resumed on
    # another world size continues on schedule; an unchanged run gets exactly the saved values.
    step = epoch * parts.steps_per_epoch
    scheduler.last_epoch = step
    scheduler.base_lrs = [parts.lr] * len(optimizer.param_groups)
    for group, factor in zip(optimizer.param_groups, [f(step) for f in scheduler.lr_lambdas]):
        group["initial_lr"] = parts.lr
        group["lr"] = parts.lr * factor
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    if state["world_size"] == info.world_size:
        ckpt.restore_rng_state(state["rng"][info.rank], info.device)
    else:
        print0(info, f"warning: resuming a {state['world_size']}-process checkpoint with {info.world_size} "
                     f"processes: the global batch, the default lr and the data order differ from an "
                     f"uninterrupted run; the schedule continues from epoch {epoch}")
    return step


def _save(config: TrainConfig, info: DistInfo, parts: Parts, epoch: int, step: int, result: dict,
          best_top1: float | None) -> float | None:
    """checkpoint-latest on rank 0 (every rank's RNG state gathered first), and -best when val
    top-1 improves. Returns the best top-1 so far."""
    rngs = gather_objects(info, ckpt.rng_state(info.device))
    top1 = result.get("val_top1")
    is_best = top1 is not None and (best_top1 is None or top1 > best_top1)
    best = top1 if is_best else best_top1
    if info.is_main:
        state = {
            "format": ckpt.FORMAT, "format_version": ckpt.FORMAT_VERSION, "arch": config.arch,
            "num_classes": parts.num_classes, "epoch": epoch, "step": step, "world_size": info.world_size,
            "model": parts.raw.state_dict(), "optimizer": parts.optimizer.state_dict(),
            "scheduler": parts.scheduler.state_dict(),
            "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
            "ema": parts.ema.state_dict() if parts.ema is not None else None,
            "rng": rngs, "config": _plain(_saved_config(config)), "best_top1": best, "metrics": result,
        }
        latest = ckpt.save_checkpoint(Path(config.out) / ckpt.LATEST, state)
        if is_best:
            ckpt.link_checkpoint(latest, Path(config.out) / ckpt.BEST)
    barrier(info)
    return best


def _saved_config(config: TrainConfig) -> dict:
    """The config as checkpoints keep it: no credentials (URL secrets redacted, option values dropped)."""
    return {**asdict(config), "data": config.data and redact(config.data),
            "storage_option": [o.split("=", 1)[0] + "=" for o in config.storage_option]}


def _plain(value):
    """Tuples to lists, recursively, so the config loads with weights_only=True."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _profiler(config: TrainConfig, info: DistInfo):
    """torch.profiler over `--profile N` steps (after 1 wait + 1 warm-up step) -> RUN_DIR/profile/."""
    if not config.profile:
        return None
    from torch.profiler import ProfilerActivity, profile, schedule
    out = Path(config.out) / "profile"
    out.mkdir(parents=True, exist_ok=True)

    def write(prof) -> None:
        prof.export_chrome_trace(str(out / f"trace-rank{info.rank}.json"))
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        (out / f"summary-rank{info.rank}.txt").write_text(table + "\n")

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if info.device.type == "cuda" else [])
    return profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=config.profile, repeat=1),
                   on_trace_ready=write, record_shapes=True)


def _describe(result: dict) -> str:
    parts = []
    if "train_loss" in result:
        parts.append(f"train loss {result['train_loss']:.4f} acc {100 * result['train_acc']:.2f}%")
    for prefix in ("val", "ema_val"):
        if f"{prefix}_top1" in result:
            parts.append(f"{prefix.replace('_', ' ')} top1 {100 * result[f'{prefix}_top1']:.2f}% "
                         f"top5 {100 * result[f'{prefix}_top5']:.2f}% ({result[f'{prefix}_samples']} images)")
    if "steady_img_per_s" in result:
        parts.append(f"{result['steady_img_per_s']:.1f} img/s, data-wait "
                     f"{100 * result['data_wait_fraction']:.1f}%, res {result['res']}")
    return " | ".join(parts)


def train(config: TrainConfig) -> dict:
    """Run training (or evaluation) as configured; returns the last epoch's metrics plus
    `weights_sha256` and, when a ceiling is known, `loader_efficiency`.

    Raises TrainError for problems the user can fix (no manifest, wrong checkpoint, no CUDA...).
    """
    if config.data and config.storage_option:
        storage.apply_storage_options(config.data, config.storage_option)
    try:
        info = init_distributed(config.device)
    except (RuntimeError, ValueError) as e:
        raise TrainError(str(e)) from None
    if info.device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed shapes per epoch: autotune the convolutions
        torch.set_float32_matmul_precision("high")  # TF32 where --amp none
    _check_flags(config, info)
    num_classes, num_train = _dataset_size(config)
    out = Path(config.out)
    if info.is_main:
        out.mkdir(parents=True, exist_ok=True)
    state, state_path = _resume_state(config, num_classes)
    start_epoch = state["epoch"] if state else 0
    ramp = tuple(config.ramp_epochs) if config.ramp_epochs else default_ramp(config.epochs)

    def res_at(epoch: int) -> int:
        return resolution_at(epoch, start_res=config.res, end_res=config.end_res, ramp=ramp)

    parts = _build(config, info, num_classes, num_train, res_at(start_epoch))
    step, best_top1 = 0, None
    if state is not None:
        step = _restore(parts, state, state_path, config, info)
        best_top1 = state.get("best_top1")
        print0(info, f"resumed from {state_path} at epoch {start_epoch} (step {step})")
    elif config.resume == "auto":
        print0(info, f"--resume auto: no {out / ckpt.LATEST} yet, starting from scratch")

    dtype = AMP_DTYPES[config.amp]
    augment = DeviceAugment(num_classes=num_classes, mixup=config.mixup, cutmix=config.cutmix,
                            random_erase=config.random_erase)
    train_batches = DevicePrefetcher(parts.train_loader, info.device, dtype=dtype,
                                     channels_last=config.channels_last, aug=augment, seed=config.seed,
                                     rank=info.rank)
    val_batches = None if parts.val_loader is None else DevicePrefetcher(
        parts.val_loader, info.device, dtype=dtype, channels_last=config.channels_last, aug=None)
    autocast = make_autocast(config.amp, info.device)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=config.label_smoothing)
    print0(info, f"{config.arch} on {info.device} x{info.world_size}: {num_classes} classes, global batch "
                 f"{config.batch_size * info.world_size}, lr {parts.lr:.4g}, {parts.steps_per_epoch} "
                 f"steps/epoch, amp {config.amp}")

    def run_eval(epoch: int) -> dict:
        if val_batches is None:
            return {}
        val_batches.set_epoch(epoch)
        result = {f"val_{k}": v for k, v in evaluate(parts.raw, val_batches, autocast=autocast, info=info).items()}
        if parts.ema is not None:
            result.update({f"ema_val_{k}": v for k, v in evaluate(parts.ema.module, val_batches, autocast=autocast,
                                                                   info=info, desc="val ema").items()})
        return result

    metrics = MetricsLog(out, enabled=info.is_main)
    try:
        if config.eval_only:
            result = run_eval(start_epoch)
            metrics.log("eval", epoch=start_epoch, step=step, **result)
            print0(info, "eval: " + _describe(result))
            return result
        result: dict = {}
        last: EpochStats | None = None
        res = res_at(start_epoch)
        profiler = _profiler(config, info)
        end_epoch = config.epochs
        if config.stop_after_epochs:
            end_epoch = min(end_epoch, start_epoch + config.stop_after_epochs)
        for epoch in range(start_epoch, end_epoch):
            res = res_at(epoch)
            parts.train_loader.set_resolution(res)
            train_batches.set_epoch(epoch)
            profiling = profiler is not None and epoch == start_epoch
            with profiler if profiling else contextlib.nullcontext():
                last = train_one_epoch(
                    parts.model, train_batches, optimizer=parts.optimizer, scheduler=parts.scheduler,
                    scaler=parts.scaler, autocast=autocast, criterion=criterion, info=info, epoch=epoch,
                    step=step, ema=parts.ema, ema_source=parts.raw, metrics=metrics,
                    log_interval=config.log_interval, res=res, limit_batches=config.limit_batches,
                    profiler=profiler if profiling else None, desc=f"epoch {epoch + 1}/{config.epochs}")
            step += last.steps
            average_buffers(info, parts.raw)
            if parts.ema is not None:
                average_buffers(info, parts.ema.module)
            result = dict(epoch=epoch, step=step, res=res, lr=parts.optimizer.param_groups[0]["lr"],
                          train_loss=last.loss, train_acc=last.acc, img_per_s=last.img_per_s,
                          steady_img_per_s=last.steady_img_per_s, data_wait_fraction=last.data_wait_fraction,
                          epoch_seconds=last.seconds, gpu_mem_gib=gpu_memory_gib(info.device),
                          bad_samples=getattr(parts.train_loader, "stats", {}).get("bad_samples"),
                          **run_eval(epoch))
            metrics.log("epoch", **result)
            print0(info, f"epoch {epoch + 1}/{config.epochs} " + _describe(result))
            if not config.synthetic_data:
                best_top1 = _save(config, info, parts, epoch + 1, step, result, best_top1)
        result["weights_sha256"] = ckpt.state_dict_sha256(parts.raw)
        if last is not None:
            result.update(_efficiency(config, info, parts, last, res=res, step=step, dtype=dtype,
                                      autocast=autocast, criterion=criterion, metrics=metrics))
        metrics.log("final", **result)
        return result
    finally:
        metrics.close()


def _efficiency(config: TrainConfig, info: DistInfo, parts: Parts, last: EpochStats, *, res: int, step: int,
                dtype, autocast, criterion, metrics: MetricsLog) -> dict:
    """Write (synthetic run) or find/measure (real run) the ceiling; report the loader efficiency."""
    key = ceiling.ceiling_key(config, info, res)
    if config.synthetic_data:
        if info.is_main:
            ceiling.write_ceiling(Path(config.out), key, last.steady_img_per_s)
        return {}
    if config.measure_ceiling:
        top = ceiling.measure_ceiling(config.measure_ceiling, model=parts.model, optimizer=parts.optimizer,
                                      scaler=parts.scaler, autocast=autocast, criterion=criterion, info=info,
                                      batch_size=config.batch_size, res=res, num_classes=parts.num_classes,
                                      dtype=dtype, channels_last=config.channels_last, seed=config.seed,
                                      log_interval=config.log_interval, step=step)
        metrics.log("ceiling", step=step, res=res, steady_img_per_s=top)
        if info.is_main:
            ceiling.write_ceiling(Path(config.out), key, top)
    else:
        top = ceiling.read_ceiling(Path(config.out), key)
    if not top:
        return {}
    efficiency = last.steady_img_per_s / top
    metrics.log("efficiency", step=step, real_img_per_s=last.steady_img_per_s, ceiling_img_per_s=top,
                loader_efficiency=efficiency)
    print0(info, f"loader efficiency = real img/s / synthetic img/s = {last.steady_img_per_s:.1f} / {top:.1f} "
                 f"= {efficiency:.3f}")
    return {"ceiling_img_per_s": top, "loader_efficiency": efficiency}
