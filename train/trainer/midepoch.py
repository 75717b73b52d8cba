"""What a run needs to stop inside an epoch and continue there: each rank's share of a mid-epoch
checkpoint, the start of the resumed epoch, the epoch's data fingerprint and the stop line.

`run` calls these; `lifecycle` decides when; `checkpoint` writes and restores the files; the
loader's position is `loader.position`'s. A resumed epoch on the same world size and workers
continues every stream exactly (bit-identical weights); on another layout the rest of the epoch is
planned afresh over the samples not yet used (`ShardLoader.resume`) and the schedule is put where
the epoch's end lands on this run's steps/epoch, so later epochs are this layout's own.
"""

from __future__ import annotations

from pathlib import Path

from imagenet_shards.train.loader import fingerprint
from imagenet_shards.train.trainer import checkpoint as ckpt
from imagenet_shards.train.trainer.config import TrainConfig, TrainError
from imagenet_shards.train.trainer.distributed import DistInfo, gather_objects
from imagenet_shards.train.trainer.resume import config_changes, describe_position


def supports_positions(loader) -> bool:
    """Whether a loader can say where it is (the CPU shard loader; not --gpu-decode or synthetic data)."""
    return hasattr(loader, "position") and hasattr(loader, "resume")


def local_state(parts, prefetcher, batches: int, sums: list) -> dict:
    """This rank's share of a mid-epoch checkpoint after `batches` batches of the current iteration."""
    return {"loader": parts.train_loader.position(batches), "prefetch": prefetcher.rng_state(),
            "buffers": ckpt.rank_buffers(parts.raw),
            "ema_buffers": ckpt.rank_buffers(parts.ema.module) if parts.ema is not None else None,
            "sums": list(sums)}


def resume_epoch(state: dict, config: TrainConfig, info: DistInfo, parts, prefetcher) -> tuple[int, list, int, dict]:
    """Put the loader (and prefetcher) where a mid-epoch checkpoint left the epoch.

    Returns (epoch steps counted as done, this rank's loss sums so far, the global step, what
    changed, for the start record). TrainError (one line) where the rest cannot be continued."""
    epoch = int(state["epoch"])
    if not supports_positions(parts.train_loader):
        raise TrainError(f"a mid-epoch checkpoint needs the CPU loader to continue; drop --gpu-decode or resume "
                         f"from {Path(config.out) / ckpt.LATEST}")
    plan = state["loader_plan"]
    layout = {"world_size": [state["world_size"], info.world_size],
              "workers": [plan["workers"], max(1, config.workers)]}
    if layout["workers"][0] != layout["workers"][1] or layout["world_size"][0] != layout["world_size"][1]:
        if config.limit_batches:
            raise TrainError("a mid-epoch checkpoint cannot continue on another world size or --workers with "
                             "--limit-batches (which samples the cut epoch would still have used is not defined); "
                             "resume with the same layout, or without --limit-batches")
    try:
        summary = ckpt.restore_positions(state, info, parts.train_loader, prefetcher)
    except ValueError as e:  # PlanError and friends: one line
        raise TrainError(f"cannot continue epoch {epoch + 1} of {Path(config.out) / ckpt.MID}: {e}") from None
    ranks = state["ranks"]
    spe = parts.steps_per_epoch
    if summary["exact"]:
        epoch_step = int(state["epoch_step"])
        sums = list(ranks[info.rank]["sums"]) if state["world_size"] == info.world_size else [0.0, 0, 0]
        step = epoch * spe + epoch_step
    else:
        rest = len(parts.train_loader) // max(1, config.accumulate)
        epoch_step = max(0, spe - rest)  # the epoch ends on this run's step grid: later epochs are its own
        step = epoch * spe + epoch_step
        ckpt.set_schedule(parts, step)
        carried = [sum(r["sums"][i] for r in ranks) for i in range(3)]
        sums = carried if info.rank == 0 else [0.0, 0, 0]
    _, allowed = config_changes(state.get("config") or {}, ckpt._plain(ckpt.saved_config(config)))
    changed = {k: v for k, v in layout.items() if v[0] != v[1]}
    return epoch_step, sums, step, {"exact": summary["exact"], "samples_left": summary["samples_left"],
                                    "steps_left": len(parts.train_loader) // max(1, config.accumulate),
                                    "changed": changed,
                                    "settings_changed": allowed}


def epoch_fingerprint(info: DistInfo, train_loader, batches: int, val_loader) -> dict | None:
    """The epoch's data fingerprint over all ranks (and over an interruption): train from the loader
    positions after `batches` batches of this iteration, val from the last evaluation."""
    train = train_loader.position(batches)["fingerprint"] if supports_positions(train_loader) else None
    val = (getattr(val_loader, "stats", None) or {}).get("fingerprint") if val_loader is not None else None
    parts = gather_objects(info, (train, val))
    out = {}
    for i, split in enumerate(("train", "val")):
        got = [p[i] for p in parts]
        if all(g is not None for g in got):
            out[split] = fingerprint.as_record(fingerprint.combine(*got))
    return out or None


def stop_line(signal_name: str, *, epoch: int, epoch_step: int, steps_per_epoch: int, step: int,
              cost: dict | None, mid_supported: bool, out: Path) -> str:
    """The one line a run stopped by a signal prints: where it stopped, what was saved, how to go on."""
    where = (f"at epoch {epoch + 1}, step {epoch_step} of {steps_per_epoch} (global step {step})" if epoch_step
             else f"after epoch {epoch} (global step {step})")
    if cost is not None:
        saved = f"checkpoint {cost['path']} written ({cost['bytes'] / 2**20:.1f} MiB, {cost['seconds']:.1f} s)"
    elif epoch_step and not mid_supported:
        saved = (f"no mid-epoch checkpoint with this loader (--gpu-decode or --synthetic-data): --resume auto "
                 f"restarts epoch {epoch + 1} from {out / ckpt.LATEST}")
    else:
        saved = f"checkpoint {out / ckpt.LATEST} is the epoch's"
    return f"stopped by {signal_name} {where}: {saved}; to continue, run the same command with --resume auto"
