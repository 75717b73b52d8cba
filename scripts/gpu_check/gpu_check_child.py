"""How the GPU check starts its runs: forked from a warm process instead of a fresh interpreter.

multiprocessing's forkserver, with torch, torchvision and the trainer preloaded: every run (a
train-imagenet, a bench-loader, a probe) forks from a process that has already imported them
instead of importing them again, which costs ~5 s of CPU per run on a shared 2-core box (ten runs:
most of the CPU smoke) and ~2-3 s of the GPU call's budget. The server imports torch but never
touches CUDA (importing torch creates no CUDA context), so each forked run sets CUDA up itself, as
`python -m` would. Each run forces the `fork` start method (what train-imagenet's DataLoader workers
get in production; forked from a forkserver they would get forkserver) and leads a process group of
its own, which the check kills when the run ends or is killed, and which kills itself when the
check is gone (a SIGKILLed check, a device call cut at its timeout): no worker outlives its run. A run's
stdout and stderr go to its log file, and run-info.json beside it says what it ran with (start
method, the decoder `auto` resolved to inside it); its exit code is the entry point's return value. The check's two-rank DDP step starts its
ranks this way too, with the environment torchrun would give them (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT: what train-imagenet and env:// read): a torchrun launch
costs three fresh interpreters, and tests/train/trainer/test_trainer_ddp.py runs torchrun itself.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

PRELOAD = ["torch", "torchvision", "torch.utils.tensorboard", "imagenet_shards.train.trainer.cli",
           "imagenet_shards.train.trainer.run", "imagenet_shards.train.recipes", "imagenet_shards.train.bench.run",
           "imagenet_shards.train.loader.gpu_decode", "gpu_check_probe"]


def _run(entry: str, argv: list[str], log: str, env: dict, check_pid: int) -> None:
    os.setpgid(0, 0)  # a process group of its own: the check kills it, workers and all, when the run ends
    threading.Thread(target=_end_with, args=(check_pid,), daemon=True).start()
    # production's start method: a process forked from the forkserver has forkserver as its default,
    # so its DataLoader workers would start differently (and cost differently) from train-imagenet's
    multiprocessing.set_start_method("fork", force=True)
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    _write_run_info(Path(log).with_name("run-info.json"))
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
        """Fork a run of `entry` (module:function) with argv, `env` added to its environment. The run
        leads its own process group (its pid): end it, workers included, with `kill_group(proc.pid)`."""
        proc = self.ctx.Process(target=_run, args=(entry, [str(a) for a in argv], str(log), env or {}, os.getpid()),
                                daemon=False)
        proc.start()
        return proc


def noop() -> None:
    pass


def _write_run_info(path: Path) -> None:
    """What this run really runs with, read inside it: the start method its workers get and the
    JPEG decoder `auto` resolves to here (the turbo extension may have failed to import in this
    process, and then the loader uses Pillow whatever the check's own probe found)."""
    info = {"pid": os.getpid(), "pgid": os.getpgid(0), "start_method": multiprocessing.get_start_method()}
    try:
        from imagenet_shards.train.loader import decode
        info["decoder"] = decode.resolve_decoder("auto")
        info["turbo_libjpeg"] = getattr(decode._jpegcrop, "LIBJPEG_TURBO_VERSION", None)
    except Exception as e:  # noqa: BLE001 - said in the row instead of a decoder name
        info["decoder"] = f"unknown ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
    path.write_text(json.dumps(info, sort_keys=True))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _end_with(check_pid: int) -> None:
    """Kill this run's process group once the check is gone (SIGKILLed, or cut by the device call's
    timeout): forked from the forkserver, in a group of its own, nothing else would end it."""
    while _alive(check_pid):
        time.sleep(0.5)
    os.killpg(0, signal.SIGKILL)


def group_alive(pgid: int) -> list[int]:
    """The processes still in process group `pgid` (read from /proc; [] when none, or when /proc says nothing)."""
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(int(entry))
    return sorted(alive)


def kill_group(pgid: int, wait: float = 5.0) -> list[int]:
    """SIGKILL process group `pgid` (a run and its workers) and wait until it is gone; returns what is
    still there after `wait` seconds (a process in uninterruptible sleep), [] when all went."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nobody left in it
    deadline = time.monotonic() + wait
    while True:
        left = group_alive(pgid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _importable(name: str) -> bool:
    import importlib.util
    try:
        return importlib.util.find_spec(name.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False
