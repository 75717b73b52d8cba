"""The loader's facade: ``make_loader`` -> ``ShardLoader`` (a DataLoader over a ``ShardDataset``).

manifest (``pipeline.format.manifest``) -> shard list -> per-epoch plan (``plan``) -> read
(``reading``) -> shuffle -> decode -> batch (``batching``). Each DataLoader worker reads its
contiguous range of the epoch's sample sequence (which may start and stop mid-shard), shuffles in
a bounded buffer, decodes (uint8 only) and forms whole batches itself, so the DataLoader runs with
``batch_size=None`` and every rank gets exactly ``len(loader)`` batches. See docs/loader.md.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import random
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.manifest import Shard, read_manifest, split_shards
from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader.batching import DecodeConfig, batches, expand_counts, shuffle_buffer, with_counts
from imagenet_shards.train.loader.cache import ShardCache
from imagenet_shards.train.loader.plan import WorkerPlan, epoch_plan, repeat_counts
from imagenet_shards.train.loader.reading import open_url, read_pieces
from imagenet_shards.train.loader.slots import Releaser, SlotRing, new_board

log = logging.getLogger(__name__)

_WARN_FIRST, _WARN_EVERY = 10, 1000
_BAD_KEYS_KEPT = 20


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([p & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0])


class ShardDataset(IterableDataset):
    """One rank's view of a split; iterating it (in a worker or in-process) yields its planned batches.

    Epoch and resolution live in a small shared tensor so that persistent workers see
    ``set_epoch`` / ``set_resolution`` made in the main process; the release board of the
    workers' reusable batch memory (``slots``) is shared the same way."""

    def __init__(self, shards: list[Shard], *, batch_size: int, cfg: DecodeConfig, workers: int, seed: int,
                 rank: int, world_size: int, shuffle_buffer: int, strict: bool, epoch: int = 0,
                 cache: ShardCache | None = None, prefetch_factor: int = 4, repeats: int = 1):
        self.shards = shards
        self.opener = cache.open if cache is not None else open_url
        # what imagenet_shards.pipeline.storage.fs was told in this process (storage options, retry policy), for
        # workers that are spawned rather than forked
        self.storage_state = (storage.options_snapshot(), storage.retry_policy())
        self.sizes = [s.num_samples for s in shards]
        self.batch_size, self.cfg, self.workers = batch_size, cfg, workers
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.shuffle_buffer, self.strict = shuffle_buffer, strict
        self.repeats = repeats
        self.state = torch.tensor([epoch, cfg.res], dtype=torch.int64).share_memory_()
        self.board = new_board(workers, prefetch_factor)
        self._ring: SlotRing | None = None  # set in each worker process, kept across its epochs

    def plan(self, epoch: int | None = None) -> list[WorkerPlan]:
        """This rank's per-worker plans for ``epoch`` (default: the one ``set_epoch`` selected)."""
        return epoch_plan(self.sizes, batch_size=self.batch_size, rank=self.rank, world_size=self.world_size,
                          workers=max(1, self.workers), train=self.cfg.train, seed=self.seed,
                          epoch=int(self.state[0]) if epoch is None else epoch, repeats=self.repeats)

    def __iter__(self):
        info = get_worker_info()
        worker = info.id if info is not None else 0
        epoch, res = int(self.state[0]), int(self.state[1])
        cfg = self.cfg if res == self.cfg.res else dataclasses.replace(self.cfg, res=res)
        plan = self.plan(epoch)[worker]
        if not plan.batch_sizes:
            return
        if info is not None:
            storage.restore_options(self.storage_state[0])
            storage.set_retry_policy(self.storage_state[1])
        ids = (self.seed, epoch, self.rank, worker)
        records = read_pieces(self.shards, plan.pieces, opener=self.opener)
        if cfg.train and plan.shuffle_key is not None:
            # repeated augmentation: ranks reading the same samples shuffle them alike (the crops,
            # seeded by rank, differ), then each sample is emitted plan.repeat times in a row
            pairs = with_counts(records, repeat_counts(plan))
            rng = random.Random(_seed(self.seed, epoch, plan.shuffle_key, worker, 3))
            records = expand_counts(shuffle_buffer(pairs, self.shuffle_buffer, rng))
        elif cfg.train:
            records = shuffle_buffer(records, self.shuffle_buffer, random.Random(_seed(*ids, 1)))
        aug = dec.make_aug(cfg.aug) if cfg.train else None
        if info is not None and self._ring is None:
            self._ring = SlotRing(self.board, worker)
            # what the worker inherited (torch, the plan...) is never garbage: keep the cyclic
            # collector's full passes off it (measured ~2 % of a worker's CPU time otherwise)
            gc.freeze()
        yield from batches(iter(records), plan.batch_sizes, cfg, random.Random(_seed(*ids, 2)),
                           fill=cfg.train, strict=self.strict, shared=info is not None, aug=aug,
                           ring=self._ring if info is not None else None)


