"""The epoch plan: which samples each worker of each rank reads and batches in one epoch. Pure functions.

A pure function of (shard sizes, seed, epoch, rank, world size, workers, batch size, repeats,
accumulate), tested for its invariants (equal full batches per train rank, disjoint ranges, every
eval sample exactly once; with repeated augmentation, each sample at most `repeats` times and on
distinct ranks, or with ``spread_plan`` distinct micro-batches): see ``epoch_plan`` and
docs/loader.md. ``rest_plan`` is the plan of what is left of an epoch interrupted under another
layout (world size or workers): every sample not yet seen, exactly once, in equal step counts per rank.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class Piece(NamedTuple):
    shard: int   # index into the shard list
    start: int   # first sample (0-based, within the shard)
    stop: int    # one past the last


class PlanError(ValueError):
    """No plan can do what was asked (the message says why, in one line)."""


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker of one rank reads and yields in one epoch.

    train: ``len(batch_sizes)`` full batches of good samples drawn from ``pieces``; pieces
    hold ``spares`` extra samples (the rank's share of the dropped tail) used only to replace
    bad samples. eval: ``batch_sizes[i]`` = the next that many samples of ``pieces`` in order.
    Repeated augmentation (``repeated_plan``): each sample of ``pieces`` is emitted ``repeat``
    times in a row after the shuffle (the first one ``head`` times), and ``shuffle_key`` replaces
    the rank in the shuffle seed, so ranks that read the same samples shuffle them alike.
    ``stream`` (copies spread over micro-batches, ``spread_plan``): (virtual rank, its worker) of
    this stream, which replace the rank in the crop seed and the worker in the shuffle seed.
    """
    pieces: tuple[Piece, ...]
    batch_sizes: tuple[int, ...]
    spares: int = 0
    repeat: int = 1
    head: int = 1
    shuffle_key: int | None = None
    stream: tuple[int, int] | None = None

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
               train: bool, seed: int = 0, epoch: int = 0, repeats: int = 1, accumulate: int = 1,
               remaining: np.ndarray | None = None) -> list[WorkerPlan]:
    """Per-worker plans of one rank for one epoch (``workers`` >= 1; use 1 for in-process loading).

    train: shards in ``shard_order(seed, epoch)``; every rank gets ``floor(floor(N/world)/B)``
    full batches, cut as contiguous ranges of the sequence (rank-major, then worker); the samples
    left over are the ranks' spares (dropped unless they replace bad samples). Each sample is in
    at most one range. eval: manifest order, rank r gets ``[floor(rN/world), floor((r+1)N/world))``
    cut into batches of B (the last one partial) shared out to workers; every sample exactly once.
    ``remaining`` (train only): the rest of an interrupted epoch, see ``rest_plan``. ``repeats``
    > 1: ``repeated_plan``; on fewer ranks than repeats with ``accumulate`` micro-batches per
    optimizer step, ``spread_plan`` (then ``streams(...)`` plans, not ``workers``).
    """
    if remaining is not None:
        return rest_plan(sizes, remaining, batch_size=batch_size, rank=rank, world_size=world_size,
                         workers=workers, seed=seed, epoch=epoch)
    if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size or workers < 1:
        raise ValueError(f"bad plan arguments: batch_size={batch_size} rank={rank} "
                         f"world_size={world_size} workers={workers}")
    N = sum(sizes)
    if train and repeats > 1 and spread(world_size, repeats, accumulate) > 1:
        return spread_plan(sizes, batch_size=batch_size, rank=rank, world_size=world_size, workers=workers,
                           seed=seed, epoch=epoch, repeats=repeats, accumulate=accumulate)
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


def spread(world_size: int, repeats: int, accumulate: int) -> int:
    """Micro-batches per optimizer step that repeated augmentation's copies are spread over: with
    ``repeats`` > 1 on fewer ranks than copies and ``accumulate`` > 1, ``accumulate``; else 1 (the
    copies go to ranks alone: with ``world_size >= repeats`` they already land on distinct ones)."""
    return accumulate if repeats > 1 and accumulate > 1 and world_size < repeats else 1


def streams(workers: int, *, world_size: int, repeats: int = 1, accumulate: int = 1, train: bool = True) -> int:
    """How many plans ``epoch_plan`` returns: ``workers``, or lcm(workers, A) when the copies are
    spread over A micro-batches (``spread_plan``)."""
    a = spread(world_size, repeats, accumulate) if train else 1
    return workers if a == 1 else math.lcm(workers, a)


