"""The epoch plan: which samples each worker of each rank reads and batches in one epoch. Pure functions.

A pure function of (shard sizes, seed, epoch, rank, world size, workers, batch size), tested for
its invariants (equal full batches per train rank, disjoint ranges, every eval sample exactly
once): see ``epoch_plan`` and docs/loader.md.
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
    """
    pieces: tuple[Piece, ...]
    batch_sizes: tuple[int, ...]
    spares: int = 0

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
               train: bool, seed: int = 0, epoch: int = 0) -> list[WorkerPlan]:
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
