"""Atomic checkpoint files and the RNG states a resumed run needs.

A checkpoint is written to a temporary file in the same directory, fsynced, then renamed over
the old one (and the directory fsynced), so a kill at any moment leaves either the previous
checkpoint or the new one, never a torn file. Everything in it loads with
`torch.load(weights_only=True)`: tensors, numbers, strings, lists, dicts.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

FORMAT = "imagenet-shards-checkpoint"
FORMAT_VERSION = 1
LATEST = "checkpoint-latest.pt"
BEST = "checkpoint-best.pt"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def save_checkpoint(path: str | os.PathLike, state: dict) -> Path:
    """Write `state` to `path` atomically (temp file + fsync + rename + directory fsync)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.tmp-*"):  # left by a process killed mid-save
        stale.unlink(missing_ok=True)
    tmp = _temp_path(path)
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def link_checkpoint(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Make `target` a copy of `source` atomically: a hard link where the filesystem has them."""
    source, target = Path(source), Path(target)
    tmp = _temp_path(target)
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        import shutil
        shutil.copyfile(source, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    os.replace(tmp, target)
    _fsync_dir(target.parent)
    return target


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
