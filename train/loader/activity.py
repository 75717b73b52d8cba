"""What each loader worker is reading, and what the main process is waiting for: so a stall has a name.

A worker that stops delivering (SIGSTOP, a store that hangs, a decoder stuck in a loop) leaves the
main process blocked in the DataLoader's ``next()`` with nothing to say. Two small pieces make it
visible, both cheap enough for every batch:

* **The reading board** (``new_board``): one row per DataLoader worker in shared memory; the worker
  writes (shard index, sample index, monotonic time) for every record it reads (``reading``: three
  float stores into a numpy view, well under a microsecond against a millisecond of decoding).
  ``time.monotonic`` is CLOCK_MONOTONIC, one clock for every process of the machine.
* **The wait** (``Wait``): the main process marks when it enters and leaves the DataLoader's
  ``next()``; ``waited_for`` names the worker that batch is due from (the DataLoader hands batches
  over in order, so one worker holds up the rest).

``trainer/watch/stall.py`` reads both from a thread of its own: a warning naming the worker and
its shard when a wait passes N seconds, and the stop deadline.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Iterator, NamedTuple

import torch

from imagenet_shards.pipeline import storage
from imagenet_shards.train.loader.reading import SKIPPED

SHARD, INDEX, AT = range(3)  # the board's columns


def new_board(workers: int) -> torch.Tensor:
    """The shared reading board: (shard, sample index, monotonic time) per worker; shard -1: none yet."""
    board = torch.zeros((max(1, workers), 3), dtype=torch.float64)
    board[:, SHARD] = -1
    return board.share_memory_()


def reading(records: Iterator, board: torch.Tensor, row: int) -> Iterator:
    """``records``, writing each real record's (shard, index, time) into ``board[row]`` as it passes."""
    view = board.numpy()[row]
    clock = time.monotonic
    view[AT] = clock()
    for rec in records:
        if rec is not SKIPPED:
            view[SHARD], view[INDEX], view[AT] = rec.shard, rec.index, clock()
        yield rec


class Wait:
    """The main process's wait for the loader's next batch: ``since`` (monotonic seconds) while
    inside the DataLoader's ``next()``, else None; ``iterator`` the DataLoader iterator waited on."""

    def __init__(self):
        self.since: float | None = None
        self.iterator = None

    def around(self, iterator) -> Iterator:
        """``iterator``'s items, each ``next()`` marked as a wait."""
        self.iterator = iterator
        while True:
            self.since = time.monotonic()
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self.since = None
            yield item


class Stalled(NamedTuple):
    """The worker a wait is held up by: DataLoader worker id, its pid, the shard (redacted URL) and
    sample it read last (url None: nothing read yet), and seconds since that read."""

    worker: int
    pid: int | None
    url: str | None
    index: int
    idle_s: float

    def describe(self) -> str:
        pid = f" (pid {self.pid})" if self.pid else ""
        if self.url is None:
            return f"loader worker {self.worker}{pid} has read no sample yet"
        return (f"loader worker {self.worker}{pid} is reading {self.url} (its last sample read: #{self.index}, "
                f"{self.idle_s:.0f} s ago)")


def waited_for(wait: Wait) -> int | None:
    """The DataLoader worker the current wait is for (None: not waiting, in-process, or unknown).

    Reads the iterator's task table (``_task_info[_rcvd_idx]``: the index of the next batch in order
    and the worker it was sent to, a 1-tuple until its data arrives), the bookkeeping PyTorch's
    DataLoader has kept since 1.x; anything else there gives None."""
    it = wait.iterator
    try:
        info = it._task_info.get(it._rcvd_idx)
    except AttributeError:
        return None
    return int(info[0]) if isinstance(info, tuple) and len(info) == 1 else None


def worker_pid(wait: Wait, worker: int) -> int | None:
    try:
        return int(wait.iterator._workers[worker].pid)
    except (AttributeError, IndexError, TypeError):
        return None


def stalled(loader, now: float | None = None) -> Stalled | None:
    """Who the loader's current wait is for, and what it is reading (None: no wait, or not known)."""
    wait = getattr(loader, "wait", None)
    worker = waited_for(wait) if wait is not None and wait.since is not None else None
    if worker is None:
        return None
    shard, index, at = loader.dataset.activity[worker].tolist()
    now = time.monotonic() if now is None else now
    url = storage.redact(loader.dataset.shards[int(shard)].url) if shard >= 0 else None
    return Stalled(worker, worker_pid(wait, worker), url, int(index), max(0.0, now - at))


def kill_workers(loader) -> list[int]:
    """SIGKILL every live worker process of ``loader``'s iterations (a stop past its deadline: the
    stuck ones cannot be asked); returns their pids. SIGCHLD must not be the DataLoader's handler
    then (it would raise in the main thread for each): ``lifecycle`` resets it first."""
    killed = []
    for iterator in list(getattr(loader, "_iterators", ())):
        for w in getattr(iterator, "_workers", ()):
            if w.is_alive() and w.pid:
                try:
                    os.kill(w.pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                killed.append(w.pid)
    for iterator in list(getattr(loader, "_iterators", ())):
        for w in getattr(iterator, "_workers", ()):
            w.join(5)
    return killed


__all__ = ["Stalled", "Wait", "kill_workers", "new_board", "reading", "stalled", "waited_for"]
