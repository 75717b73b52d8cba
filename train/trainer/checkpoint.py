"""Atomic checkpoint files and the RNG states a resumed run needs.

A checkpoint is written through the one atomic writer (pipeline.storage.atomic: temp file beside
it, fsync, rename, directory fsync), so a kill at any moment leaves either the previous
checkpoint or the new one, never a torn file. Everything in it loads with
`torch.load(weights_only=True)`: tensors, numbers, strings, lists, dicts.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from imagenet_shards.pipeline.storage.atomic import atomic_open, link_atomic, stale_temps

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
