"""Checkpoints: atomic files, what a run saves at an epoch end and mid-epoch, and restoring them.

A checkpoint is written through the one atomic writer (pipeline.storage.atomic: temp file beside
it, fsync, rename, directory fsync), so a kill at any moment leaves either the previous
checkpoint or the new one, never a torn file; signals that arrive during a save are only noted
(lifecycle.py), so they cannot cut it either. Everything in it loads with
`torch.load(weights_only=True)`: tensors, numbers, strings, lists, dicts. A run folder that
cannot be written (read-only, full) is found before the first step (`out_problem`); a save that
fails for want of room is one line naming the file, with the previous checkpoint intact (`save`).

Epoch ends write checkpoint-latest.pt (the one before it stays as checkpoint-previous.pt, a hard
link) and -best.pt. Mid-epoch checkpoints (a signal, `--checkpoint-every`) write checkpoint-mid.pt
with, besides the epoch-end content, what differs per rank inside an epoch: each rank's loader
position (loader/position.py), BatchNorm buffers, the prefetcher's random state and the epoch's
running loss sums. Which file a run resumes from, and whether it may, is resume.py.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from imagenet_shards.pipeline.storage.atomic import DiskFull, atomic_open, link_atomic, stale_temps
from imagenet_shards.pipeline.storage.retry import redact
from imagenet_shards.train.trainer import resume
from imagenet_shards.train.trainer.config import TrainConfig, TrainError
from imagenet_shards.train.trainer.distributed import DistInfo, gather_objects, print0

if TYPE_CHECKING:
    from imagenet_shards.train.trainer.build import Parts

FORMAT = "imagenet-shards-checkpoint"
FORMAT_VERSION = 1
LATEST = "checkpoint-latest.pt"
PREVIOUS = "checkpoint-previous.pt"
MID = "checkpoint-mid.pt"
BEST = "checkpoint-best.pt"


def save_checkpoint(path: str | os.PathLike, state: dict) -> Path:
    """Write `state` to `path` atomically (temp file + fsync + rename + directory fsync)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in stale_temps(path.parent, path.name):  # left by a process killed mid-save
        Path(stale).unlink(missing_ok=True)
    with atomic_open(path) as f:
        torch.save(state, f)
    return path


def link_checkpoint(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Make `target` a copy of `source` atomically: a hard link where the filesystem has them."""
    link_atomic(source, target)
    return Path(target)


def load_checkpoint(path: str | os.PathLike, mmap: bool = False) -> dict:
    """Load a checkpoint onto the CPU (``mmap``: tensors read when used); raises ValueError if the
    file is not one of ours, and torch's error if it is torn or truncated."""
    state = torch.load(Path(path), map_location="cpu", weights_only=True, mmap=mmap)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not an imagenet-shards checkpoint")
    if state.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path} has checkpoint format_version {state.get('format_version')}, "
                         f"this trainer reads {FORMAT_VERSION}")
    return state


