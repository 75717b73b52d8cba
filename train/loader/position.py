"""The loader's position in an epoch: what a mid-epoch checkpoint saves, and how a resumed epoch skips.

A worker's stream is a pure function of its plan: the records of its pieces, in a bounded shuffle
seeded by ``(seed, epoch, rank, worker)``, each decoded with its own random stream
(``batching.sample_rng``). So its position is a handful of numbers (``StreamPosition``: batches
yielded, records taken, the batch a starved batch repeats), and resuming it costs no decoding:

* ``consumed_stream`` replays the worker's stream (``worker_stream``: the shuffle, and repeated
  augmentation's copies) on sample *positions* (numbers, not records) to find which records the
  first ``taken`` outputs were: under a microsecond per record;
* ``reading.read_pieces(skip=...)`` passes over those records without reading their bytes (a
  piece consumed whole is not even opened; elsewhere the tar headers are read and the member bytes
  seeked over, or streamed and dropped where the store cannot seek);
* ``resume_stream`` runs the same stream over the records and stand-ins and drops the first
  ``taken`` outputs; a stand-in after them is an error (a position that does not fit the plan),
  never a silent misalignment.

Under another layout (world size or workers) the old streams cannot continue; ``consumed_mask``
gives every sample the epoch has used, and ``plan.rest_plan`` shares out the others exactly once.
``EpochProgress`` is the main process's view: per-worker positions, the fingerprint and counts,
with snapshots of the last few batches (the prefetcher holds one batch ahead of the step).
"""

from __future__ import annotations

import collections
import itertools
import random
from typing import Iterable, Iterator

import numpy as np

from imagenet_shards.train.loader import fingerprint
from imagenet_shards.train.loader.batching import BatchInfo, StreamPosition, expand_counts, shuffle_buffer, with_counts
from imagenet_shards.train.loader.plan import PlanError, WorkerPlan, epoch_plan, repeat_counts, sample_ids
from imagenet_shards.train.loader.reading import SKIPPED

# batches of history kept: the prefetcher's one batch ahead, and some margin; a loader fed to
# --accumulate A keeps A more (a stop past its deadline saves the last completed step's start)
SNAPSHOTS = 4


