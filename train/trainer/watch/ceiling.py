"""The model-only throughput ceiling and the loader efficiency it gives.

`loader efficiency = real img/s / synthetic img/s`, both steady-state (see EpochStats), measured
with the same arch, per-process batch, resolution, AMP, memory format, compile and world size.
The synthetic number comes from RUN_DIR/synthetic.json, written by a `--synthetic-data` run or
by `--measure-ceiling N` (N synthetic steps after the last checkpoint of a real run).
"""

from __future__ import annotations

import json
from pathlib import Path

from imagenet_shards.train.trainer.distributed import DistInfo, print0
from imagenet_shards.train.trainer.engine import EpochStats, StepRecord, train_one_epoch
from imagenet_shards.train.augment.device import DeviceAugment
from imagenet_shards.train.trainer.prefetch import DevicePrefetcher, SyntheticBatches
from imagenet_shards.train.trainer.watch.telemetry import MetricsLog

SYNTHETIC_FILE = "synthetic.json"


def ceiling_key(config, info: DistInfo, res: int, num_classes: int) -> dict:
    """What must match for a synthetic img/s to be a run's ceiling (the classifier's width is part
    of the model: 21k classes make ResNet-50's last layer as large as the rest of it)."""
    return {"arch": config.arch, "batch_size": config.batch_size, "res": res, "amp": config.amp,
            "channels_last": config.channels_last, "compile": config.compile, "num_classes": num_classes,
            "world_size": info.world_size, "device": info.device.type}


def write_ceiling(run_dir: Path, key: dict, img_per_s: float) -> None:
    """Save a synthetic img/s with the key it is valid for (RUN_DIR/synthetic.json)."""
    (Path(run_dir) / SYNTHETIC_FILE).write_text(
        json.dumps({"key": key, "img_per_s": img_per_s}, sort_keys=True) + "\n")


def read_ceiling(run_dir: Path, key: dict) -> float | None:
    """The saved synthetic img/s if RUN_DIR/synthetic.json exists and its key matches, else None."""
    path = Path(run_dir) / SYNTHETIC_FILE
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    return saved["img_per_s"] if saved.get("key") == key else None


def measure_ceiling(steps: int, *, model, optimizer, scaler, autocast, criterion, info: DistInfo,
                    batch_size: int, res: int, num_classes: int, dtype, channels_last: bool, seed: int,
                    log_interval: int, step: int) -> float:
    """Steady img/s of `steps` training steps on one device-resident random batch.

    It trains the weights it is given: call it only after the last checkpoint is written."""
    batches = DevicePrefetcher(SyntheticBatches(steps, batch_size, res, num_classes, info.device,
                                                seed=seed + info.rank),
                               info.device, dtype=dtype, channels_last=channels_last,
                               aug=DeviceAugment(num_classes=num_classes))
    how = StepRecord(model=model, optimizer=optimizer, scheduler=None, scaler=scaler, autocast=autocast,
                     criterion=criterion, info=info, log_interval=log_interval)
    stats = train_one_epoch(batches, how, epoch=-1, step=step, res=res, desc="ceiling")
    return stats.steady_img_per_s


def report_efficiency(config, info: DistInfo, parts, last: EpochStats, *, res: int, step: int, dtype,
                      autocast, criterion, metrics: MetricsLog) -> dict:
    """At the end of a run: write the ceiling (a --synthetic-data run), or find or measure it (a real
    run) and report the loader efficiency of the last epoch. Returns the fields for the final record."""
    key = ceiling_key(config, info, res, parts.num_classes)
    if config.synthetic_data:
        if info.is_main:
            write_ceiling(Path(config.out), key, last.steady_img_per_s)
        return {}
    if config.measure_ceiling:
        top = measure_ceiling(config.measure_ceiling, model=parts.model, optimizer=parts.optimizer,
                              scaler=parts.scaler, autocast=autocast, criterion=criterion, info=info,
                              batch_size=config.batch_size, res=res, num_classes=parts.num_classes,
                              dtype=dtype, channels_last=config.channels_last, seed=config.seed,
                              log_interval=config.log_interval, step=step)
        metrics.log("ceiling", step=step, res=res, steady_img_per_s=top)
        if info.is_main:
            write_ceiling(Path(config.out), key, top)
    else:
        top = read_ceiling(Path(config.out), key)
    if not top:
        return {}
    efficiency = last.steady_img_per_s / top
    metrics.log("efficiency", step=step, real_img_per_s=last.steady_img_per_s, ceiling_img_per_s=top,
                loader_efficiency=efficiency)
    print0(info, f"loader efficiency = real img/s / synthetic img/s = {last.steady_img_per_s:.1f} / {top:.1f} "
                 f"= {efficiency:.3f}")
    return {"ceiling_img_per_s": top, "loader_efficiency": efficiency}
