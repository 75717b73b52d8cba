"""Shuffle and batching stages: records -> bounded shuffle -> decode -> whole uint8 batches.

Plain generators over the records of ``reading``. A sample that cannot be used is a bad sample:
skipped and reported in the batch's ``BatchInfo`` (train batches are refilled from the stream), or
with ``strict`` a ``BadSampleError``. Decoding itself is ``decode`` (pure, per sample), with one
random stream per sample (``sample_rng``). Each batch also reports the worker's position in its
stream (``StreamPosition``: what a resumed epoch starts from) and the batch's data fingerprint.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple

import numpy as np
import torch

from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader import decode_pixels as pix
from imagenet_shards.train.loader import fingerprint
from imagenet_shards.train.loader.reading import Record
from imagenet_shards.train.loader.slots import SlotRing, fresh_shared


class BadSampleError(ValueError):
    """A sample could not be used (strict mode): the message names the key and the shard."""


def with_counts(records: Iterable, counts: Iterable[int], first: int = 0) -> Iterator[tuple]:
    """(record, how many times to emit it, the first copy's number) in read order (repeated
    augmentation); ``first`` is the first record's: a worker whose range starts inside a sample's
    copies emits the later ones."""
    for i, (rec, n) in enumerate(zip(records, counts)):
        if n > 0:
            yield rec, n, first if i == 0 else 0


def expand_counts(triples: Iterable[tuple]) -> Iterator:
    """Each record of (record, n, first) n times in a row, numbered ``first, first + 1, ...``
    (``Record.copy``: the copies of a sample get different crops); anything else (a stand-in, a
    position) is repeated as it is."""
    for rec, n, first in triples:
        if isinstance(rec, Record):
            for k in range(n):
                yield rec._replace(copy=first + k)
        else:
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
    interpolation: str = "bilinear"  # the crops' filter (augment.interpolation; "random": train only)
    form: str = "jpeg"  # the set's stored form (format.manifest.manifest_form)
    dct_scaling: str = "auto"  # JPEG crops: decode.DCT_SCALINGS ("off": every crop at full size)

    @property
    def out_size(self) -> int:
        return self.res if self.train else self.val_crop


def decode_record(rec: Record, cfg: DecodeConfig, rng: random.Random, aug=None,
                  out: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """(uint8 [3,S,S] array, label) for one record, the image written into ``out`` when given (a
    batch slot; with an augmentation, only after it ran); DecodeError names what is wrong with it."""
    if rec.bad is not None:
        raise dec.DecodeError(rec.bad)
    if rec.jpg is None:
        raise dec.DecodeError("missing .yuv420" if cfg.form == pix.FORM else "missing .jpg")
    if rec.cls is None:
        raise dec.DecodeError("missing .cls")
    label = dec.decode_label(rec.cls)
    pixel = cfg.form == pix.FORM
    if cfg.train:
        slot = out if aug is None else None
        if pixel:
            img = pix.pixels_train(rec.jpg, rec.meta, res=cfg.res, rng=rng, scale=cfg.scale, ratio=cfg.ratio,
                                   hflip=cfg.hflip, out=slot, interpolation=cfg.interpolation)
        else:
            img = dec.decode_train(rec.jpg, res=cfg.res, rng=rng, scale=cfg.scale, ratio=cfg.ratio,
                                   hflip=cfg.hflip, decoder=cfg.decoder, out=slot, interpolation=cfg.interpolation,
                                   dct_scaling=cfg.dct_scaling)
        if aug is not None:
            t = torch.from_numpy(np.ascontiguousarray(img))
            img = dec.apply_aug(aug, t, rng.getrandbits(63)).numpy()
            if out is not None:
                out[...] = img
                img = out
    elif pixel:
        img = pix.pixels_val(rec.jpg, rec.meta, resize=cfg.val_resize, crop=cfg.val_crop, out=out, ratio=cfg.val_ratio,
                             interpolation=cfg.interpolation)
    else:
        img = dec.decode_val(rec.jpg, resize=cfg.val_resize, crop=cfg.val_crop, decoder=cfg.decoder, out=out,
                             ratio=cfg.val_ratio, interpolation=cfg.interpolation, dct_scaling=cfg.dct_scaling)
    return img, label


def sample_rng(seed: int, rec: Record) -> random.Random:
    """The random stream of one sample's crop and augmentation in one epoch: a function of the epoch's
    ``seed``, the sample's place in the split (``rec.shard``, ``rec.index``) and, with repeated
    augmentation, which copy it is (``rec.copy``). So crops do not depend on the worker or on what
    it decoded before, and a resumed epoch can start anywhere without replaying the decodes it
    skips (a few µs per sample to make: seeding Python's Mersenne Twister)."""
    return random.Random((seed << 96) | ((rec.copy & 0xFFFFFFFF) << 64) | ((rec.shard & 0xFFFFFFFF) << 32)
                         | (rec.index & 0xFFFFFFFF))


def _new_batch(n: int, size: int, shared: bool, ring: SlotRing | None) -> tuple[torch.Tensor, int, int, bool]:
    """(images, slot, token, recycled): a block of the worker's ring, or a fresh one (slot -1)."""
    shape = (n, 3, size, size)
    if ring is not None:
        return ring.take(shape)
    if shared:  # allocate straight in shared memory, as default_collate does: no copy at hand-off
        return fresh_shared(shape), -1, 0, False
    return torch.empty(shape, dtype=torch.uint8), -1, 0, False


class StreamPosition(NamedTuple):
    """Where one worker is in its epoch: batches yielded, records taken from its (shuffled) stream,
    and the last batch that had a good sample (index, stream range; -1: none yet), from which the
    batches after it that had none were repeated. All a resumed worker needs besides its plan."""

    batches: int = 0
    taken: int = 0
    refill_batch: int = -1
    refill_start: int = 0
    refill_stop: int = 0


class BatchInfo(NamedTuple):
    bad: tuple          # ((key, url, reason), ...) for samples skipped while forming this batch
    duplicated: int     # train only: slots refilled with an already-used sample (spares ran out)
    worker: int = 0     # the worker, its ring slot (-1: a fresh block) and that use's token: what the
    slot: int = -1      # main process writes into the release board once the batch is gone (slots.py)
    token: int = 0
    recycled: bool = False  # the batch is in a block an earlier batch used (no fresh shared memory)
    keys: tuple = ()        # eval only: the samples' keys, in batch order (ReaL labels match by key)
    position: StreamPosition = StreamPosition()  # the worker's position after this batch
    fingerprint: tuple = (0, 0)  # (samples, key hash) of this batch, repeats included (fingerprint.py)


class _Formed(NamedTuple):
    filled: int      # slots filled from records (the rest, if any, are to be repeated)
    keys: list
    bad: list
    taken: int       # records pulled


def _form(records: Iterator[Record], images: torch.Tensor, labels: torch.Tensor, keys: list, cfg: DecodeConfig,
          seed: int, *, fill: bool, strict: bool, aug) -> _Formed:
    """Decode records into the slots of one batch until it is full (train) or ``len(images)``
    records are used (eval), or the records run out."""
    n, slots = len(labels), images.numpy()
    label_slots = labels.numpy()  # a numpy store is ~0.1 us, a tensor's __setitem__ ~2-5 us
    bad, filled, taken = [], 0, 0
    while filled < n and (fill or taken < n):
        rec = next(records, None)
        if rec is None:
            break
        taken += 1
        try:
            _, label = decode_record(rec, cfg, sample_rng(seed, rec), aug, out=slots[filled])
        except dec.DecodeError as e:
            if strict:
                raise BadSampleError(f"bad sample {rec.key!r} in {rec.url}: {e}") from None
            bad.append((rec.key, rec.url, str(e)))
            continue
        label_slots[filled] = label
        keys.append(rec.key)
        filled += 1
    return _Formed(filled, keys, bad, taken)


def _repeat(images, labels, keys, filled: int, src_images, src_labels, src_keys, src_n: int) -> int:
    """Fill slots ``filled..`` with repeats of the source's first ``src_n`` samples; returns how many."""
    n = len(labels)
    for i in range(filled, n):
        images[i] = src_images[i % src_n]
        labels[i] = src_labels[i % src_n]
        keys.append(src_keys[i % src_n])
    return n - filled


def batches(records: Iterator[Record], batch_sizes: Iterable[int], cfg: DecodeConfig, seed: int, *,
            fill: bool, strict: bool = False, shared: bool = False, aug=None, ring: SlotRing | None = None,
            start: StreamPosition | None = None, refill: Callable[[], Iterator[Record]] | None = None
            ) -> Iterator[tuple]:
    """Form batches from records: yields (images uint8 [n,3,S,S], labels int64 [n], BatchInfo).

    fill=True (train): each batch gets exactly its size in *good* samples, pulling further records
    to replace bad ones; if the records run out, the remaining slots repeat good samples of this
    batch, or (none there) of the previous batch, and count as ``duplicated``. fill=False
    (eval): batch i is exactly the next ``batch_sizes[i]`` records minus the bad ones; a batch with
    none left is not yielded. Each record's crop comes from ``sample_rng(seed, record)``.
    ``ring``: take batch memory from a worker's ring of reusable shared blocks (``slots``).
    ``start``: resume at this position; ``records`` then begin at record ``start.taken`` of the
    stream, and ``refill()`` gives the records of batch ``start.refill_batch`` again, decoded only
    if a batch needs repeats from it.
    """
    S = cfg.out_size
    sizes = list(batch_sizes)
    pos = start or StreamPosition()
    prev = None  # (images, labels, keys, n) of the previous batch: what a batch without a record repeats
    for j in range(pos.batches, len(sizes)):
        n = sizes[j]
        images, slot, token, recycled = _new_batch(n, S, shared, ring)
        labels = torch.empty(n, dtype=torch.int64)
        formed = _form(records, images, labels, [], cfg, seed, fill=fill, strict=strict, aug=aug)
        filled, keys, dup = formed.filled, formed.keys, 0
        taken = pos.taken + formed.taken
        if filled:
            pos = StreamPosition(j + 1, taken, j, pos.taken, taken)
        else:
            pos = pos._replace(batches=j + 1, taken=taken)
        if fill and filled < n:
            if filled:
                dup = _repeat(images, labels, keys, filled, images, labels, list(keys), filled)
            else:
                if prev is None and start is not None and start.refill_batch >= 0 and refill is not None:
                    prev = _rebuild(refill(), sizes, start, cfg, seed, aug)
                if prev is None:
                    raise RuntimeError("no decodable sample left in this worker's range: cannot form a "
                                       "full batch (is every image in these shards bad?)")
                dup = _repeat(images, labels, keys, 0, *prev)
            filled = n
        if filled == 0:
            continue
        if filled < n:
            images, labels = images[:filled], labels[:filled]
        prev = (images, labels, keys, filled)  # the ring never hands out the previous batch's block again
        info = BatchInfo(tuple(formed.bad), dup, ring.worker if ring else 0, slot, token, recycled,
                         keys=() if fill else tuple(keys), position=pos, fingerprint=fingerprint.of_keys(keys))
        yield images, labels, info


def _rebuild(records: Iterator[Record], sizes: list, start: StreamPosition, cfg: DecodeConfig, seed: int,
             aug) -> tuple | None:
    """The batch before ``start`` as an uninterrupted stream had it, as the source of repeats:
    batch ``start.refill_batch`` formed again from its records (same crops: the random streams are
    per sample), then each later batch up to ``start.batches - 1``, which had no good sample and
    so repeated its predecessor. None if none of the records decodes."""
    n = sizes[start.refill_batch]
    images = torch.empty((n, 3, cfg.out_size, cfg.out_size), dtype=torch.uint8)
    labels = torch.empty(n, dtype=torch.int64)
    formed = _form(iter(records), images, labels, [], cfg, seed, fill=True, strict=False, aug=aug)
    if not formed.filled:
        return None
    keys = formed.keys
    if formed.filled < n:
        _repeat(images, labels, keys, formed.filled, images, labels, list(keys), formed.filled)
    prev = (images, labels, keys, n)
    for j in range(start.refill_batch + 1, start.batches):
        m = sizes[j]
        imgs, labs, ks = torch.empty((m, *images.shape[1:]), dtype=torch.uint8), torch.empty(m, dtype=torch.int64), []
        _repeat(imgs, labs, ks, 0, *prev)
        prev = (imgs, labs, ks, m)
    return prev
