"""Memory that creeps: what the run's processes hold at each epoch end, and a watch that warns once.

A leak in a training run (references kept per batch or per epoch: a growing list of losses, a
cache without a bound, a worker holding every sample it decoded) shows as resident memory that grows
epoch after epoch until the node's OOM killer ends the run, hours in. `epoch_memory` reads, from
/proc, the main process's resident set (RSS) and its child processes' (the DataLoader workers')
proportional set (PSS: a page shared by the forked workers counts 1/N in each, so the sum is what
they really hold; their RSS would count the parent's pages once per worker). `MemoryWatch` compares
each epoch with the second one of the run (the first still starts workers and fills caches) and
warns once when either figure has grown by more than 10 %. A change in the number of workers (the
val loader's start after the first evaluation that `--eval-every` schedules) is a new set of
processes, not growth: the comparison starts again from that epoch.
"""

from __future__ import annotations

import os

from imagenet_shards.train.report.records import GROWTH_LIMIT

GIB = 2**30
WATCHED = (("main_rss_gib", "the main process's RSS"), ("workers_pss_gib", "the loader workers' PSS"))


def _kib(path: str, field: str) -> int | None:
    """A `Field:  N kB` line of a /proc file, in KiB (None if unreadable)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def child_pids(pid: int | None = None) -> list[int]:
    """The live child processes of `pid` (default: this one), from /proc/PID/task/*/children."""
    pid = os.getpid() if pid is None else pid
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
        except (OSError, ValueError):
            continue
    return sorted(set(kids))


def epoch_memory() -> dict:
    """{"main_rss_gib", "workers", "workers_pss_gib"} now; a figure /proc cannot give is None
    (workers_pss_gib is 0.0 without workers)."""
    rss = _kib("/proc/self/status", "VmRSS")
    kids = child_pids()
    pss = [_kib(f"/proc/{k}/smaps_rollup", "Pss") for k in kids]
    pss = [p for p in pss if p is not None]  # a worker that exited meanwhile
    return {"main_rss_gib": None if rss is None else round(rss * 1024 / GIB, 4), "workers": len(pss),
            "workers_pss_gib": round(sum(pss) * 1024 / GIB, 4) if pss or not kids else None}


class MemoryWatch:
    """Warns (once per run) when memory at an epoch end exceeds the run's second epoch by more than
    `limit`. Feed it every epoch's `epoch_memory()`; `observe` returns the warning line, or None."""

    def __init__(self, limit: float = GROWTH_LIMIT):
        self.limit = limit
        self.seen = 0
        self.base: dict | None = None
        self.warned = False

    def observe(self, epoch: int, memory: dict) -> str | None:
        """`epoch` (0-based) and its `epoch_memory()` figures."""
        self.seen += 1
        rebase = self.base is not None and memory.get("workers") != self.base.get("workers")
        if self.seen == 2 or rebase:
            self.base = dict(memory, epoch=epoch)
            return None
        if self.base is None or self.warned:
            return None
        grown = [(what, self.base[key], memory[key]) for key, what in WATCHED
                 if self.base.get(key) and memory.get(key) is not None
                 and memory[key] > self.base[key] * (1 + self.limit)]
        if not grown:
            return None
        self.warned = True
        parts = "; ".join(f"{what} {a:.2f} -> {b:.2f} GiB (+{100 * (b / a - 1):.0f} %)" for what, a, b in grown)
        return (f"warning: memory grew from epoch {self.base['epoch'] + 1} to epoch {epoch + 1}: {parts}; memory "
                f"that keeps growing ends in the OOM killer: look for references kept per step or epoch "
                f"(docs/training.md, 'Memory')")


__all__ = ["GROWTH_LIMIT", "MemoryWatch", "child_pids", "epoch_memory"]
