"""`--gpu-decode`: CPU workers read raw JPEG bytes from the shards; a background thread decodes and
crops them on the GPU, off the training loop's critical path.

Worker processes only read tars (cheap), following the same per-epoch plan as the CPU loader
(`imagenet_shards.train.loader.plan.epoch_plan`: same shard order, equal full batches per train
rank, every val sample once). A thread of the main process, on a CUDA stream of its own, decodes
each batch with `torchvision.io.decode_jpeg(device="cuda")` (nvJPEG, batched) and crops it with the
CPU loader's geometry (`decode`'s RandomResizedCrop / Resize+CenterCrop parameters, drawn for the
whole batch at once: `gpu_crop`; antialiased bilinear or bicubic, or timm's random choice of the two
per image drawn from the batch's stream after the flips; flip) in one batched op; finished batches wait
in a small queue. Output: uint8
[B,3,S,S] on the GPU, the CPU loader's contract, so the prefetcher and trainer run unchanged.

Streams (`gpu_streams`): the decode runs with a kernel-free stream current (nvJPEG's hardware
engine does not wait for the stream its outputs were allocated on: pytorch/vision#9606), the crop
on a second stream behind an event, so one batch is cropped while the next is decoded and no drain
(host sync) is needed; the one host sync per batch left is inside `decode_jpeg`. Batches cross to
the consumer with an event and `record_stream`.

Exact-epoch guarantee: a train batch always has its full size. Images that fail to decode are
replaced by repeats of the batch's good ones; a batch with none is refilled from the previous
batch (as the CPU loader refills from earlier samples), so every rank yields exactly `len()`
batches and DDP collectives stay matched. `device="cpu"` runs the same code (thread, queue,
refills) with CPU decoding: that is how the tests check it; the trainer refuses --gpu-decode
without CUDA.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
import warnings
from typing import Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.manifest import Shard, manifest_form, read_manifest, split_shards
from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader.cache import ShardCache
from imagenet_shards.train.augment import interpolation as interp
from imagenet_shards.train.augment.gpu_crop import center_crop_boxes, crop_batch, random_resized_crop_boxes
from imagenet_shards.train.loader.gpu_streams import CropTimer, StreamOps
from imagenet_shards.train.loader.position import seed_of
from imagenet_shards.train.loader.plan import epoch_plan
from imagenet_shards.train.loader.reading import open_url, read_pieces
from imagenet_shards.train.loader.batching import shuffle_buffer

log = logging.getLogger(__name__)

QUEUE_BATCHES = 2      # decoded batches waiting for the training loop
BASELINE, PROGRESSIVE, OTHER = 0, 1, 2  # JPEG coding: nvJPEG's hardware engine takes baseline only


def jpeg_coding(data: bytes) -> int:
    """BASELINE (SOF0/SOF1, Huffman sequential), PROGRESSIVE (SOF2) or OTHER, from the first SOF
    marker. Baseline JPEGs can take nvJPEG's hardware engine; the others go to its host path."""
    i, n = 2, len(data)
    if data[:2] != b"\xff\xd8":
        return OTHER
    while i + 4 <= n:
        if data[i] != 0xFF:
            return OTHER
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xC0, 0xC1):
            return BASELINE
        if marker == 0xC2:
            return PROGRESSIVE
        if (0xC3 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC)) or marker == 0xDA:
            return OTHER
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return OTHER