class ShardLoader:
    """Iterable of ``(images uint8 [B,3,H,W] contiguous, labels int64 [B])`` for one rank and epoch.

    ``len()`` is the exact number of batches this rank yields (eval: minus batches whose samples
    were all bad). ``stats`` counts what the current (or last) iteration has yielded so far: it is
    replaced when an iteration starts and updated with every batch, so an epoch cut short (the
    trainer's ``--limit-batches``) still reports the batches, samples and bad samples it saw."""

    def __init__(self, dataset: ShardDataset, *, workers: int, pin_memory: bool, persistent_workers: bool,
                 prefetch_factor: int, keys: bool = False):
        self.dataset = dataset
        self.keys = keys  # yield (images, labels, keys): the val samples' keys (ReaL labels)
        kw = {}
        if workers > 0:
            kw = dict(persistent_workers=persistent_workers, prefetch_factor=prefetch_factor)
        self._loader = DataLoader(dataset, batch_size=None, num_workers=workers, pin_memory=pin_memory, **kw)
        self._releaser = Releaser(dataset.board)
        self.stats: dict = {}
        self._warned = 0

    @property
    def epoch(self) -> int:
        return int(self.dataset.state[0])

    @property
    def res(self) -> int:
        return int(self.dataset.state[1])

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (shard order, shuffle and crop seeds) for the next iteration."""
        self.dataset.state[0] = int(epoch)

    def set_resolution(self, res: int) -> None:
        """Train crop size from the next iteration on (progressive resizing)."""
        if res < 1:
            raise ValueError(f"resolution must be positive, got {res}")
        self.dataset.state[1] = int(res)

    def __len__(self) -> int:
        return sum(len(p.batch_sizes) for p in self.dataset.plan())

    @property
    def num_samples(self) -> int:
        return sum(p.num_samples for p in self.dataset.plan())

    def _report_bad(self, bad: tuple, stats: dict) -> None:
        for key, url, reason in bad:
            stats["bad_samples"] += 1
            if len(stats["bad_keys"]) < _BAD_KEYS_KEPT:
                stats["bad_keys"].append(key)
            n = stats["bad_samples"]
            if n <= _WARN_FIRST or n % _WARN_EVERY == 0:
                log.warning("skipped bad sample %r in %s: %s (%d bad so far this epoch)", key, url, reason, n)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        stats = self.stats = {"epoch": self.epoch, "samples": 0, "batches": 0, "bad_samples": 0, "bad_keys": [],
                              "duplicated": 0, "recycled": 0}
        for images, labels, info in self._loader:
            self._releaser.release_done()  # batches handed out earlier that nobody holds any more
            self._releaser.track(images, info.worker, info.slot, info.token)
            if info.bad:
                self._report_bad(info.bad, stats)
            stats["duplicated"] += info.duplicated
            stats["recycled"] += info.recycled
            stats["samples"] += len(labels)
            stats["batches"] += 1
            yield (images, labels, info.keys) if self.keys else (images, labels)


def make_loader(data: str, split: str, batch_size: int, *, train: bool | None = None, workers: int = 4,
                seed: int = 0, epoch: int = 0, rank: int = 0, world_size: int = 1, res: int = 224,
                val_resize: int = 256, val_crop: int = 224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                hflip: bool = True, decoder: str = "auto", aug: str | None = None, shuffle_buffer: int = 2000,
                pin_memory: bool = False, persistent_workers: bool = False, prefetch_factor: int = 4,
                strict: bool = False, cache_dir: str | None = None, cache_bytes: int | None = None,
                val_crop_ratio: float | None = None, repeats: int = 1, keys: bool = False) -> ShardLoader:
    """A ``ShardLoader`` over ``split`` of the shard set at DATA (a directory or URL with manifest.json).

    ``train`` defaults to ``split == "train"``: random-resized crops, shuffled, full batches only.
    Otherwise: centre crops, manifest order, every sample exactly once (see docs/loader.md).
    ``cache_dir``: keep local copies of remote shards there, at most ``cache_bytes`` (default 90%
    of that disk), least recently used evicted first (``cache.ShardCache``). ``val_crop_ratio``:
    FFCV's val centre crop (that fraction of the shorter side, resized to ``val_crop``) instead of
    resize + crop. ``repeats`` > 1: repeated augmentation in train (``plan.repeated_plan``).
    ``keys``: eval batches come as (images, labels, keys)."""
    if train is None:
        train = split == "train"
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if val_crop > val_resize and val_crop_ratio is None:
        raise ValueError(f"val_crop {val_crop} is larger than val_resize {val_resize}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    dec.make_aug(aug)  # validate the name early
    cfg = DecodeConfig(train=train, res=res, val_resize=val_resize, val_crop=val_crop, scale=tuple(scale),
                       ratio=tuple(ratio), hflip=hflip, decoder=dec.resolve_decoder(decoder), aug=aug,
                       val_ratio=val_crop_ratio)
    shards = split_shards(read_manifest(data), data, split)
    cache = ShardCache(cache_dir, cache_bytes) if cache_dir else None
    dataset = ShardDataset(shards, batch_size=batch_size, cfg=cfg, workers=workers, seed=seed, rank=rank,
                           world_size=world_size, shuffle_buffer=shuffle_buffer, strict=strict, epoch=epoch,
                           cache=cache, prefetch_factor=prefetch_factor, repeats=repeats)
    return ShardLoader(dataset, workers=workers, pin_memory=pin_memory, persistent_workers=persistent_workers,
                       prefetch_factor=prefetch_factor, keys=keys and not train)
