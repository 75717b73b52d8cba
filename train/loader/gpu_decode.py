"""`--gpu-decode`: read raw JPEG bytes from the shards on CPU workers, decode and crop on the GPU.

Worker processes only read tars (cheap), following the same per-epoch plan as the CPU loader
(`imagenet_shards.train.loader.dataset.epoch_plan`: same shard order, equal full batches per train rank, every val sample
once). The main process decodes each batch with `torchvision.io.decode_jpeg(device="cuda")`
(nvJPEG, batched) and applies the CPU loader's crop geometry (`imagenet_shards.train.loader.decode`'s
RandomResizedCrop / Resize+CenterCrop parameters, antialiased bilinear) on the GPU, then the
random horizontal flip. Output: uint8 [B,3,S,S] on the GPU, the same contract as the CPU loader,
so the prefetcher and trainer run unchanged. CPU-side policies (--aug) are not applied here.

The `device` argument exists so the same code can be tested on the CPU; the trainer refuses
`--gpu-decode` without CUDA.
"""

from __future__ import annotations

import logging
import random
import warnings
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader import Shard, epoch_plan, open_url, read_manifest, read_pieces, shuffle_buffer, split_shards
from imagenet_shards.train.loader.cache import ShardCache

log = logging.getLogger(__name__)


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([p & 0xFFFFFFFF for p in parts]).generate_state(1, np.uint64)[0])


class RawBatches(IterableDataset):
    """One rank's planned batches as (JPEG bytes concatenated: uint8 [total], offsets int64 [n+1],
    labels int64 [n]): three tensors per batch cross the worker queue, not one per image.

    train: each batch has exactly its size in samples with both .jpg and .cls (spares fill in);
    eval: the planned samples in order, those without .jpg/.cls left out."""

    def __init__(self, shards: list[Shard], *, batch_size: int, train: bool, workers: int, seed: int,
                 rank: int, world_size: int, shuffle_buffer: int, epoch: int = 0, opener=open_url):
        self.shards, self.sizes, self.opener = shards, [s.num_samples for s in shards], opener
        self.batch_size, self.train, self.workers = batch_size, train, workers
        self.seed, self.rank, self.world_size, self.shuffle_buffer = seed, rank, world_size, shuffle_buffer
        self.state = torch.tensor([epoch], dtype=torch.int64).share_memory_()

    def plan(self, epoch: int | None = None):
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
            records = shuffle_buffer(records, self.shuffle_buffer, random.Random(_seed(self.seed, epoch, self.rank,
                                                                                       worker, 1)))
        records = iter(records)
        for n in plan.batch_sizes:
            jpgs, labels, taken = [], [], 0
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
                    continue
                jpgs.append(rec.jpg)
                labels.append(label)
            if self.train and len(jpgs) < n:  # out of spares: repeat good samples, as the CPU loader does
                if not jpgs:
                    raise RuntimeError("no usable sample left in this worker's range")
                for i in range(n - len(jpgs)):
                    jpgs.append(jpgs[i])
                    labels.append(labels[i])
            if jpgs:
                offsets = np.cumsum([0] + [len(j) for j in jpgs])
                blob = torch.frombuffer(bytearray(b"".join(jpgs)), dtype=torch.uint8)
                yield blob, torch.from_numpy(offsets.astype(np.int64)), torch.tensor(labels, dtype=torch.int64)


def decode_batch(jpgs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    """Decode to RGB uint8 [3,H,W] on `device`, batched; None for a JPEG that will not decode."""
    from torchvision.io import ImageReadMode, decode_jpeg
    target = device if device.type == "cuda" else "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29 points at TorchCodec
        try:
            return [img.to(device) for img in decode_jpeg(jpgs, mode=ImageReadMode.RGB, device=target)]
        except RuntimeError:
            pass
        images = []
        for data in jpgs:  # one bad JPEG fails the batched call: find it
            try:
                images.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=target).to(device))
            except RuntimeError:
                images.append(None)
        return images


def crop_batch(images: list[torch.Tensor], boxes: list[tuple[float, float, float, float]], flips: list[bool],
               size: int) -> torch.Tensor:
    """Resized crops (antialiased bilinear) of each image's box (top, left, h, w) to size x size,
    flipped where asked; uint8 [B,3,size,size] on the images' device. Same integer box rounding
    as the CPU loader's tvio path."""
    from torchvision.transforms.v2 import functional as F
    out = torch.empty((len(images), 3, size, size), dtype=torch.uint8, device=images[0].device)
    for i, (img, (top, left, h, w), flip) in enumerate(zip(images, boxes, flips)):
        t0, l0 = int(round(top)), int(round(left))
        crop = F.resized_crop(img, t0, l0, int(round(top + h)) - t0, int(round(left + w)) - l0,
                              [size, size], antialias=True)
        out[i] = crop.flip(-1) if flip else crop
    return out