class RawBatches(IterableDataset):
    """One rank's planned batches as (JPEG bytes concatenated: uint8 [total], offsets int64 [n+1],
    labels int64 [n], codings uint8 [n], counts int64 [skipped, repeated]): a few tensors per batch
    cross the worker queue, not one per image.

    train: each batch has exactly its size in samples with both .jpg and .cls (spares fill in,
    then repeats); eval: the planned samples in order, those without .jpg/.cls left out."""

    def __init__(self, shards: list[Shard], *, batch_size: int, train: bool, workers: int, seed: int,
                 rank: int, world_size: int, shuffle_buffer: int, epoch: int = 0, opener=open_url):
        self.shards, self.sizes, self.opener = shards, [s.num_samples for s in shards], opener
        self.batch_size, self.train, self.workers = batch_size, train, workers
        self.seed, self.rank, self.world_size, self.shuffle_buffer = seed, rank, world_size, shuffle_buffer
        self.state = torch.tensor([epoch], dtype=torch.int64).share_memory_()

    def plan(self, epoch: int | None = None):
        """This rank's per-worker plans for `epoch` (default: the current one)."""
        return epoch_plan(self.sizes, batch_size=self.batch_size, rank=self.rank, world_size=self.world_size,
                          workers=max(1, self.workers), train=self.train, seed=self.seed,
                          epoch=int(self.state[0]) if epoch is None else epoch)

    def __iter__(self):
        info = get_worker_info()
        worker = info.id if info is not None else 0
        epoch = int(self.state[0])
        plan = self.plan(epoch)[worker]
        records = read_pieces(self.shards, plan.pieces, opener=self.opener)
        if self.train:
            rng = random.Random(seed_of(self.seed, epoch, self.rank, worker, 1))
            records = shuffle_buffer(records, self.shuffle_buffer, rng)
        records = iter(records)
        for n in plan.batch_sizes:
            jpgs, labels, taken, skipped, repeated = [], [], 0, 0, 0
            while len(jpgs) < n and (self.train or taken < n):
                rec = next(records, None)
                if rec is None:
                    break
                taken += 1
                try:
                    label = dec.decode_label(rec.cls) if rec.cls is not None else None
                except dec.DecodeError:
                    label = None
                if rec.jpg is None or label is None:
                    log.warning("skipped sample %r in %s: missing or bad .jpg/.cls", rec.key, rec.url)
                    skipped += 1
                    continue
                jpgs.append(rec.jpg)
                labels.append(label)
            if self.train and len(jpgs) < n:  # out of spares: repeat good samples, as the CPU loader does
                if not jpgs:
                    raise RuntimeError("no usable sample left in this worker's range")
                repeated = n - len(jpgs)
                jpgs += [jpgs[i % len(jpgs)] for i in range(repeated)]
                labels += [labels[i % len(labels)] for i in range(repeated)]
            if jpgs:
                offsets = np.cumsum([0] + [len(j) for j in jpgs])
                blob = torch.frombuffer(bytearray(b"".join(jpgs)), dtype=torch.uint8)
                yield (blob, torch.from_numpy(offsets.astype(np.int64)), torch.tensor(labels, dtype=torch.int64),
                       torch.tensor([jpeg_coding(j) for j in jpgs], dtype=torch.uint8),
                       torch.tensor([skipped, repeated], dtype=torch.int64))


