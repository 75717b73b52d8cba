"""The loaders a user would otherwise pick that run in our environment, on the same JPEG bytes as ours.

Each one decodes to uint8 [B,3,res,res] with RandomResizedCrop + horizontal flip, using the same
number of DataLoader worker processes and the same batch size as our loader.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch

from imagenet_shards.train import loader as D

Epochs = Callable[[int], Iterable]


@dataclass
class Baseline:
    """A contender: ``build()`` makes its ``epochs`` callable; ``not_run`` (when set) says why it cannot run."""
    name: str
    build: Callable[[], Epochs] | None
    not_run: str = ""


def val_resize(res: int) -> int:
    """The shorter side a ``res`` centre crop is cut from: 256 for 224, the usual ratio."""
    return max(res, round(res * 256 / 224))


def pil_transform(res: int, train: bool = True):
    """torchvision's RandomResizedCrop(res) + RandomHorizontalFlip (train), or Resize(val_resize(res))
    + CenterCrop(res) (val), on a PIL image, to a uint8 tensor."""
    import torchvision.transforms as T
    if not train:
        return T.Compose([T.Resize(val_resize(res)), T.CenterCrop(res), T.PILToTensor()])
    return T.Compose([T.RandomResizedCrop(res), T.RandomHorizontalFlip(), T.PILToTensor()])


def _dataloader(dataset, *, batch_size: int, workers: int, shuffle: bool = False):
    from torch.utils.data import DataLoader
    kw = dict(persistent_workers=True, prefetch_factor=4) if workers > 0 else {}
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=workers, drop_last=True, **kw)


class TarfileDataset(torch.utils.data.IterableDataset):
    """The seed's approach: shards split over workers, ``tarfile`` random access, PIL open + transforms."""

    def __init__(self, urls: list[str], transform):
        self.urls, self.transform = urls, transform

    def __iter__(self):
        from PIL import Image
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        for url in self.urls[wid::nw]:
            with tarfile.open(url) as tar:
                members = {m.name: m for m in tar.getmembers()}
                for name, m in members.items():
                    if not name.endswith(".jpg"):
                        continue
                    key = name[:-4]
                    img = Image.open(io.BytesIO(tar.extractfile(m).read())).convert("RGB")
                    label = int(tar.extractfile(members[key + ".cls"]).read())
                    yield self.transform(img), label


def export_image_folder(shards: list[D.Shard], root: Path) -> int:
    """Write every sample of ``shards`` as ROOT/<label>/<key>.JPEG (the same bytes); returns the count."""
    n = 0
    for shard in shards:
        for rec in D.read_shard(shard.url):
            if rec.jpg is None or rec.cls is None:
                continue
            d = root / f"{int(rec.cls):04d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{rec.key}.JPEG").write_bytes(rec.jpg)
            n += 1
    return n


def baselines(urls: list[str], folder: Path, *, res: int, batch_size: int, workers: int,
              train: bool = True) -> list[Baseline]:
    """The in-process baselines in table order: ImageFolder over ``folder`` (the images as files),
    the seed's tarfile dataset and webdataset over the shard ``urls``; train or val crops. (DALI and
    FFCV run in their own environments: ``peers.py``.)"""
    tf = pil_transform(res, train)
    local = all("://" not in u for u in urls)

    def image_folder():
        from torchvision.datasets import ImageFolder
        loader = _dataloader(ImageFolder(str(folder), transform=tf), batch_size=batch_size, workers=workers,
                             shuffle=True)
        return lambda e: loader

    def tarfile_ds():
        loader = _dataloader(TarfileDataset(urls, tf), batch_size=batch_size, workers=workers)
        return lambda e: loader

    def webdataset():
        import webdataset as wds
        ds = (wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("pil")
              .to_tuple("jpg", "cls").map_tuple(tf, lambda c: int(c)))
        loader = _dataloader(ds, batch_size=batch_size, workers=workers)
        return lambda e: loader

    return [
        Baseline("torchvision ImageFolder + PIL", image_folder),
        Baseline("seed tarfile dataset + PIL", tarfile_ds if local else None,
                 "" if local else "not run: the tarfile dataset needs local shards"),
        Baseline("webdataset .decode('pil') + PIL", webdataset),
    ]
