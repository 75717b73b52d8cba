"""The epoch plan: which samples each worker of each rank reads and batches in one epoch. Pure functions.

A pure function of (shard sizes, seed, epoch, rank, world size, workers, batch size, repeats),
tested for its invariants (equal full batches per train rank, disjoint ranges, every eval sample
exactly once; with repeated augmentation, each sample at most `repeats` times and on distinct
ranks): see ``epoch_plan`` and docs/loader.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class Piece(NamedTuple):
    shard: int   # index into the shard list
    start: int   # first sample (0-based, within the shard)
    stop: int    # one past the last


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker of one rank reads and yields in one epoch.

    train: ``len(batch_sizes)`` full batches of good samples drawn from ``pieces``; pieces
    hold ``spares`` extra samples (the rank's share of the dropped tail) used only to replace
    bad samples. eval: ``batch_sizes[i]`` = the next that many samples of ``pieces`` in order.
    Repeated augmentation (``repeated_plan``): each sample of ``pieces`` is emitted ``repeat``
    times in a row after the shuffle (the first one ``head`` times), and ``shuffle_key`` replaces
    the rank in the shuffle seed, so ranks that read the same samples shuffle them alike.
    """
    pieces: tuple[Piece, ...]
    batch_sizes: tuple[int, ...]
    spares: int = 0
    repeat: int = 1
    head: int = 1
    shuffle_key: int | None = None

    @property
    def num_samples(self) -> int:
        return sum(self.batch_sizes)


def shard_order(num_shards: int, seed: int, epoch: int) -> list[int]:
    """The train epoch's shard order: a permutation that is a pure function of (seed, epoch)."""
    return np.random.default_rng([seed, epoch, 0x5EED]).permutation(num_shards).tolist()