class GpuDecodeLoader:
    """Same interface as `imagenet_shards.train.loader.dataset.ShardLoader`; batches come out already on `device`."""

    def __init__(self, dataset: RawBatches, *, device: torch.device, res: int, val_resize: int, val_crop: int,
                 scale, ratio, hflip: bool, workers: int, pin_memory: bool, persistent_workers: bool,
                 prefetch_factor: int):
        self.dataset, self.device = dataset, device
        self.res, self.val_resize, self.val_crop = res, val_resize, val_crop
        self.scale, self.ratio, self.hflip = tuple(scale), tuple(ratio), hflip
        kw = dict(persistent_workers=persistent_workers, prefetch_factor=prefetch_factor) if workers > 0 else {}
        self._loader = DataLoader(dataset, batch_size=None, num_workers=workers, pin_memory=pin_memory, **kw)
        self.stats: dict = {}

    def set_epoch(self, epoch: int) -> None:
        self.dataset.state[0] = int(epoch)

    def set_resolution(self, res: int) -> None:
        self.res = int(res)

    def __len__(self) -> int:
        return sum(len(p.batch_sizes) for p in self.dataset.plan())

    @property
    def num_samples(self) -> int:
        return sum(p.num_samples for p in self.dataset.plan())

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch = int(self.dataset.state[0])
        rng = random.Random(_seed(self.dataset.seed, epoch, self.dataset.rank, 2))
        stats = {"epoch": epoch, "samples": 0, "batches": 0, "bad_samples": 0}
        for blob, offsets, labels in self._loader:
            bounds = offsets.tolist()
            jpgs = [blob[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
            images = decode_batch(jpgs, self.device)
            good = [i for i, img in enumerate(images) if img is not None]
            if len(good) < len(images):
                stats["bad_samples"] += len(images) - len(good)
                log.warning("skipped %d undecodable JPEGs in a batch", len(images) - len(good))
                if not good:
                    continue
                if self.dataset.train:  # keep the batch full: repeat good samples
                    good = [good[i % len(good)] for i in range(len(images))]
                images, labels = [images[i] for i in good], labels[good]
            boxes, flips = [], []
            for img in images:
                h, w = img.shape[-2:]
                if self.dataset.train:
                    boxes.append(dec.random_resized_crop_params(w, h, self.scale, self.ratio, rng))
                    flips.append(self.hflip and rng.random() < 0.5)
                else:
                    boxes.append(dec.center_crop_params(w, h, self.val_resize, self.val_crop))
                    flips.append(False)
            size = self.res if self.dataset.train else self.val_crop
            stats["samples"] += len(images)
            stats["batches"] += 1
            yield crop_batch(images, boxes, flips, size), labels.to(self.device, non_blocking=True)
        self.stats = stats


def make_gpu_decode_loader(data: str, split: str, batch_size: int, *, train: bool | None = None, workers: int = 4,
                           seed: int = 0, epoch: int = 0, rank: int = 0, world_size: int = 1, res: int = 224,
                           val_resize: int = 256, val_crop: int = 224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                           hflip: bool = True, shuffle_buffer: int = 2000, pin_memory: bool = False,
                           persistent_workers: bool = False, prefetch_factor: int = 4,
                           device: torch.device | str = "cuda", cache_dir: str | None = None,
                           cache_bytes: int | None = None, **_ignored) -> GpuDecodeLoader:
    """A loader over `split` whose batches are decoded on `device` (see the module docstring)."""
    if train is None:
        train = split == "train"
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--gpu-decode needs CUDA")
    if val_crop > val_resize:
        raise ValueError(f"val_crop {val_crop} is larger than val_resize {val_resize}")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    shards = split_shards(read_manifest(data), data, split)
    dataset = RawBatches(shards, batch_size=batch_size, train=train, workers=workers, seed=seed, rank=rank,
                         world_size=world_size, shuffle_buffer=shuffle_buffer, epoch=epoch,
                         opener=ShardCache(cache_dir, cache_bytes).open if cache_dir else open_url)
    return GpuDecodeLoader(dataset, device=device, res=res, val_resize=val_resize, val_crop=val_crop, scale=scale,
                           ratio=ratio, hflip=hflip, workers=workers, pin_memory=pin_memory,
                           persistent_workers=persistent_workers, prefetch_factor=prefetch_factor)
