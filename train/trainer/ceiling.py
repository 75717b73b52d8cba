"""The model-only throughput ceiling and the loader efficiency it gives.

`loader efficiency = real img/s / synthetic img/s`, both steady-state (see EpochStats), measured
with the same arch, per-process batch, resolution, AMP, memory format, compile and world size.
The synthetic number comes from RUN_DIR/synthetic.json, written by a `--synthetic-data` run or
by `--measure-ceiling N` (N synthetic steps after the last checkpoint of a real run).
"""

from __future__ import annotations

import json
from pathlib import Path

from imagenet_shards.train.trainer.distributed import DistInfo
from imagenet_shards.train.trainer.engine import train_one_epoch
from imagenet_shards.train.trainer.prefetch import DeviceAugment, DevicePrefetcher, SyntheticBatches

SYNTHETIC_FILE = "synthetic.json"


def ceiling_key(config, info: DistInfo, res: int) -> dict:
    """What must match for a synthetic img/s to be a run's ceiling."""
    return {"arch": config.arch, "batch_size": config.batch_size, "res": res, "amp": config.amp,
            "channels_last": config.channels_last, "compile": config.compile,
            "world_size": info.world_size, "device": info.device.type}


def write_ceiling(run_dir: Path, key: dict, img_per_s: float) -> None:
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
    stats = train_one_epoch(model, batches, optimizer=optimizer, scheduler=None, scaler=scaler,
                            autocast=autocast, criterion=criterion, info=info, epoch=-1, step=step,
                            log_interval=log_interval, res=res, desc="ceiling")
    return stats.steady_img_per_s
