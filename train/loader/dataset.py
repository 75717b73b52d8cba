"""Streaming shard loader: manifest -> shard list -> per-epoch plan -> read -> shuffle -> decode -> batch.

The epoch is planned up front as a pure function of (shard sizes, seed, epoch, rank, world size,
workers, batch size): see ``epoch_plan`` and docs/loader.md. Each DataLoader worker reads its
contiguous range of the epoch's sample sequence (which may start and stop mid-shard), shuffles in
a bounded buffer, decodes (uint8 only) and forms whole batches itself, so the DataLoader runs with
``batch_size=None`` and every rank gets exactly ``len(loader)`` batches.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from imagenet_shards.pipeline import storage
from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader.cache import ShardCache

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
_WARN_FIRST, _WARN_EVERY = 10, 1000
_BAD_KEYS_KEPT = 20


class BadSampleError(ValueError):
    """A sample could not be used (strict mode): the message names the key and the shard."""


# ----------------------------------------------------------------------------- I/O

def open_url(url: str, mode: str = "rb"):
    """Open a local path or a URL (file://, http(s)://, s3://, gs://...) as a file object.

    Every read of the loader goes through here, and from here through ``imagenet_shards.pipeline.storage.fs``, the
    project's one I/O layer: plain paths use the builtin ``open`` (no layer in between); a remote
    file retries transient errors (5xx, resets, timeouts) with backoff and resumes at the byte where
    it stopped, so a shard's samples come out exactly once; a permanent error (404, 403) raises at
    once, naming the (redacted) URL."""
    return storage.open_url(url, mode)


def join_url(base: str, rel: str) -> str:
    """``rel`` relative to the dataset root ``base`` (a directory or a URL); absolute ``rel`` wins."""
    if "://" in rel or rel.startswith("/"):
        return rel
    return base.rstrip("/") + "/" + rel


def read_manifest(data: str) -> dict:
    """Load DATA/manifest.json. Raises FileNotFoundError or ValueError with a one-line reason."""
    url = join_url(data, MANIFEST_NAME)
    where = storage.redact(url)
    try:
        with open_url(url, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"no {MANIFEST_NAME} at {where}: point DATA at a prepare-shards output") from None
    try:
        manifest = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where} is not valid JSON ({e}); re-run prepare-shards or audit-shards") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict):
        raise ValueError(f"{where} has no 'splits' table; is it an imagenet-shards manifest?")
    return manifest


class Shard(NamedTuple):
    url: str
    num_samples: int


def split_shards(manifest: dict, data: str, split: str) -> list[Shard]:
    """The split's shards in manifest order, with URLs resolved against DATA."""
    splits = manifest["splits"]
    if split not in splits:
        raise ValueError(f"split {split!r} is not in the manifest (has: {', '.join(sorted(splits))})")
    try:
        return [Shard(join_url(data, s["url"]), int(s["num_samples"])) for s in splits[split]["shards"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"manifest split {split!r}: malformed shard entry ({e!r})") from None


# ----------------------------------------------------------------------------- the epoch plan (pure)

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


# ----------------------------------------------------------------------------- reading stages

class Record(NamedTuple):
    key: str
    url: str
    jpg: bytes | None
    cls: bytes | None


def _key_and_ext(name: str) -> tuple[str, str]:
    # webdataset convention: the key is everything before the first dot of the basename
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1:]


_BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")


def _skip(f, n: int, seekable: bool) -> None:
    if seekable:
        f.seek(n, 1)
        return
    while n > 0:
        chunk = f.read(min(n, 1 << 20))
        if not chunk:
            return
        n -= len(chunk)


def _octal(field: bytes) -> int:
    if field[:1] in (b"\x80", b"\xff"):  # GNU base-256 for sizes >= 8 GiB
        return int.from_bytes(field[1:], "big", signed=field[:1] == b"\xff")
    return int(field.rstrip(b"\0 ").lstrip(b" ") or b"0", 8)


def tar_files(f, url: str) -> Iterator[tuple[str, Callable[[], bytes]]]:
    """(name, read) for each regular file of a tar stream; ``read()`` returns its bytes, and a file
    whose ``read`` is not called is skipped (seek, or read past on a stream).

    A small reader for what tar writers emit (ustar/GNU, GNU long names, pax path/size): several
    times faster than ``tarfile`` in Python, which matters at thousands of samples per second.
    Damaged headers raise ValueError naming the URL and offset."""
    seekable = bool(getattr(f, "seekable", lambda: False)())
    offset, longname, pax = 0, None, {}
    while True:
        block = f.read(_BLOCK)
        if len(block) < _BLOCK:
            if not block:
                return  # no end-of-archive marker: tolerated, like tar(1)
            raise ValueError(f"{url}: truncated tar header at byte {offset}; run audit-shards")
        if block.count(0) == _BLOCK:
            return
        stored = _octal(block[148:156])
        if stored != sum(block[:148]) + 256 + sum(block[156:]):
            raise ValueError(f"{url}: corrupt tar header at byte {offset}; run audit-shards")
        kind = block[156:157]
        size = int(pax.get("size", 0)) or _octal(block[124:136])
        padded = (size + _BLOCK - 1) & ~(_BLOCK - 1)
        offset += _BLOCK + padded
        if kind in (b"L", b"x", b"g"):
            meta = f.read(padded)[:size]
            if kind == b"L":
                longname = meta.rstrip(b"\0").decode("utf-8", "surrogateescape")
            elif kind == b"x":
                pax = _pax_records(meta)
            continue
        if longname is not None:
            name = longname
        elif "path" in pax:
            name = pax["path"]
        else:
            name = block[:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            if block[257:262] == b"ustar" and block[345] != 0:
                name = block[345:500].split(b"\0", 1)[0].decode("utf-8", "surrogateescape") + "/" + name
        longname, pax = None, {}
        if kind not in _REGULAR:
            _skip(f, padded, seekable)
            continue
        done = []

        def read(size=size, padded=padded):
            done.append(True)
            data = f.read(size)
            if len(data) < size:
                raise ValueError(f"{url}: truncated tar member {name!r}; run audit-shards")
            _skip(f, padded - size, seekable)
            return data
        yield name, read
        if not done:
            _skip(f, padded, seekable)


def _pax_records(meta: bytes) -> dict:
    out, pos = {}, 0
    while pos < len(meta):
        space = meta.index(b" ", pos)
        length = int(meta[pos:space])
        key, _, value = meta[space + 1:pos + length - 1].partition(b"=")
        out[key.decode()] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def read_shard(url: str, start: int = 0, stop: int | None = None, *, opener=open_url) -> Iterator[Record]:
    """Samples ``[start, stop)`` of one shard, as records of raw bytes (.jpg and .cls only).

    Streams the tar (works for non-seekable URLs); skipped samples and other members are passed
    over, not read into memory. A shard that ends before ``stop`` disagrees with the manifest:
    ValueError naming the URL (redacted, as everywhere the URL is shown)."""
    index, key, fields = -1, None, {}
    shown = storage.redact(url)
    with opener(url, "rb") as f:
        for name, read in tar_files(f, shown):
            k, ext = _key_and_ext(name)
            if k != key:
                if key is not None and start <= index:
                    yield Record(key, shown, fields.get("jpg"), fields.get("cls"))
                index += 1
                if stop is not None and index >= stop:
                    return
                key, fields = k, {}
            if index >= start and ext in ("jpg", "cls"):
                fields[ext] = read()
        if key is not None and start <= index:
            yield Record(key, shown, fields.get("jpg"), fields.get("cls"))
        index += 1
    if stop is not None and index < stop:
        raise ValueError(f"{shown}: the manifest says it holds at least {stop} samples but it has {index}; "
                         f"run audit-shards on this shard set")


def read_pieces(shards: list[Shard], pieces: Iterable[Piece], *, opener=open_url) -> Iterator[Record]:
    """Records of the planned pieces, in order."""
    for p in pieces:
        yield from read_shard(shards[p.shard].url, p.start, p.stop, opener=opener)


def shuffle_buffer(items: Iterable, size: int, rng: random.Random, initial: int = 100) -> Iterator:
    """Bounded shuffle (webdataset's scheme): fill to ``initial``, then yield a random element per
    element read while growing to ``size``. Memory: ``size`` raw records."""
    if size <= 1:
        yield from items
        return
    initial = min(initial, size)
    buf: list = []
    it = iter(items)
    for x in it:
        buf.append(x)
        if len(buf) < size:
            nxt = next(it, None)
            if nxt is not None:
                buf.append(nxt)
        if len(buf) >= initial:
            k = rng.randrange(len(buf))
            buf[k], buf[-1] = buf[-1], buf[k]
            yield buf.pop()
    while buf:
        k = rng.randrange(len(buf))
        buf[k], buf[-1] = buf[-1], buf[k]
        yield buf.pop()


# ----------------------------------------------------------------------------- decode + batch

@dataclass(frozen=True)
class DecodeConfig:
    train: bool
    res: int = 224
    val_resize: int = 256
    val_crop: int = 224
    scale: tuple = (0.08, 1.0)
    ratio: tuple = (3 / 4, 4 / 3)
    hflip: bool = True
    decoder: str = "pil"
    aug: str | None = None

    @property
    def out_size(self) -> int:
        return self.res if self.train else self.val_crop


def decode_record(rec: Record, cfg: DecodeConfig, rng: random.Random, aug=None) -> tuple[np.ndarray, int]:
    """(uint8 [3,S,S] array, label) for one record; DecodeError names what is wrong with it."""
    if rec.jpg is None:
        raise dec.DecodeError("missing .jpg")
    if rec.cls is None:
        raise dec.DecodeError("missing .cls")
    label = dec.decode_label(rec.cls)
    if cfg.train:
        img = dec.decode_train(rec.jpg, res=cfg.res, rng=rng, scale=cfg.scale, ratio=cfg.ratio,
                               hflip=cfg.hflip, decoder=cfg.decoder)
        if aug is not None:
            t = torch.from_numpy(np.ascontiguousarray(img))
            img = dec.apply_aug(aug, t, rng.getrandbits(63)).numpy()
    else:
        img = dec.decode_val(rec.jpg, resize=cfg.val_resize, crop=cfg.val_crop, decoder=cfg.decoder)
    return img, label


def _new_batch(n: int, size: int, shared: bool) -> torch.Tensor:
    shape = (n, 3, size, size)
    if shared:  # allocate straight in shared memory, as default_collate does: no copy at hand-off
        try:
            storage = torch.UntypedStorage._new_shared(math.prod(shape))
            return torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)
        except (AttributeError, RuntimeError):
            pass
    return torch.empty(shape, dtype=torch.uint8)


class BatchInfo(NamedTuple):
    bad: tuple          # ((key, url, reason), ...) for samples skipped while forming this batch
    duplicated: int     # train only: slots refilled with an already-used sample (spares ran out)


def batches(records: Iterator[Record], batch_sizes: Iterable[int], cfg: DecodeConfig, rng: random.Random, *,
            fill: bool, strict: bool = False, shared: bool = False, aug=None) -> Iterator[tuple]:
    """Form batches from records: yields (images uint8 [n,3,S,S], labels int64 [n], BatchInfo).

    fill=True (train): each batch gets exactly its size in *good* samples, pulling further records
    to replace bad ones; if the records run out, the remaining slots repeat good samples of this
    (or the previous) batch and count as ``duplicated``. fill=False (eval): batch i is exactly the
    next ``batch_sizes[i]`` records minus the bad ones; a batch with none left is not yielded.
    """
    S = cfg.out_size
    prev = None
    for n in batch_sizes:
        images = _new_batch(n, S, shared)
        slots = images.numpy()
        labels = torch.empty(n, dtype=torch.int64)
        bad, filled, dup, taken = [], 0, 0, 0
        while filled < n and (fill or taken < n):
            rec = next(records, None)
            if rec is None:
                if not fill:
                    break
                src_images, src_labels, src_n = (images, labels, filled) if filled else prev or (None, None, 0)
                if not src_n:
                    raise RuntimeError("no decodable sample left in this worker's range: cannot form a "
                                       "full batch (is every image in these shards bad?)")
                while filled < n:
                    slots[filled] = src_images[filled % src_n].numpy()
                    labels[filled] = src_labels[filled % src_n]
                    filled += 1
                    dup += 1
                break
            taken += 1
            try:
                img, label = decode_record(rec, cfg, rng, aug)
            except dec.DecodeError as e:
                if strict:
                    raise BadSampleError(f"bad sample {rec.key!r} in {rec.url}: {e}") from None
                bad.append((rec.key, rec.url, str(e)))
                continue
            slots[filled] = img
            labels[filled] = label
            filled += 1
        if filled == 0:
            continue
        if filled < n:
            images, labels = images[:filled], labels[:filled]
        prev = (images, labels, filled)
        yield images, labels, BatchInfo(tuple(bad), dup)


# ----------------------------------------------------------------------------- dataset + loader

def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([p & 0xFFFFFFFF for p in parts]).generate_state(2, np.uint64)[0])