def seed_of(*parts: int) -> int:
    """A 64-bit seed from small integers (numpy's SeedSequence: well mixed, platform-independent)."""
    return int(np.random.SeedSequence([p & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0])


def stream_seed(seed: int, epoch: int, rank: int, worker: int, plan: WorkerPlan) -> int:
    """The seed of one worker's shuffle buffer in one epoch. Repeated augmentation: ranks that read
    the same samples (the same ``plan.shuffle_key``) shuffle them alike, so copies share a step; a
    stream of ``plan.spread_plan`` is seeded by its worker within its virtual rank."""
    if plan.shuffle_key is not None:
        return seed_of(seed, epoch, plan.shuffle_key, worker if plan.stream is None else plan.stream[1], 3)
    return seed_of(seed, epoch, rank, worker, 1)


def copies_rank(plan: WorkerPlan, rank: int) -> int | None:
    """The rank that seeds the crops of ``plan`` (``crop_seed``): None without repeated
    augmentation, the virtual rank for a stream of ``plan.spread_plan``, else ``rank``."""
    if plan.shuffle_key is None:
        return None
    return rank if plan.stream is None else plan.stream[0]


def crop_seed(seed: int, epoch: int, rank: int | None = None) -> int:
    """The epoch's seed of every sample's random stream (``batching.sample_rng``): the same on all
    ranks and workers, so a sample's crop does not depend on who reads it; with repeated
    augmentation (``rank`` given) one per rank, so the copies of a sample on two ranks differ."""
    return seed_of(seed, epoch, 2) if rank is None else seed_of(seed, epoch, 2, rank)


def worker_stream(items: Iterable, plan: WorkerPlan, buffer: int, seed: int) -> Iterator:
    """The order a train worker emits its ``items`` (records, stand-ins, or just positions) in: the
    bounded shuffle; with repeated augmentation each item ``repeat`` times in a row after it. The one
    definition the loader and the position replay share."""
    rng = random.Random(seed)
    if plan.shuffle_key is not None:
        triples = with_counts(items, repeat_counts(plan), first=plan.repeat - plan.head)
        return expand_counts(shuffle_buffer(triples, buffer, rng))
    return shuffle_buffer(items, buffer, rng)


def interleave(streams: list[Iterator]) -> Iterator:
    """A worker's streams' batches in turn (``plan.worker_streams``' order) until one has none for its
    turn: the rank's batches left are a contiguous run, so that one is past its end and so are the rest."""
    try:
        while True:
            for stream in streams:
                batch = next(stream, None)
                if batch is None:
                    return
                yield batch
    finally:
        for stream in streams:
            stream.close()


def consumed_stream(plan: WorkerPlan, n: int, buffer: int, seed: int, taken: int) -> list[int]:
    """Positions (0..n-1 in the worker's piece order) of the first ``taken`` records its stream
    emits: the same stream run on numbers instead of records."""
    if taken <= 0:
        return []
    return list(itertools.islice(worker_stream(range(n), plan, buffer, seed), taken))


def skippable(plan: WorkerPlan, n: int, consumed: list[int]) -> frozenset:
    """The positions whose every emission is among ``consumed``: their bytes need not be read. (With
    repeated augmentation a sample whose copies straddle the cut is read: its later copies follow.)"""
    if plan.shuffle_key is None:
        return frozenset(consumed)
    counts = repeat_counts(plan)
    seen = collections.Counter(consumed)
    return frozenset(p for p, c in seen.items() if c >= counts[p])


def copy_numbers(plan: WorkerPlan, order: list[int], start: int, stop: int) -> list[int]:
    """``Record.copy`` of the stream's records ``start..stop-1`` (``order``: the positions it emitted):
    how many copies of the same sample came before (repeated augmentation; 0 otherwise)."""
    if plan.shuffle_key is None:
        return [0] * (stop - start)
    before = collections.Counter(order[:start])
    first = plan.repeat - plan.head
    out = []
    for p in order[start:stop]:
        out.append(before[p] + (first if p == 0 else 0))
        before[p] += 1
    return out


def resume_stream(records: Iterator, taken: int, exact: bool = True) -> Iterator:
    """``records`` (the worker's stream, consumed records as ``SKIPPED``) without its first ``taken``;
    RuntimeError if a stand-in comes after them or (``exact``: no repeated augmentation, whose
    straddling sample is read) a real record among them: a position that does not fit this plan."""
    for i, rec in enumerate(records):
        if exact and i < taken and rec is not SKIPPED:
            raise RuntimeError(f"the resumed loader position does not fit this epoch's plan (record {i} of the "
                               f"stream, {taken} consumed): the checkpoint was made with other data or settings")
        if i >= taken:
            if rec is SKIPPED:
                raise RuntimeError(f"the resumed loader position does not fit this epoch's plan (record {i} of the "
                                   f"stream, {taken} consumed): the checkpoint was made with other data or settings")
            yield rec


def consumed_mask(sizes: list[int], plan: dict, positions: list[dict]) -> np.ndarray:
    """A bool per sample id: True where the interrupted epoch has consumed it (all ranks' workers
    up to their positions, and whatever an earlier interruption of the same epoch consumed)."""
    world, workers = plan["world_size"], plan["workers"]
    if len(positions) != world:
        raise ValueError(f"{len(positions)} rank positions for a {world}-rank plan")
    remaining = unpack(plan.get("remaining"), sum(sizes))
    mask = np.zeros(sum(sizes), dtype=bool) if remaining is None else ~remaining
    epoch = positions[0]["epoch"]
    for rank, pos in enumerate(positions):
        plans = epoch_plan(sizes, batch_size=plan["batch_size"], rank=rank, world_size=world, workers=workers,
                           train=True, seed=plan["seed"], epoch=epoch, remaining=remaining)
        for w, (wp, state) in enumerate(zip(plans, pos["workers"])):
            taken = StreamPosition(*state).taken
            ids = sample_ids(sizes, wp.pieces)
            seed = stream_seed(plan["seed"], epoch, rank, w, wp)
            mask[ids[consumed_stream(wp, len(ids), plan["shuffle_buffer"], seed, taken)]] = True
    return mask


def pack(mask: np.ndarray | None):
    """A bool mask as bytes for a checkpoint (one bit per sample), or None."""
    return None if mask is None else np.packbits(np.asarray(mask, dtype=bool)).tobytes()


def unpack(packed, n: int) -> np.ndarray | None:
    """Inverse of ``pack``."""
    if packed is None:
        return None
    return np.unpackbits(np.frombuffer(bytes(packed), dtype=np.uint8), count=n).astype(bool)


class EpochProgress:
    """One rank's loader progress through an epoch, batch by batch (main process).

    ``start`` is a position saved earlier in the same epoch (``state()``), whose counts and
    fingerprint carry on; ``state(n)`` is the position after batch ``n`` of this iteration's
    run of batches, for any of the last ``keep`` batches (default ``SNAPSHOTS``)."""

    def __init__(self, epoch: int, workers: int, start: dict | None = None, keep: int = SNAPSHOTS):
        start = start or {}
        self.epoch = epoch
        self.workers = [tuple(StreamPosition(*w)) for w in start.get("workers", [StreamPosition()] * workers)]
        self.base_batches = int(start.get("batches", 0))
        self.batches = 0  # this iteration's
        self.counts = {k: int(start.get(k, 0)) for k in ("samples", "bad_samples", "duplicated")}
        self.fingerprint = tuple(start.get("fingerprint", fingerprint.EMPTY))
        self._history = collections.deque(maxlen=keep)
        self._history.append(self._snapshot())

    def _snapshot(self) -> dict:
        return {"epoch": self.epoch, "batches": self.base_batches + self.batches, "workers": list(self.workers),
                "fingerprint": list(self.fingerprint), **self.counts}

    def add(self, info: BatchInfo, samples: int, stream: int = 0) -> None:
        """Account for one batch of plan worker ``stream`` as the loader hands it over."""
        self.workers[stream] = tuple(info.position)
        self.batches += 1
        self.counts["samples"] += samples
        self.counts["bad_samples"] += len(info.bad)
        self.counts["duplicated"] += info.duplicated
        self.fingerprint = fingerprint.combine(self.fingerprint, info.fingerprint)
        self._history.append(self._snapshot())

    def state(self, batches: int | None = None) -> dict:
        """The position after ``batches`` batches of this iteration (default: all handed over so far)."""
        if batches is None or batches == self.batches:
            return dict(self._history[-1])
        back = self.batches - batches
        if not 0 <= back < len(self._history):
            raise ValueError(f"no loader position kept for batch {batches} (handed over {self.batches}; "
                             f"the last {len(self._history) - 1} are kept)")
        return dict(self._history[-1 - back])


def check_saved_plan(saved: dict, mine: dict) -> None:
    """PlanError (one line) when a saved loader position's plan (``ShardLoader.plan_state``) differs
    from this loader's in what no resume can bridge: ``mine`` = {sizes, batch_size, seed,
    shuffle_buffer, repeats, ra_micro_batches}. Positions older than ``repeats`` or
    ``ra_micro_batches`` lack them and mean 1."""
    for name, ours in mine.items():
        theirs = saved.get(name, 1 if name in ("repeats", "ra_micro_batches") else None)
        if theirs == ours:
            continue
        if name == "ra_micro_batches":
            raise PlanError(f"the saved loader position spreads repeated augmentation's copies over {theirs} "
                            f"micro-batch{'es' if theirs != 1 else ''} of a step, this loader over {ours} "
                            f"(--accumulate with --ra-reps on fewer ranks than copies; a position saved before "
                            f"the copies were spread has 1): resume from the epoch-end checkpoint")
        shown = (f"{len(theirs)} shards of {sum(theirs)} samples", f"{len(ours)} of {sum(ours)}") \
            if name == "sizes" else (theirs, ours)
        raise PlanError(f"the saved loader position is for {name} {shown[0]}, this loader has {shown[1]}")


def repeated_elsewhere(repeats: int, saved: dict, layout: tuple[int, int]) -> PlanError:
    """The one-line refusal of continuing a repeated-augmentation epoch on another layout (world
    size x workers): its copies are laid out per rank and micro-batch slot."""
    return PlanError(f"repeated augmentation (x{repeats}) cannot continue an epoch on another world size or "
                     f"--workers ({saved['world_size']} x {saved['workers']} there, {layout[0]} x {layout[1]} "
                     f"here): its copies are laid out per rank and micro-batch; resume with the same layout, "
                     f"or from the epoch-end checkpoint")