def worker_streams(first: int, workers: int, streams: int) -> list[int]:
    """The streams (plans) a DataLoader worker whose first batch is the rank's batch ``first`` runs, in
    the order their batches follow each other: batch j is stream ``j % streams``'s, and the worker
    makes batches ``first, first + workers, ...``."""
    return [(first + n * workers) % streams for n in range(streams // workers)]


def spread_plan(sizes: list[int], *, batch_size: int, rank: int, world_size: int, workers: int, seed: int,
                epoch: int, repeats: int, accumulate: int) -> list[WorkerPlan]:
    """Repeated augmentation with ``accumulate`` = A micro-batches per optimizer step on W < R ranks:
    each (rank, micro-batch slot) is a virtual rank of ``repeated_plan`` on V = W x A ranks, slot
    ``a`` of rank ``r`` being virtual rank ``a * W + r``, so the copies of a sample go to different
    micro-batches (forwards) where V >= R, and into the same step where R divides V or V divides R
    (the source's placement on V ranks). The rank's batch j = s * A + a is batch s of slot a.

    Returned: L = lcm(workers, A) streams; stream t is worker ``t // A`` of virtual rank
    ``(t % A) * W + rank`` planned with ``L // A`` workers, and makes the rank's batches j with
    ``j % L == t``; DataLoader worker ``i`` (plan worker ``i``) runs the streams ``t % workers == i``
    and interleaves them in that order (``ShardDataset``). Each virtual rank has
    ``nb_v = floor(floor(N // 256 * 256 / V) / B)`` batches, so the rank has A * nb_v: the
    ``floor(nb / A)`` optimizer steps of ``repeated_plan``'s nb batches, without the trailing
    ``nb % A`` that no step used.
    """
    a_n = accumulate
    virtual, per = world_size * a_n, streams(workers, world_size=world_size, repeats=repeats,
                                             accumulate=accumulate) // a_n
    out: list[WorkerPlan | None] = [None] * (per * a_n)
    for a in range(a_n):
        v = a * world_size + rank
        plans = repeated_plan(sizes, batch_size=batch_size, rank=v, world_size=virtual, workers=per, seed=seed,
                              epoch=epoch, repeats=repeats)
        for q, p in enumerate(plans):
            out[q * a_n + a] = dataclasses.replace(p, stream=(v, q))
    return out


def ra_placement(*, world_size: int, repeats: int, accumulate: int = 1) -> dict | None:
    """Where repeated augmentation's copies go, for the start record and recipe.json (None without it):
    ``over`` ranks or micro-batches, ``slots`` (ranks x spread micro-batches), whether no forward
    holds two copies of a sample (slots >= repeats) and whether a sample's copies share a step
    (repeats divides slots or slots divides repeats)."""
    if repeats <= 1:
        return None
    a = spread(world_size, repeats, accumulate)
    slots = world_size * a
    return {"repeats": repeats, "over": "micro-batches" if a > 1 else "ranks", "slots": slots,
            "one_copy_per_forward": slots >= repeats,
            "copies_in_one_step": slots % repeats == 0 or repeats % slots == 0}


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


# ----------------------------------------------------------------------------- sample ids and the rest of an epoch

def sample_ids(sizes: list[int], pieces) -> np.ndarray:
    """Split-wide ids (manifest order: shard 0's samples, then shard 1's...) of the samples of
    ``pieces``, in piece order: an id names one sample whatever the epoch, rank or worker."""
    base = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    parts = [np.arange(base[p.shard] + p.start, base[p.shard] + p.stop, dtype=np.int64) for p in pieces]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def epoch_sequence(sizes: list[int], seed: int, epoch: int) -> np.ndarray:
    """Sample ids of the train epoch's sequence: shards in ``shard_order``, each in file order."""
    order = shard_order(len(sizes), seed, epoch)
    return sample_ids(sizes, [Piece(s, 0, sizes[s]) for s in order])


def pieces_of(sizes: list[int], ids: np.ndarray) -> tuple[Piece, ...]:
    """Inverse of ``sample_ids``: runs of consecutive ids within one shard, as pieces, in order."""
    if len(ids) == 0:
        return ()
    base = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    shard = np.searchsorted(base, ids, side="right") - 1
    local = ids - base[shard]
    cut = np.flatnonzero((np.diff(shard) != 0) | (np.diff(local) != 1)) + 1
    starts = np.concatenate([[0], cut])
    stops = np.concatenate([cut, [len(ids)]])
    return tuple(Piece(int(shard[a]), int(local[a]), int(local[b - 1]) + 1) for a, b in zip(starts, stops))


def pieces_at(pieces, positions) -> list[Piece]:
    """One-sample pieces for ``positions`` in the sample sequence of ``pieces`` (0 = the first
    piece's first sample), in the order given."""
    starts = np.cumsum([0] + [p.stop - p.start for p in pieces])
    out = []
    for i in positions:
        k = int(np.searchsorted(starts, i, side="right")) - 1
        p = pieces[k]
        out.append(Piece(p.shard, p.start + int(i - starts[k]), p.start + int(i - starts[k]) + 1))
    return out


def rest_plan(sizes: list[int], remaining: np.ndarray, *, batch_size: int, rank: int, world_size: int,
              workers: int, seed: int, epoch: int) -> list[WorkerPlan]:
    """Per-worker plans of one rank for the rest of an interrupted train epoch.

    ``remaining``: a bool per sample id, True for the samples the epoch has not consumed yet. They
    are taken in the epoch's sequence order and shared out exactly once: rank r gets an even share
    (sizes differ by at most 1), cut into the same number of batches S = ceil(largest share / B)
    on every rank (DDP needs equal step counts), batch sizes as even as possible (at most B).
    Batch j of the rank is worker ``j % workers``'s (the DataLoader's round-robin order); each
    worker reads one contiguous run of its rank's share. No spares: a bad sample's slot is refilled
    by a repeat. PlanError when some rank could not get S batches of at least one sample.
    """
    if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size or workers < 1:
        raise ValueError(f"bad plan arguments: batch_size={batch_size} rank={rank} "
                         f"world_size={world_size} workers={workers}")
    seq = epoch_sequence(sizes, seed, epoch)
    todo = seq[np.asarray(remaining, dtype=bool)[seq]]
    shares = _even_split(len(todo), world_size)
    steps = -(-max(shares) // batch_size)
    if min(shares) < steps:
        raise PlanError(f"the rest of epoch {epoch} holds {len(todo)} samples: {world_size} ranks cannot each "
                        f"get {steps} batch(es) of 1 to {batch_size} samples")
    lo = sum(shares[:rank])
    mine = todo[lo:lo + shares[rank]]
    rank_batches = _even_split(len(mine), steps)
    plans, pos = [], 0
    for w in range(workers):
        sizes_w = tuple(rank_batches[w::workers])
        n = sum(sizes_w)
        plans.append(WorkerPlan(pieces_of(sizes, mine[pos:pos + n]), sizes_w, 0))
        pos += n
    return plans
