"""How the GPU check starts its runs: forked from a warm process instead of a fresh interpreter.

multiprocessing's forkserver, with torch, torchvision and the trainer preloaded: every run (a
train-imagenet, a bench-loader, a probe) forks from a process that has already imported them
instead of importing them again, which costs ~5 s of CPU per run on a shared 2-core box (ten runs:
most of the CPU smoke) and ~2-3 s of the GPU call's budget. The server imports torch but never
touches CUDA (importing torch creates no CUDA context), so each forked run sets CUDA up itself, as
`python -m` would; its DataLoader workers fork from it as usual. A run's stdout and stderr go to its
log file; its exit code is the entry point's return value. The check's two-rank DDP step starts its
ranks this way too, with the environment torchrun would give them (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT: what train-imagenet and env:// read): a torchrun launch
costs three fresh interpreters, and tests/train/trainer/test_trainer_ddp.py runs torchrun itself.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import sys
import threading

PRELOAD = ["torch", "torchvision", "torch.utils.tensorboard", "imagenet_shards.train.trainer.cli",
           "imagenet_shards.train.trainer.run", "imagenet_shards.train.recipes", "imagenet_shards.train.bench.run",
           "imagenet_shards.train.loader.gpu_decode", "gpu_check_probe"]


def _run(entry: str, argv: list[str], log: str, env: dict) -> None:
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    module, _, func = entry.partition(":")
    rc = getattr(importlib.import_module(module), func)(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(rc or 0)


class Runner:
    """Starts `module:function(argv)` runs from the forkserver (started on first use)."""

    def __init__(self):
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload([m for m in PRELOAD if _importable(m)])

    def warm(self) -> None:
        """Start the server (its imports) now, in the background of whatever comes next (the first
        start waits for the server's imports; a later one waits for this one)."""
        threading.Thread(target=lambda: self.ctx.Process(target=noop).start(), daemon=True).start()

    def start(self, entry: str, argv: list[str], log, env: dict | None = None) -> multiprocessing.Process:
        """Fork a run of `entry` (module:function) with argv, `env` added to its environment."""
        proc = self.ctx.Process(target=_run, args=(entry, [str(a) for a in argv], str(log), env or {}), daemon=False)
        proc.start()
        return proc


def noop() -> None:
    pass


def _importable(name: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(name.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False