def decode_batch(jpgs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    """Decode to RGB uint8 [3,H,W] on `device`, batched; None for a JPEG that will not decode. One
    bad JPEG fails a batched call: the batch is then halved until the bad ones are alone (about
    2 log2(B) calls per bad JPEG, not B single decodes)."""
    from torchvision.io import ImageReadMode, decode_jpeg
    target = device if device.type == "cuda" else "cpu"

    def attempt(part: list[torch.Tensor]) -> list[torch.Tensor | None]:
        try:
            return [img.to(device) for img in decode_jpeg(part, mode=ImageReadMode.RGB, device=target)]
        except RuntimeError:
            if len(part) == 1:
                return [None]
            mid = len(part) // 2
            return attempt(part[:mid]) + attempt(part[mid:])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29 points at TorchCodec
        return attempt(list(jpgs)) if jpgs else []


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


_END = object()


def background(items: Iterator, maxsize: int, name: str = "gpu-decode") -> Iterator:
    """Iterate `items` in a thread, up to `maxsize` ahead; its exception is raised here; closing
    this generator stops the thread (after the item it is on) and waits for it."""
    q: queue.Queue = queue.Queue(maxsize)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in items:
                if not put(item):
                    break
            else:
                put(_END)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises it
            put(_Failed(e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join()


class GpuDecodeLoader:
    """Same interface as `imagenet_shards.train.loader.dataset.ShardLoader`; batches come out already
    on `device`. `stats` counts the current (or last) epoch as it goes: samples, batches,
    bad_samples, duplicated, seconds waiting for workers / decoding / cropping, and decodes of
    baseline (nvJPEG hardware path) and other (host path) JPEGs. `decode` and `ops` are for tests."""

    def __init__(self, dataset: RawBatches, *, device: torch.device, res: int, val_resize: int, val_crop: int,
                 scale, ratio, hflip: bool, workers: int, pin_memory: bool, persistent_workers: bool,
                 prefetch_factor: int, decode: Callable = decode_batch, ops: StreamOps | None = None,
                 interpolation: str = "bilinear"):
        self.dataset, self.device = dataset, device
        self.interpolation = interp.check(interpolation, train=dataset.train)
        self.res, self.val_resize, self.val_crop = res, val_resize, val_crop
        self.scale, self.ratio, self.hflip = tuple(scale), tuple(ratio), hflip
        self.decode = decode
        self.ops = ops if ops is not None else StreamOps(device)
        kw = dict(persistent_workers=persistent_workers, prefetch_factor=prefetch_factor) if workers > 0 else {}
        self._loader = DataLoader(dataset, batch_size=None, num_workers=workers, pin_memory=pin_memory, **kw)
        self.stats: dict = {}

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (shard order, shuffle and crop seeds) for the next iteration."""
        self.dataset.state[0] = int(epoch)

    def set_resolution(self, res: int) -> None:
        """Train crop size from the next iteration on."""
        self.res = int(res)

    def __len__(self) -> int:
        return sum(len(p.batch_sizes) for p in self.dataset.plan())

    @property
    def num_samples(self) -> int:
        return sum(p.num_samples for p in self.dataset.plan())

    def _produce(self, epoch: int, size: int, stats: dict) -> Iterator[tuple]:
        """(images, labels, event) per batch; runs in the decode thread."""
        train = self.dataset.train
        rng = np.random.default_rng(seed_of(self.dataset.seed, epoch, self.dataset.rank, 2))
        timer = self.ops.timer()
        prev = None
        with self.ops.context():
            raw = iter(self._loader)
            try:
                while True:
                    t0 = time.perf_counter()
                    item = next(raw, None)
                    t1 = time.perf_counter()
                    stats["wait_s"] += t1 - t0
                    if item is None:
                        return
                    blob, offsets, labels, codings, counts = item
                    skipped, repeated = counts.tolist()
                    stats["bad_samples"] += skipped
                    stats["duplicated"] += repeated
                    bounds = offsets.tolist()
                    jpgs = [blob[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
                    baseline = int((codings == BASELINE).sum())
                    stats["hardware_decodes"] += baseline
                    stats["host_decodes"] += len(jpgs) - baseline
                    with self.ops.decoding():  # see the module docstring: no drain needed
                        images = self.decode(jpgs, self.device)
                    stats["decode_s"] += time.perf_counter() - t1
                    batch = self._crop(images, labels, train, size, rng, timer, prev, stats)
                    if batch is not None:
                        prev = batch[:2]
                        yield batch
            finally:
                stats["crop_s"] += timer.finish()

    def _crop(self, images: list, labels: torch.Tensor, train: bool, size: int, rng: np.random.Generator,
              timer: CropTimer, prev, stats: dict):
        """One decoded batch -> (images, labels, event) on the crop stream; None for an eval batch
        whose images all failed (left out: eval has no per-batch collectives)."""
        n = len(images)
        good = [i for i, img in enumerate(images) if img is not None]
        if len(good) < n:
            stats["bad_samples"] += n - len(good)
            log.warning("skipped %d undecodable JPEGs in a batch", n - len(good))
            if good and train:  # keep the batch full: repeat good samples
                stats["duplicated"] += n - len(good)
                good = [good[i % len(good)] for i in range(n)]
            if good:
                labels = labels[good]  # on the host: an index tensor on the device would be a blocking copy
        with self.ops.cropping(images):
            labels = labels.to(self.device, non_blocking=self.device.type == "cuda" and labels.is_pinned())
            if not good:
                if not train:
                    return None
                if prev is None:
                    raise RuntimeError("no image of the epoch's first batch decodes: cannot form a full "
                                       "batch (is every image in these shards bad? run audit-shards)")
                pick = torch.arange(n, device=self.device) % prev[0].shape[0]
                out, labels = prev[0][pick], prev[1][pick]
                stats["duplicated"] += n
            else:
                picked = [images[i] for i in good]
                heights = [img.shape[-2] for img in picked]
                widths = [img.shape[-1] for img in picked]
                if train:
                    boxes = random_resized_crop_boxes(widths, heights, self.scale, self.ratio, rng)
                    flips = (rng.random(len(picked)) < 0.5) & self.hflip
                else:
                    boxes = center_crop_boxes(widths, heights, self.val_resize, self.val_crop)
                    flips = np.zeros(len(picked), dtype=bool)
                cubic = interp.draws(self.interpolation, rng, len(picked))
                start = timer.start()
                out = crop_batch(picked, boxes, flips, size, cubic)
                timer.stop(start)
            stats["samples"] += out.shape[0]
            stats["batches"] += 1
            return out, labels, self.ops.done()

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch = int(self.dataset.state[0])
        size = self.res if self.dataset.train else self.val_crop
        stats = {"epoch": epoch, "samples": 0, "batches": 0, "bad_samples": 0, "duplicated": 0, "wait_s": 0.0,
                 "decode_s": 0.0, "crop_s": 0.0, "hardware_decodes": 0, "host_decodes": 0}
        self.stats = stats
        for images, labels, event in background(self._produce(epoch, size, stats), QUEUE_BATCHES):
            self.ops.hand_over((images, labels), event)
            yield images, labels


def make_gpu_decode_loader(data: str, split: str, batch_size: int, *, train: bool | None = None, workers: int = 4,
                           seed: int = 0, epoch: int = 0, rank: int = 0, world_size: int = 1, res: int = 224,
                           val_resize: int = 256, val_crop: int = 224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                           hflip: bool = True, shuffle_buffer: int = 2000, pin_memory: bool = False,
                           persistent_workers: bool = False, prefetch_factor: int = 4,
                           device: torch.device | str = "cuda", cache_dir: str | None = None,
                           cache_bytes: int | None = None, interpolation: str = "bilinear") -> GpuDecodeLoader:
    """A loader over `split` whose batches are decoded on `device` (see the module docstring).
    Takes `make_loader`'s arguments except the CPU decoder's (`decoder`, `aug`, `strict`): passing
    one of those is a TypeError, not silently ignored."""
    if train is None:
        train = split == "train"
    manifest = read_manifest(data)
    if manifest_form(manifest) != "jpeg":
        raise ValueError(f"--gpu-decode decodes JPEG shards only and {storage.redact(data)} holds "
                         f"{manifest_form(manifest)} pixel shards: drop --gpu-decode (the CPU loader reads them)")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--gpu-decode needs CUDA")
    if val_crop > val_resize:
        raise ValueError(f"val_crop {val_crop} is larger than val_resize {val_resize}")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    shards = split_shards(manifest, data, split)
    dataset = RawBatches(shards, batch_size=batch_size, train=train, workers=workers, seed=seed, rank=rank,
                         world_size=world_size, shuffle_buffer=shuffle_buffer, epoch=epoch,
                         opener=ShardCache(cache_dir, cache_bytes).open if cache_dir else open_url)
    return GpuDecodeLoader(dataset, device=device, res=res, val_resize=val_resize, val_crop=val_crop, scale=scale,
                           ratio=ratio, hflip=hflip, workers=workers, pin_memory=pin_memory,
                           persistent_workers=persistent_workers, prefetch_factor=prefetch_factor,
                           interpolation=interpolation)
