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
running loss sums (`local_state`). Which file a run resumes from, and whether it may, is resume.py;
putting a checkpoint back into a run is restore.py.
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

from imagenet_shards.pipeline.storage.atomic import DiskFull, atomic_open, link_atomic, stale_temps, temp_owner
from imagenet_shards.pipeline.storage.retry import redact
from imagenet_shards.train.trainer.config import TrainConfig, TrainError
from imagenet_shards.train.trainer.distributed import DistInfo, gather_objects

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
    """Make `target` a copy of `source` atomically: a hard link where the filesystem has them.

    Nothing to do when `target` already is `source` (a save killed after its `previous <- latest`
    link leaves the two one file): linking again would end in a rename of one hard link over another
    of the same file, which POSIX makes a no-op that leaves the temp link behind for good."""
    if os.path.exists(target) and os.path.samefile(source, target):
        return Path(target)
    link_atomic(source, target)
    return Path(target)


def remove_stale_temps(out: str | os.PathLike) -> list[str]:
    """Remove the temp files our own writers (checkpoints, metrics.jsonl, recipe.json) left in the
    run folder `out` when a process was killed mid-write, unless their writer still runs; returns
    their names. A run folder is one run's, so these can only be a dead predecessor's."""
    removed = []
    for name in ("checkpoint-*.pt", "metrics.jsonl", "recipe.json"):
        for stale in stale_temps(out, name):
            owner = temp_owner(stale)
            if owner is not None and owner != os.getpid() and _alive(owner):
                continue
            Path(stale).unlink(missing_ok=True)
            removed.append(os.path.basename(stale))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


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


def _state(config: TrainConfig, info: DistInfo, parts: Parts, *, epoch: int, step: int, rngs: list,
           best: float | None, data_id: str | None) -> dict:
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "arch": config.arch,
        "num_classes": parts.num_classes, "epoch": epoch, "step": step, "world_size": info.world_size,
        "steps_per_epoch": parts.steps_per_epoch, "model": parts.raw.state_dict(),
        "optimizer": parts.optimizer.state_dict(), "scheduler": parts.scheduler.state_dict(),
        "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
        "ema": parts.ema.state_dict() if parts.ema is not None else None,
        "rng": rngs, "config": plain(saved_config(config)), "best_top1": best, "data_id": data_id,
    }


def _write(path: Path, state: dict) -> dict:
    """save_checkpoint, timed: {"path", "seconds", "bytes"}."""
    t0 = time.perf_counter()
    save_checkpoint(path, state)
    return {"path": str(path), "seconds": round(time.perf_counter() - t0, 3), "bytes": path.stat().st_size}


def save(config: TrainConfig, info: DistInfo, parts: Parts, epoch: int, step: int, result: dict,
         best_top1: float | None, data_id: str | None = None) -> tuple[float | None, dict | None]:
    """checkpoint-latest on rank 0 (every rank's RNG state gathered first; the one it replaces
    kept as checkpoint-previous, an earlier checkpoint-mid removed), and -best when val top-1 improves. Returns the best top-1 so far
    and, on rank 0, what the write cost ({"path", "seconds", "bytes"})."""
    rngs = gather_objects(info, rng_state(info.device))
    top1 = result.get(config.best_metric)  # the recipe's published figure (val_top1, ema_val_top1, val_real_top1)
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
            # a mid-epoch checkpoint is now behind this epoch end: --resume auto never takes it again
            (out / MID).unlink(missing_ok=True)
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


def supports_positions(loader) -> bool:
    """Whether a loader can say where it is (the CPU shard loader; not --gpu-decode or synthetic data)."""
    return hasattr(loader, "position") and hasattr(loader, "resume")


def rank_buffers(module: torch.nn.Module) -> dict:
    """This rank's buffers (BatchNorm statistics), which DDP does not keep equal within an epoch."""
    return {name: b.detach().cpu().clone() for name, b in module.named_buffers()}


def local_state(parts, prefetcher, batches: int, sums: list) -> dict:
    """This rank's share of a mid-epoch checkpoint after `batches` batches of the current iteration."""
    return {"loader": parts.train_loader.position(batches), "prefetch": prefetcher.rng_state(batches),
            "buffers": rank_buffers(parts.raw),
            "ema_buffers": rank_buffers(parts.ema.module) if parts.ema is not None else None,
            "sums": list(sums)}


def _stop_with(info: DistInfo, problem: str | None) -> None:
    """Every rank waits for rank 0's save and, if it failed, stops with its one line."""
    problems = [p for p in gather_objects(info, problem) if p]
    if problems:
        raise TrainError(problems[0])


def saved_config(config: TrainConfig) -> dict:
    """The config as checkpoints keep it: no credentials (URL secrets redacted, option values dropped)."""
    return {**asdict(config), "data": config.data and redact(config.data),
            "storage_option": [o.split("=", 1)[0] + "=" for o in config.storage_option]}


def plain(value):
    """Tuples to lists, recursively (dict values too): how a config is kept in a checkpoint, so it
    loads with weights_only=True, and how two configs are compared (resume.config_changes)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
