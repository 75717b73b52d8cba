"""The one process-pool helper: run independent jobs in worker processes, results as they finish.

Used by prepare-shards (one job = build a shard) and audit-shards (one job = audit a shard).
Workers are forked where the platform can (no re-import, the parent's storage options come along;
``storage.fs`` keeps forked children off the parent's connections) and die with the parent, so a
killed command never leaves workers writing behind its back. SIGINT and SIGTERM end a worker at
once and quietly (``interrupts.default_in_workers``): the parent decides. When the parent stops
early (an error, a signal, a caller that stops reading results), the jobs not started are
cancelled and the running ones killed, so it never waits for the rest of the work. With one
worker, jobs run in this process (no pool start-up; tracebacks stay simple).
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, Iterable, Iterator, Sequence

from imagenet_shards.pipeline.interrupts import default_in_workers


def default_workers() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def pool_size(workers: int | None) -> int:
    """The processes `workers` asks for (pipeline/console.py has the rule): None all cores, 0 or 1 this
    process alone; ValueError for a negative number (once it silently meant one)."""
    if workers is None:
        return default_workers()
    if workers < 0:
        raise ValueError(f"workers must be >= 0 (0: none, the work runs in this process), got {workers}")
    return max(1, workers)


def _worker_start() -> None:
    """Each worker's set-up: die with the parent, and on SIGINT/SIGTERM quietly."""
    default_in_workers()
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel the jobs not started and kill the running ones (their partial output is the caller's
    to remove), then wait for the workers to be gone."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14+
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())  # before shutdown() forgets them
    for process in processes:
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)
    for process in processes:
        process.join()


def run_jobs(fn: Callable, jobs: Sequence[tuple], *, workers: int | None = None) -> Iterator[tuple[int, object]]:
    """Yield ``(i, fn(*jobs[i]))`` for every job, in completion order.

    ``workers``: processes to use (`pool_size`: default all cores), never more than there are jobs;
    0 or 1 runs the jobs here, in order. An exception in a job propagates, and, like any early stop, cancels the
    jobs not started and kills the running ones (`_stop`)."""
    workers = max(1, min(pool_size(workers), len(jobs) or 1))
    if workers == 1:
        for i, args in enumerate(jobs):
            yield i, fn(*args)
        return
    pool = _pool(workers)
    try:
        futures = {pool.submit(fn, *args): i for i, args in enumerate(jobs)}
        for fut in as_completed(futures):
            yield futures[fut], fut.result()
    except BaseException:  # an error, Interrupted, or GeneratorExit from a caller that stopped reading
        _stop(pool)
        raise
    pool.shutdown(wait=True)


def run_stream(fn: Callable, jobs: Iterable[tuple], *, workers: int | None = None,
               ahead: int | None = None) -> Iterator[object]:
    """Yield ``fn(*job)`` for every job of an iterable, in the jobs' order, with at most ``ahead``
    (default 2 x workers) submitted and not yet yielded: for a stream of jobs too long to list, made
    while it is read (prepare's one pass over a .tar.gz). 1 worker runs them here. An early stop
    cancels and kills as in `run_jobs`."""
    workers = pool_size(workers)
    if workers == 1:
        for args in jobs:
            yield fn(*args)
        return
    ahead = ahead or 2 * workers
    pool = _pool(workers)
    try:
        pending: deque = deque()
        for args in jobs:
            pending.append(pool.submit(fn, *args))
            while len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BaseException:  # an error, Interrupted, or GeneratorExit from a caller that stopped reading
        _stop(pool)
        raise
    pool.shutdown(wait=True)


def _pool(workers: int) -> ProcessPoolExecutor:
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_start)
