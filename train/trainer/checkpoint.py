"""Checkpoints: atomic files, what a run saves at an epoch end, and how a run resumes from one.

A checkpoint is written through the one atomic writer (pipeline.storage.atomic: temp file beside
it, fsync, rename, directory fsync), so a kill at any moment leaves either the previous
checkpoint or the new one, never a torn file. Everything in it loads with
`torch.load(weights_only=True)`: tensors, numbers, strings, lists, dicts. Checkpoints are taken
only at epoch ends, so a resume starts at an epoch boundary and recomputes the schedules from the
epoch number alone. A run folder that cannot be written (read-only, full) is found before the first
step (`out_problem`); a save that fails for want of room is one line naming the file, with the
previous checkpoint intact (`save`).
"""

from __future__ import annotations

import os
import random
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from imagenet_shards.pipeline.storage.atomic import DiskFull, atomic_open, link_atomic, stale_temps
from imagenet_shards.pipeline.storage.retry import redact
from imagenet_shards.train.trainer.config import TrainConfig, TrainError
from imagenet_shards.train.trainer.distributed import DistInfo, gather_objects, print0

if TYPE_CHECKING:
    from imagenet_shards.train.trainer.build import Parts

FORMAT = "imagenet-shards-checkpoint"
FORMAT_VERSION = 1
LATEST = "checkpoint-latest.pt"
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


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Load a checkpoint onto the CPU; raises ValueError if the file is not one of ours."""
    state = torch.load(Path(path), map_location="cpu", weights_only=True)
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
    kept = "the previous checkpoint-latest.pt is intact" if path.exists() else "no checkpoint was saved before"
    if isinstance(error, DiskFull):
        return (f"{error}: {kept}; free space there (or copy {path.parent} to a disk with room and use that as "
                "--out), then continue with --resume auto")
    return f"cannot save checkpoint {path}: {error.strerror or error}; {kept}"


def resume_state(config: TrainConfig, num_classes: int) -> tuple[dict | None, Path | None]:
    """The checkpoint `--resume` names, loaded and checked against this run (None, None without one;
    `--resume auto` with no checkpoint yet starts from scratch)."""
    if not config.resume:
        return None, None
    path = Path(config.out) / LATEST if config.resume == "auto" else Path(config.resume)
    if not path.exists():
        if config.resume == "auto" and not config.eval_only:
            return None, None
        raise TrainError(f"--resume {config.resume}: no checkpoint at {path}")
    try:
        state = load_checkpoint(path)
    except Exception as e:  # torn or foreign file: say which and why
        raise TrainError(f"cannot load checkpoint {path}: {e}") from None
    if state["arch"] != config.arch or state["num_classes"] != num_classes:
        raise TrainError(f"checkpoint {path} is --arch {state['arch']} with {state['num_classes']} classes, "
                         f"this run is --arch {config.arch} with {num_classes} classes "
                         f"(use the same --arch/--data, or a new --out)")
    return state, path


def restore(parts: Parts, state: dict, path: Path, config: TrainConfig, info: DistInfo) -> int:
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
        restore_rng_state(state["rng"][info.rank], info.device)
    else:
        print0(info, f"warning: resuming a {state['world_size']}-process checkpoint with {info.world_size} "
                     f"processes: the global batch, the default lr and the data order differ from an "
                     f"uninterrupted run; the schedule continues from epoch {epoch}")
    return step


def save(config: TrainConfig, info: DistInfo, parts: Parts, epoch: int, step: int, result: dict,
         best_top1: float | None) -> float | None:
    """checkpoint-latest on rank 0 (every rank's RNG state gathered first), and -best when val
    top-1 improves. Returns the best top-1 so far."""
    rngs = gather_objects(info, rng_state(info.device))
    top1 = result.get("val_top1")
    is_best = top1 is not None and (best_top1 is None or top1 > best_top1)
    best = top1 if is_best else best_top1
    problem = None
    if info.is_main:
        state = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "arch": config.arch,
            "num_classes": parts.num_classes, "epoch": epoch, "step": step, "world_size": info.world_size,
            "model": parts.raw.state_dict(), "optimizer": parts.optimizer.state_dict(),
            "scheduler": parts.scheduler.state_dict(),
            "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
            "ema": parts.ema.state_dict() if parts.ema is not None else None,
            "rng": rngs, "config": _plain(saved_config(config)), "best_top1": best, "metrics": result,
        }
        target = Path(config.out) / LATEST
        try:
            latest = save_checkpoint(target, state)
            if is_best:
                target = Path(config.out) / BEST
                link_checkpoint(latest, target)
        except OSError as e:  # DiskFull (also under torch.save's RuntimeError), EROFS, EACCES...
            problem = _save_problem(target, e)
    problems = [p for p in gather_objects(info, problem) if p]  # every rank waits for the save, and stops with it
    if problems:
        raise TrainError(problems[0])
    return best


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
