"""Shuffle and batching stages: records -> bounded shuffle -> decode -> whole uint8 batches.

Plain generators over the records of ``reading``. A sample that cannot be used is a bad sample:
skipped and reported in the batch's ``BatchInfo`` (train batches are refilled from the stream), or
with ``strict`` a ``BadSampleError``. Decoding itself is ``decode`` (pure, per sample).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

import numpy as np
import torch

from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader.reading import Record
from imagenet_shards.train.loader.slots import SlotRing, fresh_shared


class BadSampleError(ValueError):
    """A sample could not be used (strict mode): the message names the key and the shard."""


def with_counts(records: Iterable, counts: Iterable[int]) -> Iterator[tuple]:
    """(record, how many times to emit it) pairs, in read order (repeated augmentation)."""
    for rec, n in zip(records, counts):
        if n > 0:
            yield rec, n


def expand_counts(pairs: Iterable[tuple]) -> Iterator:
    """Each record of (record, n) pairs n times in a row."""
    for rec, n in pairs:
        for _ in range(n):
            yield rec


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
    val_ratio: float | None = None  # FFCV's centre crop of this ratio, resized to val_crop (decode_val)

    @property
    def out_size(self) -> int:
        return self.res if self.train else self.val_crop


def decode_record(rec: Record, cfg: DecodeConfig, rng: random.Random, aug=None,
                  out: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """(uint8 [3,S,S] array, label) for one record, the image written into ``out`` when given (a
    batch slot; with an augmentation, only after it ran); DecodeError names what is wrong with it."""
    if rec.jpg is None:
        raise dec.DecodeError("missing .jpg")
    if rec.cls is None:
        raise dec.DecodeError("missing .cls")
    label = dec.decode_label(rec.cls)
    if cfg.train:
        img = dec.decode_train(rec.jpg, res=cfg.res, rng=rng, scale=cfg.scale, ratio=cfg.ratio,
                               hflip=cfg.hflip, decoder=cfg.decoder, out=out if aug is None else None)
        if aug is not None:
            t = torch.from_numpy(np.ascontiguousarray(img))
            img = dec.apply_aug(aug, t, rng.getrandbits(63)).numpy()
            if out is not None:
                out[...] = img
                img = out
    else:
        img = dec.decode_val(rec.jpg, resize=cfg.val_resize, crop=cfg.val_crop, decoder=cfg.decoder, out=out,
                             ratio=cfg.val_ratio)
    return img, label


def _new_batch(n: int, size: int, shared: bool, ring: SlotRing | None) -> tuple[torch.Tensor, int, int, bool]:
    """(images, slot, token, recycled): a block of the worker's ring, or a fresh one (slot -1)."""
    shape = (n, 3, size, size)
    if ring is not None:
        return ring.take(shape)
    if shared:  # allocate straight in shared memory, as default_collate does: no copy at hand-off
        return fresh_shared(shape), -1, 0, False
    return torch.empty(shape, dtype=torch.uint8), -1, 0, False


class BatchInfo(NamedTuple):
    bad: tuple          # ((key, url, reason), ...) for samples skipped while forming this batch
    duplicated: int     # train only: slots refilled with an already-used sample (spares ran out)
    worker: int = 0     # the worker, its ring slot (-1: a fresh block) and that use's token: what the
    slot: int = -1      # main process writes into the release board once the batch is gone (slots.py)
    token: int = 0
    recycled: bool = False  # the batch is in a block an earlier batch used (no fresh shared memory)
    keys: tuple = ()        # eval only: the samples' keys, in batch order (ReaL labels match by key)


def batches(records: Iterator[Record], batch_sizes: Iterable[int], cfg: DecodeConfig, rng: random.Random, *,
            fill: bool, strict: bool = False, shared: bool = False, aug=None,
            ring: SlotRing | None = None) -> Iterator[tuple]:
    """Form batches from records: yields (images uint8 [n,3,S,S], labels int64 [n], BatchInfo).

    fill=True (train): each batch gets exactly its size in *good* samples, pulling further records
    to replace bad ones; if the records run out, the remaining slots repeat good samples of this
    (or the previous) batch and count as ``duplicated``. fill=False (eval): batch i is exactly the
    next ``batch_sizes[i]`` records minus the bad ones; a batch with none left is not yielded.
    ``ring``: take batch memory from a worker's ring of reusable shared blocks (``slots``).
    """
    S = cfg.out_size
    prev = None
    for n in batch_sizes:
        images, slot, token, recycled = _new_batch(n, S, shared, ring)
        slots = images.numpy()
        labels = torch.empty(n, dtype=torch.int64)
        label_slots = labels.numpy()  # a numpy store is ~0.1 us, a tensor's __setitem__ ~2-5 us
        bad, filled, dup, taken = [], 0, 0, 0
        keys = [] if not fill else None
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
                _, label = decode_record(rec, cfg, rng, aug, out=slots[filled])
            except dec.DecodeError as e:
                if strict:
                    raise BadSampleError(f"bad sample {rec.key!r} in {rec.url}: {e}") from None
                bad.append((rec.key, rec.url, str(e)))
                continue
            label_slots[filled] = label
            filled += 1
            if keys is not None:
                keys.append(rec.key)
        if filled == 0:
            continue
        if filled < n:
            images, labels = images[:filled], labels[:filled]
        prev = (images, labels, filled)
        yield images, labels, BatchInfo(tuple(bad), dup, ring.worker if ring else 0, slot, token, recycled,
                                        tuple(keys or ()))
