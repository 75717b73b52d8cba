"""FFCV as a ``bench-loader --compare`` row: run by ``$PEERS/ffcv/bin/python`` (shared/peers/setup.sh).

The ffcv-imagenet recipe (shared/peers/README.md): ``DatasetWriter`` with ``RGBImageField`` as
``setup["write"]`` says (peers.FFCV_WRITES: all JPEG q90 at max side 500, or ffcv-imagenet's
``write_mode="proportion"`` settings for rn50 and rn18) over the same images as files (untimed;
kept in ``setup["work"]`` and reused while its settings and images are the same), then ``Loader``
with ``RandomResizedCropRGBImageDecoder`` + ``RandomHorizontalFlip`` (train; val:
``CenterCropRGBImageDecoder`` at ffcv-imagenet's 224/256 ratio, sequential order) + ``ToTensor`` +
``ToTorchImage``, ``os_cache=True``, random order, uint8 out, ``workers`` threads. It reports the
bytes per image of its dataset file.
"""

from __future__ import annotations

import json
from pathlib import Path

if __package__:  # imported as part of the package (docs, tools)
    from imagenet_shards.train.bench.peer_serve import serve
else:  # run by the FFCV environment's python: this folder is first on sys.path
    from peer_serve import serve

ALL_JPEG = {"write_mode": "jpg", "max_resolution": 500, "jpeg_quality": 90}


def write_beton(setup: dict) -> tuple[Path, int]:
    """The dataset file for ``setup`` (written unless an identical one is there) and its image count."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    from torchvision.datasets import ImageFolder

    write = setup.get("write", ALL_JPEG)
    beton = Path(setup["work"]) / f"ffcv-{setup.get('write_name', 'jpg')}.beton"
    stamp = beton.with_suffix(".json")
    dataset = ImageFolder(setup["folder"])
    what = {"write": write, "folder": setup["folder"], "images": len(dataset)}
    if not (beton.exists() and stamp.exists() and json.loads(stamp.read_text()) == what):
        DatasetWriter(str(beton), {"image": RGBImageField(**write), "label": IntField()},
                      num_workers=max(1, setup["workers"])).from_indexed_dataset(dataset)
        stamp.write_text(json.dumps(what))
    return beton, len(dataset)


def build(setup: dict):
    from ffcv.fields.decoders import CenterCropRGBImageDecoder, IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage

    threads = max(1, setup["workers"])
    res = setup["res"]
    beton, images = write_beton(setup)
    train = setup.get("train", True)
    if train:
        image = [RandomResizedCropRGBImageDecoder((res, res)), RandomHorizontalFlip()]
    else:
        image = [CenterCropRGBImageDecoder((res, res), ratio=res / setup["val_resize"])]
    loader = Loader(str(beton), batch_size=setup["batch_size"], num_workers=threads,
                    order=OrderOption.RANDOM if train else OrderOption.SEQUENTIAL, os_cache=True, drop_last=True,
                    seed=setup["seed"], pipelines={"image": image + [ToTensor(), ToTorchImage()],
                                                   "label": [IntDecoder(), ToTensor()]})
    note = f"{threads} thread(s); its writer: {setup.get('write_note', 'jpg q90, max side 500')}"
    return (lambda epoch: ((x, y.view(-1)) for x, y in loader)), note, beton.stat().st_size / max(1, images)


if __name__ == "__main__":
    serve(build)
