"""What the node offers one training process: usable cores, a default worker count, /dev/shm room.

These are decisions about one rank among the LOCAL_WORLD_SIZE that torchrun starts on a node, which
only the trainer knows; the loader just takes the numbers it is given.
"""

from __future__ import annotations

import math
import os

from imagenet_shards.pipeline.storage.units import human_bytes

SHM = "/dev/shm"
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"
# Batches a loader worker keeps in shared memory: its ring of reusable blocks (train/loader/slots.py:
# the DataLoader's prefetch_factor, 4, what both loaders are built with, + 3). The train and the val
# loader each have --workers such workers, persistent, so both rings stay mapped.
BATCHES_PER_WORKER = 4 + 3


def cgroup_cpu_limit(path: str = CGROUP_CPU_MAX) -> int | None:
    """Whole cores a cgroup v2 CPU quota allows (`docker run --cpus`), or None when unlimited/unknown."""
    try:
        with open(path) as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, int(quota) // int(period))


def usable_cores() -> int:
    """Cores this process may run on: the affinity mask, capped by a cgroup CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return max(1, min(cores, limit) if limit else cores)


def default_workers(cores: int, local_ranks: int, cuda: bool) -> int:
    """Loader workers per rank: the node's cores shared by its ranks, less one for the training
    thread and, on CUDA, one for the DataLoader's pin-memory thread; at least 1."""
    return max(1, cores // max(1, local_ranks) - (2 if cuda else 1))


def workers_note(workers: int, cores: int, local_ranks: int) -> str | None:
    """One line for the log when --workers asks for more loader processes than the node has cores
    (torch's DataLoader says so itself, once per loader and rank; the trainer silences that and
    prints this once), else None."""
    total = workers * max(1, local_ranks)
    if workers <= 0 or total <= cores:
        return None
    return (f"--workers {workers} per rank x {max(1, local_ranks)} rank(s) = {total} loader processes on {cores} "
            f"usable cores: they will compete for them (the default here would be "
            f"{default_workers(cores, local_ranks, cuda=False)} per rank on the CPU)")


def shm_free_bytes(path: str = SHM) -> int | None:
    """Free bytes in /dev/shm (where worker batches live), or None where there is no such mount."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def shm_error(*, free: int | None, workers: int, batch_bytes: int, local_ranks: int,
              val_batch_bytes: int = 0) -> str | None:
    """One line saying what to do if the batches in flight on this node would not fit in /dev/shm.

    Both loaders count: the val loader's workers are persistent too, so their rings (of
    `val_batch_bytes` batches) stay mapped all run, beside the train workers'. Too little shared
    memory (Docker gives 64 MB by default) otherwise shows up mid-epoch as a bus error in a worker,
    with no word about the cause."""
    if free is None or workers <= 0:
        return None
    per_worker = BATCHES_PER_WORKER * (batch_bytes + val_batch_bytes)
    need = max(1, local_ranks) * workers * per_worker
    if need <= free:
        return None
    suggest = math.ceil(need * 1.25 / 2**30)
    batches = f"{BATCHES_PER_WORKER} batches of {human_bytes(batch_bytes)}"
    if val_batch_bytes:
        batches = f"{batches} (train) + {BATCHES_PER_WORKER} of {human_bytes(val_batch_bytes)} (val)"
    return (f"/dev/shm has {human_bytes(free)} free, but {local_ranks} rank(s) x {workers} loader workers x "
            f"{batches} need about {human_bytes(need)}: give the container more shared memory (docker run "
            f"--shm-size={suggest}g, or a memory-backed emptyDir at /dev/shm on Kubernetes), or lower --workers "
            f"or --batch-size")
