"""The loader: ``ShardLoader`` (a DataLoader over a ``ShardDataset``), which ``make.make_loader`` builds.

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
import weakref
from typing import Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.manifest import Shard
from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader import activity, fingerprint, plan as plan_, position, workers as workers_
from imagenet_shards.train.loader.batching import DecodeConfig, StreamPosition, batches
from imagenet_shards.train.loader.cache import ShardCache
from imagenet_shards.train.loader.plan import WorkerPlan, epoch_plan, pieces_at
from imagenet_shards.train.loader.position import EpochProgress, crop_seed, resume_stream
from imagenet_shards.train.loader.reading import open_url, read_pieces
from imagenet_shards.train.loader.slots import Releaser, SlotRing, new_board, outgoing

log = logging.getLogger(__name__)

_WARN_FIRST, _WARN_EVERY = 10, 1000
_BAD_KEYS_KEPT = 20
# ShardDataset.state: the epoch, the train resolution, the epoch a resume position applies to, the
# epoch the rest plan applies to (-1: none)
EPOCH, RES, RESUMED, REST = range(4)


class ShardDataset(IterableDataset):
    """One rank's view of a split; iterating it (in a worker or in-process) yields its planned batches.

    Epoch and resolution live in a small shared tensor so that persistent workers see
    ``set_epoch`` / ``set_resolution`` made in the main process; the release board of the
    workers' reusable batch memory (``slots``) is shared the same way."""

    def __init__(self, shards: list[Shard], *, batch_size: int, cfg: DecodeConfig, workers: int, seed: int,
                 rank: int, world_size: int, shuffle_buffer: int, strict: bool, epoch: int = 0,
                 cache: ShardCache | None = None, prefetch_factor: int = 4, repeats: int = 1,
                 readahead: storage.ReadAheadPolicy | None = None, shard_bytes: list[int | None] | None = None,
                 digests: list | None = None, bad_shards: str = "stop", accumulate: int = 1):
        self.shards = shards
        # each shard's (algorithm, hex digest) from the manifest, checked as it is read (``reading.read_shard``)
        self.digests, self.bad_shards = digests, bad_shards
        self.opener = cache.open if cache is not None else open_url
        # remote shards without a cache: parallel ranged reads running ahead (``storage.readahead``)
        self.readahead = readahead if cache is None else None
        self.shard_bytes = shard_bytes
        # what imagenet_shards.pipeline.storage.fs was told in this process (storage options, retry policy), for
        # workers that are spawned rather than forked
        self.storage_state = (storage.options_snapshot(), storage.retry_policy())
        self.sizes = [s.num_samples for s in shards]
        self.batch_size, self.cfg, self.workers = batch_size, cfg, workers
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.shuffle_buffer, self.strict = shuffle_buffer, strict
        self.repeats, self.accumulate = repeats, accumulate
        # repeated augmentation's copies spread over the micro-batches of a step (plan.spread_plan)
        self.spread = plan_.spread(world_size, repeats, accumulate) if cfg.train else 1
        self.streams = plan_.streams(max(1, workers), world_size=world_size, repeats=repeats,
                                     accumulate=self.spread, train=cfg.train)  # plans per epoch
        # epoch, resolution, the epoch a resume position applies to, the epoch the rest plan applies to
        self.state = torch.tensor([epoch, cfg.res, -1, -1], dtype=torch.int64).share_memory_()
        self.resume_at = torch.zeros((self.streams, len(StreamPosition._fields)), dtype=torch.int64).share_memory_()
        self.remaining = torch.zeros(sum(self.sizes) if cfg.train else 0, dtype=torch.bool).share_memory_()
        self.board = new_board(workers, prefetch_factor)
        self._ring: SlotRing | None = None  # set in each worker process, kept across its epochs
        self.by_slot = False  # send batches through slots.outgoing (the loader's main process keeps the blocks)
        # per DataLoader worker: what reading from the store cost so far (``STORE_FIELDS``), all epochs
        self.store = torch.zeros((max(1, workers), len(workers_.STORE_FIELDS)), dtype=torch.float64).share_memory_()
        self._counters: storage.ReadCounters | None = None  # this process's, published into `store`
        self.activity = activity.new_board(workers)  # what each worker read last (a stall's name: activity.py)

    def plan(self, epoch: int | None = None) -> list[WorkerPlan]:
        """This rank's per-worker plans for ``epoch`` (default: the one ``set_epoch`` selected): the
        rest plan of an interrupted epoch where ``ShardLoader.resume`` set one."""
        epoch = int(self.state[EPOCH]) if epoch is None else epoch
        rest = self.remaining.numpy() if int(self.state[REST]) == epoch else None
        return epoch_plan(self.sizes, batch_size=self.batch_size, rank=self.rank, world_size=self.world_size,
                          workers=max(1, self.workers), train=self.cfg.train, seed=self.seed, epoch=epoch,
                          repeats=self.repeats, accumulate=self.spread, remaining=rest)

    def start_position(self, epoch: int, worker: int) -> StreamPosition | None:
        """Where plan worker (stream) ``worker`` resumes ``epoch`` (None: at its start)."""
        if int(self.state[RESUMED]) != epoch:
            return None
        return StreamPosition(*(int(v) for v in self.resume_at[worker].tolist()))

    def rotation(self, epoch: int) -> int:
        """Which plan worker DataLoader worker 0 serves in this iteration of ``epoch``. The DataLoader
        takes batches from its workers in turn starting with worker 0, and batch j of an epoch is
        plan worker ``j % workers``'s; an epoch resumed after k batches continues with plan worker
        ``k % workers``, so worker i serves plan worker ``(i + k) % workers``."""
        if int(self.state[RESUMED]) != epoch:
            return 0
        return int(self.resume_at[:, 0].sum()) % max(1, self.workers)

    def __iter__(self):
        info = get_worker_info()
        epoch, res = int(self.state[EPOCH]), int(self.state[RES])
        workers = max(1, self.workers)
        worker = ((info.id if info is not None else 0) + self.rotation(epoch)) % workers
        cfg = self.cfg if res == self.cfg.res else dataclasses.replace(self.cfg, res=res)
        plans = self.plan(epoch)
        if len(plans) == workers and not plans[worker].batch_sizes:
            return
        if info is not None:
            storage.restore_options(self.storage_state[0])
            storage.set_retry_policy(self.storage_state[1])
        if self._counters is None:
            self._counters = storage.ReadCounters()
        if info is not None and self._ring is None:
            self._ring = SlotRing(self.board, info.id, keep=len(plans) // workers)
            # what the worker inherited (torch, the plan...) is never garbage: keep the cyclic
            # collector's full passes off it (measured ~2 % of a worker's CPU time otherwise)
            gc.freeze()
        if len(plans) == workers:
            yield from self._stream(epoch, worker, plans[worker], cfg, info, self.shuffle_buffer)
            return
        # copies spread over micro-batches: this worker's streams from its first batch on, the buffer shared
        first = (int(self.resume_at[:, 0].sum()) if int(self.state[RESUMED]) == epoch else 0) + (
            info.id if info is not None else 0)
        mine = plan_.worker_streams(first, workers, len(plans))
        buffer = -(-self.shuffle_buffer // len(mine))
        yield from position.interleave([self._stream(epoch, t, plans[t], cfg, info, buffer) for t in mine])

    def _stream(self, epoch: int, worker: int, plan: WorkerPlan, cfg: DecodeConfig, info, buffer: int):
        """The batches of plan worker (stream) ``worker`` of ``epoch``, from its resume position on."""
        if not plan.batch_sizes:
            return
        start = self.start_position(epoch, worker) if cfg.train else None
        seed = position.stream_seed(self.seed, epoch, self.rank, worker, plan)
        n = sum(p.stop - p.start for p in plan.pieces)
        order, skip = [], frozenset()
        if start is not None and start.taken:
            order = position.consumed_stream(plan, n, buffer, seed, start.taken)
            skip = position.skippable(plan, n, order)
        records = read_pieces(self.shards, plan.pieces, opener=self.opener, skip=skip, readahead=self.readahead,
                              shard_bytes=self.shard_bytes, counters=self._counters, digests=self.digests,
                              bad_shards=self.bad_shards, views=True)
        records = workers_.publishing(records, self._counters, self.store, info.id if info is not None else 0)
        records = activity.reading(records, self.activity, info.id if info is not None else 0)
        if cfg.train:
            records = position.worker_stream(records, plan, buffer, seed)
        if order:
            records = resume_stream(records, start.taken, exact=plan.shuffle_key is None)
        aug = dec.make_aug(cfg.aug) if cfg.train else None

        def refill():  # the records of the batch a starved batch repeats, read again (rare: spares ran out)
            a, b = start.refill_start, start.refill_stop
            copies = position.copy_numbers(plan, order, a, b)
            records = read_pieces(self.shards, pieces_at(plan.pieces, order[a:b]), opener=self.opener,
                                  digests=self.digests, bad_shards=self.bad_shards, views=True)
            return (rec._replace(copy=c) for rec, c in zip(records, copies))

        # repeated augmentation: the copies of a sample on different (virtual) ranks get different crops
        crops = crop_seed(self.seed, epoch, position.copies_rank(plan, self.rank))
        formed = batches(iter(records), plan.batch_sizes, cfg, crops, fill=cfg.train, strict=self.strict,
                         shared=info is not None, aug=aug, ring=self._ring if info is not None else None,
                         start=start, refill=refill)
        yield from (outgoing(*b) for b in formed) if info is not None and self.by_slot else formed


class ShardLoader:
    """Iterable of ``(images uint8 [B,3,H,W] contiguous, labels int64 [B])`` for one rank and epoch.

    ``len()`` is the exact number of batches this rank yields (eval: minus batches whose samples
    were all bad; after ``resume``, the batches still to come). ``stats`` counts what the current
    (or last) iteration has yielded so far: it is replaced when an iteration starts and updated
    with every batch, so an epoch cut short (the trainer's ``--limit-batches``) still reports the
    batches, samples and bad samples it saw. ``position(n)`` is where the loader stood after the
    n-th batch of the iteration: what a mid-epoch checkpoint saves and ``resume`` continues from."""

    def __init__(self, dataset: ShardDataset, *, workers: int, pin_memory: bool, persistent_workers: bool,
                 prefetch_factor: int, keys: bool = False):
        self.dataset = dataset
        self.keys = keys  # yield (images, labels, keys): the val samples' keys (ReaL labels)
        kw = {}
        if workers > 0:
            kw = dict(persistent_workers=persistent_workers, prefetch_factor=prefetch_factor,
                      worker_init_fn=workers_.quiet_worker)
        # A generator of its own: the DataLoader draws a seed from it at every iteration start, which
        # would otherwise come from torch's global generator and shift the model's dropout masks by
        # however many times a loader was iterated (a resumed run iterates the epoch it resumes once more).
        generator = torch.Generator().manual_seed(dataset.seed)
        # without pinning the main process keeps the workers' batch blocks (slots.outgoing); a pinning
        # DataLoader hands it copies, so there they travel as tensors every time
        dataset.by_slot = workers > 0 and not pin_memory
        self._loader = DataLoader(dataset, batch_size=None, num_workers=workers, pin_memory=pin_memory,
                                  generator=generator, **kw)
        self._releaser = Releaser(dataset.board, keep_blocks=dataset.by_slot)
        self.stats: dict = {}
        self._warned = 0
        self._progress: EpochProgress | None = None
        self._start: dict | None = None  # the position `resume` set for the resumed epoch
        self._iterators: weakref.WeakSet = weakref.WeakSet()  # this loader's live worker iterators
        self.wait = activity.Wait()  # the main process's wait for the next batch (trainer/watch/stall.py)

    def store_stats(self, seconds: float | None = None) -> dict:
        """What reading remote shards cost so far (all iterations), per DataLoader worker and in all:
        bytes and ranged requests read through the read-ahead, seconds the workers waited for the
        store, and the most bytes a worker held for read-ahead. Zeros for local shards and with a
        shard cache (its downloads are not counted). With ``seconds`` (the wall time they took):
        also bytes/s, requests/s and the fraction of the workers' time spent waiting on the store."""
        return workers_.store_summary(self.dataset.store, seconds)

    def close(self) -> None:
        """Stop the worker processes now (persistent ones, and those of an iteration left unfinished);
        a later iteration starts new ones."""
        for iterator in list(self._iterators):
            workers_.shutdown(iterator)
        self._loader._iterator = None
        self._releaser.blocks.clear()

    @property
    def epoch(self) -> int:
        return int(self.dataset.state[EPOCH])

    @property
    def res(self) -> int:
        return int(self.dataset.state[RES])

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (shard order, shuffle and crop seeds) for the next iteration."""
        self.dataset.state[EPOCH] = int(epoch)

    def set_resolution(self, res: int) -> None:
        """Train crop size from the next iteration on (progressive resizing)."""
        if res < 1:
            raise ValueError(f"resolution must be positive, got {res}")
        self.dataset.state[RES] = int(res)

    def __len__(self) -> int:
        epoch = self.epoch
        return sum(len(p.batch_sizes) - (s.batches if (s := self.dataset.start_position(epoch, w)) else 0)
                   for w, p in enumerate(self.dataset.plan()))

    @property
    def num_samples(self) -> int:
        return sum(p.num_samples for p in self.dataset.plan())

    def plan_state(self) -> dict:
        """What the epoch's plan depends on besides the epoch: saved beside the positions."""
        d = self.dataset
        rest = int(d.state[REST]) == self.epoch
        return {"world_size": d.world_size, "workers": max(1, d.workers), "batch_size": d.batch_size,
                "shuffle_buffer": d.shuffle_buffer, "seed": d.seed, "sizes": list(d.sizes), "repeats": d.repeats,
                "ra_micro_batches": d.spread,
                "remaining": position.pack(d.remaining.numpy()) if rest else None}

    def _keep(self) -> int:
        """Positions kept back: a stop inside a step of ``accumulate`` saves from that step's start."""
        return position.SNAPSHOTS + self.dataset.accumulate

    def position(self, batches: int | None = None) -> dict:
        """This rank's position after ``batches`` batches of the current iteration (default: all
        handed over so far): plain numbers, see ``position.EpochProgress``."""
        progress = self._progress
        if progress is None or progress.epoch != self.epoch:
            start = self._start if self._start and self._start["epoch"] == self.epoch else None
            progress = EpochProgress(self.epoch, self.dataset.streams, start, keep=self._keep())
        return progress.state(batches)

    def resume(self, plan: dict, positions: list[dict]) -> dict:
        """Continue epoch ``positions[0]["epoch"]`` where every rank's ``position`` left it.

        Same layout (world size, workers): each worker continues its own stream exactly. Another
        layout: the samples not yet consumed are planned afresh for this one (``plan.rest_plan``),
        each exactly once; rank 0 carries the earlier ranks' counts and fingerprint. Returns
        ``{"exact": bool, "samples_left": N | None}``; PlanError (one line) when the plan cannot
        be continued: other shards, batch size, seed or shuffle, or a rest too small to share."""
        d = self.dataset
        epoch = int(positions[0]["epoch"])
        position.check_saved_plan(plan, {"sizes": list(d.sizes), "batch_size": d.batch_size, "seed": d.seed,
                                         "shuffle_buffer": d.shuffle_buffer, "repeats": d.repeats,
                                         "ra_micro_batches": d.spread})
        self.set_epoch(epoch)
        same = plan["world_size"] == d.world_size and plan["workers"] == max(1, d.workers)
        if same:
            rest = position.unpack(plan.get("remaining"), sum(d.sizes))
            if rest is not None:
                d.remaining.copy_(torch.from_numpy(rest))
            d.state[REST] = epoch if rest is not None else -1
            mine = positions[d.rank]
            d.resume_at.copy_(torch.tensor([list(w) for w in mine["workers"]], dtype=torch.int64))
            d.state[RESUMED] = epoch
            self._start = mine
            return {"exact": True, "samples_left": None}
        if d.repeats > 1:
            raise position.repeated_elsewhere(d.repeats, plan, (d.world_size, max(1, d.workers)))
        rest = ~position.consumed_mask(list(d.sizes), plan, positions)
        d.remaining.copy_(torch.from_numpy(rest))
        d.state[REST], d.state[RESUMED] = epoch, -1
        d.plan(epoch)  # PlanError here if the rest cannot be shared out
        carried = {k: sum(int(p.get(k, 0)) for p in positions) for k in ("samples", "bad_samples", "duplicated")}
        fp = fingerprint.combine(*(p.get("fingerprint", fingerprint.EMPTY) for p in positions))
        self._start = {"epoch": epoch, **(carried if d.rank == 0 else {}),
                       "fingerprint": list(fp) if d.rank == 0 else list(fingerprint.EMPTY),
                       "workers": [tuple(StreamPosition())] * max(1, d.workers)}
        return {"exact": False, "samples_left": int(rest.sum())}

    def _report_bad(self, bad: tuple, stats: dict) -> None:
        for key, url, reason in bad:
            stats["bad_samples"] += 1
            if len(stats["bad_keys"]) < _BAD_KEYS_KEPT:
                stats["bad_keys"].append(key)
            n = stats["bad_samples"]
            if n <= _WARN_FIRST or n % _WARN_EVERY == 0:
                log.warning("skipped bad sample %r in %s: %s (%d bad so far this epoch)", key, url, reason, n)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch = self.epoch
        start = self._start if int(self.dataset.state[RESUMED]) == epoch or int(self.dataset.state[REST]) == epoch else None
        streams, planned = max(1, self.dataset.workers), self.dataset.streams
        progress = self._progress = EpochProgress(epoch, planned, start if start and start["epoch"] == epoch else None,
                                                  keep=self._keep())
        rotation = self.dataset.rotation(epoch)
        stats = self.stats = {"epoch": epoch, "samples": 0, "batches": 0, "bad_samples": 0, "bad_keys": [],
                              "duplicated": 0, "recycled": 0}
        batches_in = iter(self._loader)
        if self.dataset.workers > 0:
            self._iterators.add(batches_in)
            workers_.track(batches_in)
        try:
            for images, labels, info in self.wait.around(batches_in):
                self._releaser.release_done()  # batches handed out earlier that nobody holds any more
                images, labels = self._releaser.receive(images, labels, info)
                if info.bad:
                    self._report_bad(info.bad, stats)
                stats["duplicated"] += info.duplicated
                stats["recycled"] += info.recycled
                stats["samples"] += len(labels)
                stats["batches"] += 1
                # batch j of the rank is plan worker j % workers's; with spread copies, stream j % planned's
                stream = (info.worker + rotation) % streams if planned == streams else \
                    (progress.base_batches + progress.batches) % planned
                progress.add(info, len(labels), stream=stream)
                stats["fingerprint"] = progress.fingerprint
                yield (images, labels, info.keys) if self.keys else (images, labels)
        finally:
            if int(self.dataset.state[RESUMED]) == epoch:  # a resume position serves one iteration
                self.dataset.state[RESUMED] = -1
            self._start = None
            if not self._loader.persistent_workers:  # the next iteration's workers bring new blocks
                self._releaser.blocks.clear()

