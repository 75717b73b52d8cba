"""The loader's position in an epoch: what a mid-epoch checkpoint saves, and how a resumed epoch skips.

A worker's stream is a pure function of its plan: the records of its pieces, in a bounded shuffle
seeded by ``(seed, epoch, rank, worker)``, each decoded with its own random stream
(``batching.sample_rng``). So its position is a handful of numbers (``StreamPosition``: batches
yielded, records taken, the batch a starved batch repeats), and resuming it costs no decoding:

* ``consumed_stream`` replays the shuffle on sample *positions* (numbers, not records) to find
  which records the first ``taken`` outputs were: about a microsecond per record of the worker's
  range (the whole range, a few ms for 10,000 records);
* ``reading.read_pieces(skip=...)`` passes over those records without reading their bytes (a
  piece consumed whole is not even opened; elsewhere the tar headers are read and the member bytes
  seeked over, or streamed and dropped where the store cannot seek);
* ``resume_stream`` runs the same shuffle over the records and stand-ins and drops the first
  ``taken`` outputs, which must all be stand-ins (checked: a position that does not fit the plan
  is an error, never a silent misalignment).

Under another layout (world size or workers) the old streams cannot continue; ``consumed_mask``
gives every sample the epoch has used, and ``plan.rest_plan`` shares out the others exactly once.
``EpochProgress`` is the main process's view: per-worker positions, the fingerprint and counts,
with snapshots of the last few batches (the prefetcher holds one batch ahead of the step).
"""

from __future__ import annotations

import collections
import random
from typing import Iterator

import numpy as np

from imagenet_shards.train.loader import fingerprint
from imagenet_shards.train.loader.batching import BatchInfo, StreamPosition, shuffle_buffer
from imagenet_shards.train.loader.plan import epoch_plan, sample_ids
from imagenet_shards.train.loader.reading import SKIPPED

SNAPSHOTS = 4  # batches of history kept: the prefetcher's one batch ahead, and some margin


def seed_of(*parts: int) -> int:
    """A 64-bit seed from small integers (numpy's SeedSequence: well mixed, platform-independent)."""
    return int(np.random.SeedSequence([p & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0])


def shuffle_seed(seed: int, epoch: int, rank: int, worker: int) -> int:
    """The seed of one worker's shuffle buffer in one epoch."""
    return seed_of(seed, epoch, rank, worker, 1)


def crop_seed(seed: int, epoch: int) -> int:
    """The epoch's seed of every sample's random stream (``batching.sample_rng``): the same on all
    ranks and workers, so a sample's crop does not depend on who reads it."""
    return seed_of(seed, epoch, 2)


def consumed_stream(n: int, buffer: int, seed: int, taken: int) -> list[int]:
    """Positions (0..n-1 in the worker's piece order) of the first ``taken`` records its shuffle
    emits: the same shuffle run on numbers instead of records."""
    if taken <= 0:
        return []
    out = []
    for i in shuffle_buffer(range(n), buffer, random.Random(seed)):
        out.append(i)
        if len(out) == taken:
            break
    return out


def resume_stream(records: Iterator, taken: int) -> Iterator:
    """``records`` (the shuffled stream, consumed records as ``SKIPPED``) without its first ``taken``;
    RuntimeError if those are not exactly the stand-ins (a position that does not fit this plan)."""
    for i, rec in enumerate(records):
        if (rec is SKIPPED) != (i < taken):
            raise RuntimeError(f"the resumed loader position does not fit this epoch's plan (record {i} of the "
                               f"stream, {taken} consumed): the checkpoint was made with other data or settings")
        if i >= taken:
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
            mask[ids[consumed_stream(len(ids), plan["shuffle_buffer"], shuffle_seed(plan["seed"], epoch, rank, w),
                                     taken)]] = True
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
    run of batches, for any of the last ``SNAPSHOTS`` batches."""

    def __init__(self, epoch: int, workers: int, start: dict | None = None):
        start = start or {}
        self.epoch = epoch
        self.workers = [tuple(StreamPosition(*w)) for w in start.get("workers", [StreamPosition()] * workers)]
        self.base_batches = int(start.get("batches", 0))
        self.batches = 0  # this iteration's
        self.counts = {k: int(start.get(k, 0)) for k in ("samples", "bad_samples", "duplicated")}
        self.fingerprint = tuple(start.get("fingerprint", fingerprint.EMPTY))
        self._history = collections.deque(maxlen=SNAPSHOTS)
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
