"""The loader's DataLoader workers: signals left to the main process, shut down before the interpreter
exits, and what each one's reading from the store cost."""

from __future__ import annotations

import atexit
import signal
import weakref

import torch

from imagenet_shards.pipeline.interrupts import RUN_SIGNALS


def quiet_worker(worker_id: int) -> None:
    """DataLoader worker start-up: leave SIGINT, SIGTERM and SIGUSR1 to the main process.

    Ctrl-C reaches the whole process group and Slurm signals every process of a job step; a worker
    that died of it would end the epoch before the main process could reach its agreed stop step
    and checkpoint. Workers still exit when the main process closes the loader or dies (the
    DataLoader's own watchdog), on `ShardLoader.close()`, and at interpreter exit: every live
    iterator's workers are shut down first by our atexit hook, since multiprocessing's own exit hook
    would SIGTERM them, which they ignore, and wait for ever (even for an iteration left unfinished)."""
    for signum in RUN_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


_LIVE_ITERATORS: weakref.WeakSet = weakref.WeakSet()  # every ShardLoader's worker iterators, process-wide
_OUR_WORKERS: weakref.WeakSet = weakref.WeakSet()  # their worker processes (multiprocessing holds them until joined)


def track(iterator) -> None:
    """Remember a DataLoader iterator and its worker processes, for the exit hook."""
    _LIVE_ITERATORS.add(iterator)
    _OUR_WORKERS.update(getattr(iterator, "_workers", ()))


def shutdown(iterator) -> None:
    """Stop an iterator's workers (a no-op for one without workers)."""
    if hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()


@atexit.register  # registered after torch's and multiprocessing's exit hooks, so it runs before them
def _stop_workers_at_exit() -> None:
    for iterator in list(_LIVE_ITERATORS):
        shutdown(iterator)
    # A worker that did not stop when asked (torch then sends SIGTERM, which ours ignore) would be
    # waited for by multiprocessing's exit hook for ever: kill what is left of ours.
    for worker in list(_OUR_WORKERS):
        if worker.is_alive():
            worker.kill()
            worker.join(5)


STORE_FIELDS = ("bytes", "requests", "wait_s", "readahead_high_bytes")  # a worker's row of ShardDataset.store


def store_summary(store: torch.Tensor, seconds: float | None = None) -> dict:
    """``ShardLoader.store_stats`` from the workers' rows of counters (``STORE_FIELDS``)."""
    rows = [dict(zip(STORE_FIELDS, (int(b), int(r), float(w), int(h)))) for b, r, w, h in store.tolist()]
    total = {k: sum(r[k] for r in rows) for k in STORE_FIELDS[:3]}
    total["readahead_high_bytes"] = max(r["readahead_high_bytes"] for r in rows)
    if seconds:
        total.update(bytes_per_s=total["bytes"] / seconds, requests_per_s=total["requests"] / seconds,
                     wait_fraction=total["wait_s"] / (seconds * len(rows)))
    return {**total, "workers": rows}


def publishing(records, counters, store: torch.Tensor, row: int):
    """`records`, copying a worker's read ``counters`` (storage.ReadCounters) into ``store[row]``
    whenever they change, and once more at the end."""
    seen = -1

    def publish():
        store[row] = torch.tensor([counters.bytes, counters.requests, counters.wait_s, counters.held_high],
                                  dtype=torch.float64)

    try:
        for rec in records:
            if counters.requests != seen:
                seen = counters.requests
                publish()
            yield rec
    finally:
        publish()
