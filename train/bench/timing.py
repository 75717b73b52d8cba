"""Timing a stream of batches: wall clock, CPU time of the whole process tree, and an idle wait
between loaders that take turns on the same cores.

Standard library only, on purpose: besides our own bench, the peer scripts (``peer_*.py``)
import this file by path inside the FFCV and DALI environments, so every row of
``bench-loader --compare`` is timed by the same code.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterable


def process_tree_cpu_seconds() -> float | None:
    """CPU seconds (user + system) used so far by this process, its reaped children and its live
    descendants (DataLoader workers), from /proc; None where /proc is not available.

    On a shared or throttled machine wall-clock images/s depends on the neighbours; images per
    CPU-second does not (much), and equals images/s per fully used core."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        procs = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue  # exited meanwhile
            fields = stat[stat.rindex(")") + 2:].split()
            procs[int(entry)] = (int(fields[1]), [int(x) for x in fields[11:15]])
    except (OSError, ValueError, AttributeError):
        return None
    me = os.getpid()
    if me not in procs:
        return None
    utime, stime, cutime, cstime = procs[me][1]
    total, tree, frontier = utime + stime + cutime + cstime, {me}, [me]
    while frontier:
        kids = [pid for pid, (ppid, _) in procs.items() if ppid in frontier and pid not in tree]
        tree.update(kids)
        frontier = kids
        total += sum(procs[k][1][0] + procs[k][1][1] for k in kids)
    return total / tick


class BatchStream:
    """Endless ``(images, labels)`` batches from ``epochs(e)`` for e = 0, 1, ...; lets several
    loaders take turns."""

    def __init__(self, epochs: Callable[[int], Iterable]):
        self.epochs, self.epoch, self.it = epochs, 0, None

    def next(self):
        for _ in range(2):
            if self.it is None:
                self.it = iter(self.epochs(self.epoch))
                self.epoch += 1
            batch = next(self.it, None)
            if batch is not None:
                return batch
            self.it = None
        raise ValueError("the loader yields no batches: use a smaller --batch-size or more data")


def time_stream(stream: BatchStream, *, batches: int, warmup: int) -> dict:
    """Skip ``warmup`` batches (start-up, and whatever was prefetched while idle), then time
    ``batches``: wall clock, and CPU time of the whole process tree (``images_per_cpu_s``)."""
    if warmup < 1:
        raise ValueError("--warmup must be at least 1 (the first batch includes worker start-up)")
    for _ in range(warmup):
        stream.next()
    t0, c0 = time.perf_counter(), process_tree_cpu_seconds()
    images = sum(len(stream.next()[1]) for _ in range(batches))
    seconds = time.perf_counter() - t0
    c1 = process_tree_cpu_seconds()
    cpu = None if c0 is None or c1 is None else c1 - c0
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds, "cpu_seconds": cpu,
            "images_per_cpu_s": images / cpu if cpu else None}


def wait_until_idle(*, window: float = 0.25, busy: float = 0.1, timeout: float = 30.0) -> bool:
    """Block until the process tree uses less than ``busy`` of a core over ``window`` seconds; False
    on timeout or without /proc (then it just sleeps ``window``).

    A DataLoader keeps working after its reader stops: the worker finishes the batches it was
    asked to prefetch. When loaders take turns on the same cores, that work would land in the
    next loader's timing (both its wall clock and the tree's CPU time)."""
    c0 = process_tree_cpu_seconds()
    if c0 is None:
        time.sleep(window)
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(window)
        c1 = process_tree_cpu_seconds()
        if c1 is None:
            return False
        if c1 - c0 < busy * window:
            return True
        c0 = c1
    return False


def median(values: list[float]) -> float:
    """The median (mean of the two middle values for an even count)."""
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


def summarize(runs: list[dict]) -> dict:
    """Rounds -> ``images_per_s`` (median), ``images_per_s_best`` (the least disturbed round) and
    ``images_per_cpu_s`` (median; None without /proc). Medians are what the ratios use."""
    cpu = [r["images_per_cpu_s"] for r in runs if r.get("images_per_cpu_s")]
    return {"rounds": len(runs), "images": sum(r["images"] for r in runs),
            "images_per_s": median([r["images_per_s"] for r in runs]),
            "images_per_s_best": max(r["images_per_s"] for r in runs),
            "images_per_cpu_s": median(cpu) if len(cpu) == len(runs) else None}