class ShardDataset(IterableDataset):
    """One rank's view of a split; iterating it (in a worker or in-process) yields its planned batches.

    Epoch and resolution live in a small shared tensor so that persistent workers see
    ``set_epoch`` / ``set_resolution`` made in the main process."""

    def __init__(self, shards: list[Shard], *, batch_size: int, cfg: DecodeConfig, workers: int, seed: int,
                 rank: int, world_size: int, shuffle_buffer: int, strict: bool, epoch: int = 0,
                 cache: ShardCache | None = None):
        self.shards = shards
        self.opener = cache.open if cache is not None else open_url
        # what imagenet_shards.pipeline.storage.fs was told in this process (storage options, retry policy), for
        # workers that are spawned rather than forked
        self.storage_state = (storage.options_snapshot(), storage.retry_policy())
        self.sizes = [s.num_samples for s in shards]
        self.batch_size, self.cfg, self.workers = batch_size, cfg, workers
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.shuffle_buffer, self.strict = shuffle_buffer, strict
        self.state = torch.tensor([epoch, cfg.res], dtype=torch.int64).share_memory_()

    def plan(self, epoch: int | None = None) -> list[WorkerPlan]:
        return epoch_plan(self.sizes, batch_size=self.batch_size, rank=self.rank, world_size=self.world_size,
                          workers=max(1, self.workers), train=self.cfg.train, seed=self.seed,
                          epoch=int(self.state[0]) if epoch is None else epoch)

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
        if cfg.train:
            records = shuffle_buffer(records, self.shuffle_buffer, random.Random(_seed(*ids, 1)))
        aug = dec.make_aug(cfg.aug) if cfg.train else None
        yield from batches(iter(records), plan.batch_sizes, cfg, random.Random(_seed(*ids, 2)),
                           fill=cfg.train, strict=self.strict, shared=info is not None, aug=aug)