def state_dict_sha256(module: torch.nn.Module) -> str:
    """sha256 over a module's state dict (names, dtypes, shapes, bytes) in key order: equal
    fingerprints mean bit-identical weights and buffers (e.g. across DDP ranks or a resumed run)."""
    import hashlib
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def rng_state(device: torch.device) -> dict:
    """This process's python, numpy, torch (and CUDA) RNG states, in weights_only-safe types."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict, device: torch.device) -> None:
    """Inverse of `rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


# ----------------------------------------------------------------------------- a run's checkpoints

def out_problem(out: str | os.PathLike) -> str | None:
    """Why the run folder cannot be written (one line saying what to do), or None. A nameless file
    is made and dropped in it (or, while it does not exist yet, in the folder it would be made in:
    nothing is created), so a read-only or full disk stops the run before the first step rather
    than with a traceback at the first record or checkpoint."""
    out = Path(out)
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"cannot write to --out {out}: {probe} is a file, not a folder; give another --out"
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        why = e.strerror or str(e)
        return f"cannot write to --out {out}: {why[:1].lower() + why[1:]}; give an --out you can write to"
    return None


def _save_problem(path: Path, error: OSError) -> str:
    """One line for a checkpoint that could not be written: the file, why, what to do, what is kept."""
    kept = f"the previous {path.name} is intact" if path.exists() else "no checkpoint was saved before"
    if isinstance(error, DiskFull):
        return (f"{error}: {kept}; free space there (or copy {path.parent} to a disk with room and use that as "
                "--out), then continue with --resume auto")
    return f"cannot save checkpoint {path}: {error.strerror or error}; {kept}"


def resume_state(config: TrainConfig, num_classes: int,
                 data_id: str | None = None) -> tuple[dict | None, Path | None, list[str]]:
    """The checkpoint `--resume` names, loaded and checked against this run, and the warnings to
    print (a torn file passed over). (None, None, []) without one; `--resume auto` with no
    checkpoint yet starts from scratch."""
    if not config.resume:
        return None, None, []
    out = Path(config.out)
    notes: list[str] = []
    if config.resume == "auto":
        state, path, notes = resume.pick([out / MID, out / LATEST, out / PREVIOUS],
                                         lambda p: load_checkpoint(p, mmap=True))
        if state is None:
            if notes:
                raise TrainError(f"--resume auto: no checkpoint in {out} can be loaded: {'; '.join(notes)}")
            if config.eval_only:
                raise TrainError(f"--resume auto: no checkpoint at {out / LATEST}")
            return None, None, []
    else:
        path = Path(config.resume)
        if not path.exists():
            raise TrainError(f"--resume {config.resume}: no checkpoint at {path}")
        try:
            state = load_checkpoint(path, mmap=True)
        except Exception as e:  # torn or foreign file: say which and why
            raise TrainError(f"cannot load checkpoint {path}: {e} (--resume auto falls back to the run's "
                             f"previous checkpoint)") from None
    if state["arch"] != config.arch or state["num_classes"] != num_classes:
        raise TrainError(f"checkpoint {path} is --arch {state['arch']} with {state['num_classes']} classes, "
                         f"this run is --arch {config.arch} with {num_classes} classes "
                         f"(use the same --arch/--data, or a new --out)")
    if state.get("epoch_step") and not config.eval_only:
        problem = resume.continuation_problem(state, _plain(saved_config(config)), data_id, path)
        if problem:
            raise TrainError(problem)
    return state, path, notes


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


def rank_buffers(module: torch.nn.Module) -> dict:
    """This rank's buffers (BatchNorm statistics), which DDP does not keep equal within an epoch."""
    return {name: b.detach().cpu().clone() for name, b in module.named_buffers()}


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


def _state(config: TrainConfig, info: DistInfo, parts: Parts, *, epoch: int, step: int, rngs: list,
           best: float | None, data_id: str | None) -> dict:
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "arch": config.arch,
        "num_classes": parts.num_classes, "epoch": epoch, "step": step, "world_size": info.world_size,
        "steps_per_epoch": parts.steps_per_epoch, "model": parts.raw.state_dict(),
        "optimizer": parts.optimizer.state_dict(), "scheduler": parts.scheduler.state_dict(),
        "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
        "ema": parts.ema.state_dict() if parts.ema is not None else None,
        "rng": rngs, "config": _plain(saved_config(config)), "best_top1": best, "data_id": data_id,
    }


def _write(path: Path, state: dict) -> dict:
    """save_checkpoint, timed: {"path", "seconds", "bytes"}."""
    t0 = time.perf_counter()
    save_checkpoint(path, state)
    return {"path": str(path), "seconds": round(time.perf_counter() - t0, 3), "bytes": path.stat().st_size}


def save(config: TrainConfig, info: DistInfo, parts: Parts, epoch: int, step: int, result: dict,
         best_top1: float | None, data_id: str | None = None) -> tuple[float | None, dict | None]:
    """checkpoint-latest on rank 0 (every rank's RNG state gathered first; the one it replaces
    kept as checkpoint-previous), and -best when val top-1 improves. Returns the best top-1 so far
    and, on rank 0, what the write cost ({"path", "seconds", "bytes"})."""
    rngs = gather_objects(info, rng_state(info.device))
    top1 = result.get("val_top1")
    is_best = top1 is not None and (best_top1 is None or top1 > best_top1)
    best = top1 if is_best else best_top1
    cost = problem = None
    if info.is_main:
        state = {**_state(config, info, parts, epoch=epoch, step=step, rngs=rngs, best=best, data_id=data_id),
                 "metrics": result}
        out = Path(config.out)
        target = out / LATEST
        try:
            if target.exists():
                link_checkpoint(target, out / PREVIOUS)  # the fallback if the new one is ever damaged
            cost = _write(target, state)
            if is_best:
                target = out / BEST
                link_checkpoint(out / LATEST, target)
        except OSError as e:  # DiskFull (also under torch.save's RuntimeError), EROFS, EACCES...
            problem = _save_problem(target, e)
    _stop_with(info, problem)
    return best, cost


def save_mid(config: TrainConfig, info: DistInfo, parts: Parts, *, epoch: int, epoch_step: int, step: int,
             local: dict, loader_plan: dict, best_top1: float | None, data_id: str | None) -> dict | None:
    """checkpoint-mid on rank 0: the epoch-end content at `epoch_step` steps into `epoch`, plus
    every rank's `local` state (loader position, buffers, prefetcher RNG, loss sums; gathered
    here). Returns, on rank 0, what the write cost."""
    gathered = gather_objects(info, {"rng": rng_state(info.device), **local})
    cost = problem = None
    if info.is_main:
        state = {**_state(config, info, parts, epoch=epoch, step=step, rngs=[g.pop("rng") for g in gathered],
                          best=best_top1, data_id=data_id),
                 "epoch_step": epoch_step, "loader_plan": loader_plan, "ranks": gathered}
        try:
            cost = _write(Path(config.out) / MID, state)
        except OSError as e:
            problem = _save_problem(Path(config.out) / MID, e)
    _stop_with(info, problem)
    return cost


def _stop_with(info: DistInfo, problem: str | None) -> None:
    """Every rank waits for rank 0's save and, if it failed, stops with its one line."""
    problems = [p for p in gather_objects(info, problem) if p]
    if problems:
        raise TrainError(problems[0])


def saved_config(config: TrainConfig) -> dict:
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