def _even_split(n: int, parts: int) -> list[int]:
    return [n // parts + (i < n % parts) for i in range(parts)]


def _pieces(sizes: list[int], order: list[int], start: int, stop: int) -> tuple[Piece, ...]:
    """Sample range [start, stop) of the sequence "shards in ``order``" as per-shard pieces."""
    out, pos = [], 0
    for s in order:
        lo, hi = max(start, pos), min(stop, pos + sizes[s])
        if lo < hi:
            out.append(Piece(s, lo - pos, hi - pos))
        pos += sizes[s]
        if pos >= stop:
            break
    return tuple(out)


def epoch_plan(sizes: list[int], *, batch_size: int, rank: int, world_size: int, workers: int,
               train: bool, seed: int = 0, epoch: int = 0, repeats: int = 1) -> list[WorkerPlan]:
    """Per-worker plans of one rank for one epoch (``workers`` >= 1; use 1 for in-process loading).

    train: shards in ``shard_order(seed, epoch)``; every rank gets ``floor(floor(N/world)/B)``
    full batches, cut as contiguous ranges of the sequence (rank-major, then worker); the samples
    left over are the ranks' spares (dropped unless they replace bad samples). Each sample is in
    at most one range. eval: manifest order, rank r gets ``[floor(rN/world), floor((r+1)N/world))``
    cut into batches of B (the last one partial) shared out to workers; every sample exactly once.
    """
    if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size or workers < 1:
        raise ValueError(f"bad plan arguments: batch_size={batch_size} rank={rank} "
                         f"world_size={world_size} workers={workers}")
    N = sum(sizes)
    if train and repeats > 1:
        return repeated_plan(sizes, batch_size=batch_size, rank=rank, world_size=world_size, workers=workers,
                             seed=seed, epoch=epoch, repeats=repeats)
    if train:
        order = shard_order(len(sizes), seed, epoch)
        nb = (N // world_size) // batch_size
        spare = _even_split(N - world_size * nb * batch_size, world_size)
        rank_start = rank * nb * batch_size + sum(spare[:rank])
        worker_batches = _even_split(nb, workers)
        active = sum(1 for b in worker_batches if b)
        worker_spares = _even_split(spare[rank], active) + [0] * (workers - active) if active else [0] * workers
        plans, pos = [], rank_start
        for b, sp in zip(worker_batches, worker_spares):
            n = b * batch_size + sp
            plans.append(WorkerPlan(_pieces(sizes, order, pos, pos + n), (batch_size,) * b, sp))
            pos += n
        return plans
    order = list(range(len(sizes)))
    lo, hi = rank * N // world_size, (rank + 1) * N // world_size
    nb = -(-(hi - lo) // batch_size)
    plans, b0 = [], 0
    for b in _even_split(nb, workers):
        s0, s1 = lo + b0 * batch_size, min(lo + (b0 + b) * batch_size, hi)
        sizes_w = tuple(min(batch_size, s1 - s) for s in range(s0, s1, batch_size))
        plans.append(WorkerPlan(_pieces(sizes, order, s0, s1), sizes_w))
        b0 += b
    return plans


# torchvision's RASampler (references/classification/sampler.py) rounds the epoch to a multiple of 256
# samples before dividing it among ranks: num_selected_samples = floor(N // 256 * 256 / world_size).
RA_ROUND = 256


def repeated_plan(sizes: list[int], *, batch_size: int, rank: int, world_size: int, workers: int, seed: int,
                  epoch: int, repeats: int) -> list[WorkerPlan]:
    """Train plans with repeated augmentation (Hoffer et al. 2020; torchvision's ``--ra-sampler
    --ra-reps R``, DeiT's RASampler): about N/R distinct samples an epoch, each seen R times.

    Like torchvision's sampler, each rank gets floor(N // 256 * 256 / W) positions (no rounding for
    sets under 256 samples), cut here into ``nb = that // B`` full batches, the same on every rank.
    The distinct samples are the first U of the epoch's sequence (shards in ``shard_order``: a
    different random ~1/R of the shards each epoch, where torchvision draws 1/R of the samples).
    Laid out as R copies of them, one after another, and dealt to ranks in contiguous blocks, so each
    rank streams one or two contiguous ranges: with W >= R the R copies of a sample land on R
    different ranks (as torchvision guarantees); with W < R and R a multiple of W each rank shows each
    of its samples R/W times in a row (torchvision's single-GPU pattern). Where R divides W, or W
    divides R, the ranks holding copies of a sample read the same range and shuffle it alike
    (``shuffle_key``), so the copies are in the same step, as in torchvision's sampler.
    """
    N = sum(sizes)
    order = shard_order(len(sizes), seed, epoch)
    granule = RA_ROUND if N >= RA_ROUND else 1
    nb = (N // granule * granule // world_size) // batch_size
    n = nb * batch_size                                   # positions per rank
    e = repeats // world_size if world_size < repeats and repeats % world_size == 0 else 1
    layers = repeats // e
    m = -(-n // e)                                        # distinct samples (entries) per rank
    U = max(1, -(-world_size * m // layers))              # distinct samples this epoch
    if U > N and n:
        raise ValueError(f"repeated augmentation x{repeats} needs {U} samples, the split has {N}")
    plans, pos = [], 0
    for b in _even_split(nb, workers):
        k0, k1 = pos, pos + b * batch_size
        pos = k1
        if b == 0:
            plans.append(WorkerPlan((), ()))
            continue
        j0, j1 = k0 // e, (k1 - 1) // e + 1              # this worker's entries
        first = (rank * m + j0) % U
        count = j1 - j0
        ranges = [(first, min(U, first + count))]
        if first + count > U:                             # wraps to the start of the next copy
            ranges.append((0, first + count - U))
        pieces = tuple(p for lo, hi in ranges for p in _pieces(sizes, order, lo, hi))
        plans.append(WorkerPlan(pieces, (batch_size,) * b, 0, repeat=e, head=e - k0 % e,
                                shuffle_key=(rank * m) % U))
    return plans


def repeat_counts(plan: WorkerPlan) -> list[int]:
    """How many times each sample of ``plan.pieces`` is emitted, in read order (sums to num_samples)."""
    total = plan.num_samples
    n = sum(p.stop - p.start for p in plan.pieces)
    counts = [min(plan.head, total)] + [plan.repeat] * max(0, n - 1)
    over = sum(counts) - total
    while over > 0:  # the last entries of the range are cut where the worker's positions end
        cut = min(over, counts[-1])
        counts[-1] -= cut
        over -= cut
        if counts[-1] == 0:
            counts.pop()
    return counts[:n] + [0] * max(0, n - len(counts))
