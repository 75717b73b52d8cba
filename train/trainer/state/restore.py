"""Putting a checkpoint back into a run: the model, optimizer, schedule and per-rank state
(`restore`), and, for a mid-epoch checkpoint, the loader and prefetcher where it left the epoch
(`resume_epoch`).

resume.py chose the file; checkpoint.py wrote it; the loader's position is `loader.position`'s. A
resumed epoch on the same world size and workers continues every stream exactly (bit-identical
weights); on another layout the rest of the epoch is planned afresh over the samples not yet used
(`ShardLoader.resume`) and the schedule is put where the epoch's end lands on this run's
steps/epoch, so later epochs are this layout's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from imagenet_shards.train.trainer.config import TrainConfig, TrainError
from imagenet_shards.train.trainer.distributed import DistInfo, print0
from imagenet_shards.train.trainer.state.checkpoint import (LATEST, MID, plain, restore_rng_state, saved_config,
                                                           supports_positions)
from imagenet_shards.train.trainer.state.resume import config_changes

if TYPE_CHECKING:
    from imagenet_shards.train.trainer.build import Parts


def restore(parts: Parts, state: dict, path: Path, config: TrainConfig, info: DistInfo) -> int:
    """Load a checkpoint into the built parts; returns the global step to continue from. A
    mid-epoch checkpoint's per-rank state (buffers, RNG) is restored here too; its loader and
    prefetcher positions are `restore_positions`'s, once the epoch is set."""
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
    same_world = state["world_size"] == info.world_size
    ranks = state.get("ranks")
    if ranks:  # mid-epoch: what differs per rank inside an epoch
        _load_buffers(parts.raw, [r["buffers"] for r in ranks], info.rank if same_world else None)
        if parts.ema is not None and ranks[0].get("ema_buffers") is not None:
            _load_buffers(parts.ema.module, [r["ema_buffers"] for r in ranks], info.rank if same_world else None)
    # Position and lr come from this run (epoch x its steps/epoch, its --lr), so a run resumed on
    # another world size continues on schedule; an unchanged run gets exactly the saved values.
    step = epoch * parts.steps_per_epoch
    if ranks and same_world and state.get("steps_per_epoch") == parts.steps_per_epoch:
        step += int(state["epoch_step"])
    set_schedule(parts, step)
    if same_world:
        restore_rng_state(state["rng"][info.rank], info.device)
    elif not ranks:
        print0(info, f"warning: resuming a {state['world_size']}-process checkpoint with {info.world_size} "
                     f"processes: the global batch, the default lr and the data order differ from an "
                     f"uninterrupted run; the schedule continues from epoch {epoch}")
    return step


def set_schedule(parts: Parts, step: int) -> None:
    """Put the lr schedule at global step `step` of this run (its steps/epoch, its --lr)."""
    optimizer, scheduler = parts.optimizer, parts.scheduler
    scheduler.last_epoch = step
    scheduler.base_lrs = [parts.lr] * len(optimizer.param_groups)
    for group, factor in zip(optimizer.param_groups, [f(step) for f in scheduler.lr_lambdas]):
        group["initial_lr"] = parts.lr
        group["lr"] = parts.lr * factor
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]


def _load_buffers(module: torch.nn.Module, saved: list[dict], rank: int | None) -> None:
    """`rank`'s saved buffers, or (another world size) their mean over the saved ranks (integer
    buffers: rank 0's), as the epoch end would have made them."""
    with torch.no_grad():
        for name, buf in module.named_buffers():
            if rank is not None:
                value = saved[rank][name]
            elif buf.is_floating_point():
                value = sum(s[name].double() for s in saved) / len(saved)
            else:
                value = saved[0][name]
            buf.copy_(value.to(buf.dtype))


def restore_positions(state: dict, info: DistInfo, train_loader, prefetcher) -> dict:
    """Set the loader (and, same world size, the prefetcher's random state) to a mid-epoch
    checkpoint's position; returns the loader's summary (`ShardLoader.resume`)."""
    ranks = state["ranks"]
    summary = train_loader.resume(state["loader_plan"], [r["loader"] for r in ranks])
    if state["world_size"] == info.world_size and ranks[info.rank].get("prefetch") is not None:
        prefetcher.load_rng_state(ranks[info.rank]["prefetch"])
    return summary




def resume_epoch(state: dict, config: TrainConfig, info: DistInfo, parts, prefetcher) -> tuple[int, list, int, dict]:
    """Put the loader (and prefetcher) where a mid-epoch checkpoint left the epoch.

    Returns (epoch steps counted as done, this rank's loss sums so far, the global step, what
    changed, for the start record). TrainError (one line) where the rest cannot be continued."""
    epoch = int(state["epoch"])
    if not supports_positions(parts.train_loader):
        raise TrainError(f"a mid-epoch checkpoint needs the CPU loader to continue; drop --gpu-decode or resume "
                         f"from {Path(config.out) / LATEST}")
    plan = state["loader_plan"]
    layout = {"world_size": [state["world_size"], info.world_size],
              "workers": [plan["workers"], max(1, config.workers)]}
    if layout["workers"][0] != layout["workers"][1] or layout["world_size"][0] != layout["world_size"][1]:
        if config.limit_batches:
            raise TrainError("a mid-epoch checkpoint cannot continue on another world size or --workers with "
                             "--limit-batches (which samples the cut epoch would still have used is not defined); "
                             "resume with the same layout, or without --limit-batches")
    try:
        summary = restore_positions(state, info, parts.train_loader, prefetcher)
    except ValueError as e:  # PlanError and friends: one line
        raise TrainError(f"cannot continue epoch {epoch + 1} of {Path(config.out) / MID}: {e}") from None
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
        set_schedule(parts, step)
        carried = [sum(r["sums"][i] for r in ranks) for i in range(3)]
        sums = carried if info.rank == 0 else [0.0, 0, 0]
    _, allowed = config_changes(state.get("config") or {}, plain(saved_config(config)))
    changed = {k: v for k, v in layout.items() if v[0] != v[1]}
    return epoch_step, sums, step, {"exact": summary["exact"], "samples_left": summary["samples_left"],
                                    "steps_left": len(parts.train_loader) // max(1, config.accumulate),
                                    "changed": changed,
                                    "settings_changed": allowed}