class ShardLoader:
    """Iterable of ``(images uint8 [B,3,H,W] contiguous, labels int64 [B])`` for one rank and epoch.

    ``len()`` is the exact number of batches this rank yields (eval: minus batches whose samples
    were all bad). ``stats`` describes the last finished epoch."""

    def __init__(self, dataset: ShardDataset, *, workers: int, pin_memory: bool, persistent_workers: bool,
                 prefetch_factor: int):
        self.dataset = dataset
        kw = {}
        if workers > 0:
            kw = dict(persistent_workers=persistent_workers, prefetch_factor=prefetch_factor)
        self._loader = DataLoader(dataset, batch_size=None, num_workers=workers, pin_memory=pin_memory, **kw)
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
        stats = {"epoch": self.epoch, "samples": 0, "batches": 0, "bad_samples": 0, "bad_keys": [],
                 "duplicated": 0}
        for images, labels, info in self._loader:
            if info.bad:
                self._report_bad(info.bad, stats)
            stats["duplicated"] += info.duplicated
            stats["samples"] += len(labels)
            stats["batches"] += 1
            yield images, labels
        self.stats = stats


def make_loader(data: str, split: str, batch_size: int, *, train: bool | None = None, workers: int = 4,
                seed: int = 0, epoch: int = 0, rank: int = 0, world_size: int = 1, res: int = 224,
                val_resize: int = 256, val_crop: int = 224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                hflip: bool = True, decoder: str = "auto", aug: str | None = None, shuffle_buffer: int = 2000,
                pin_memory: bool = False, persistent_workers: bool = False, prefetch_factor: int = 4,
                strict: bool = False, cache_dir: str | None = None, cache_bytes: int | None = None) -> ShardLoader:
    """A ``ShardLoader`` over ``split`` of the shard set at DATA (a directory or URL with manifest.json).

    ``train`` defaults to ``split == "train"``: random-resized crops, shuffled, full batches only.
    Otherwise: centre crops, manifest order, every sample exactly once (see docs/loader.md).
    ``cache_dir``: keep local copies of remote shards there, at most ``cache_bytes`` (default 90%
    of that disk), least recently used evicted first (train/shard_cache.py)."""
    if train is None:
        train = split == "train"
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if val_crop > val_resize:
        raise ValueError(f"val_crop {val_crop} is larger than val_resize {val_resize}")
    dec.make_aug(aug)  # validate the name early
    cfg = DecodeConfig(train=train, res=res, val_resize=val_resize, val_crop=val_crop, scale=tuple(scale),
                       ratio=tuple(ratio), hflip=hflip, decoder=dec.resolve_decoder(decoder), aug=aug)
    shards = split_shards(read_manifest(data), data, split)
    cache = ShardCache(cache_dir, cache_bytes) if cache_dir else None
    dataset = ShardDataset(shards, batch_size=batch_size, cfg=cfg, workers=workers, seed=seed, rank=rank,
                           world_size=world_size, shuffle_buffer=shuffle_buffer, strict=strict, epoch=epoch,
                           cache=cache)
    return ShardLoader(dataset, workers=workers, pin_memory=pin_memory, persistent_workers=persistent_workers,
                       prefetch_factor=prefetch_factor)
