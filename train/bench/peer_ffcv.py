"""FFCV as a ``bench-loader --compare`` row: run by ``$PEERS/ffcv/bin/python`` (shared/peers/setup.sh).

The ffcv-imagenet recipe (shared/peers/README.md): ``DatasetWriter`` with
``RGBImageField(write_mode="jpg", max_resolution=500, jpeg_quality=90)`` over the same images as
files (untimed), then ``Loader`` with ``RandomResizedCropRGBImageDecoder`` + ``RandomHorizontalFlip``
(train; val: ``CenterCropRGBImageDecoder`` at ffcv-imagenet's 224/256 ratio, sequential order)
+ ``ToTensor`` + ``ToTorchImage``, ``os_cache=True``, random order, uint8 out, ``workers`` threads.
"""

from __future__ import annotations

from pathlib import Path

if __package__:  # imported as part of the package (docs, tools)
    from imagenet_shards.train.bench.peer_serve import serve
else:  # run by the FFCV environment's python: this folder is first on sys.path
    from peer_serve import serve


def build(setup: dict):
    from ffcv.fields import IntField, RGBImageField
    from ffcv.fields.decoders import CenterCropRGBImageDecoder, IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage
    from ffcv.writer import DatasetWriter
    from torchvision.datasets import ImageFolder

    threads = max(1, setup["workers"])
    res = setup["res"]
    beton = Path(setup["work"]) / "ffcv.beton"
    DatasetWriter(str(beton), {"image": RGBImageField(write_mode="jpg", max_resolution=500, jpeg_quality=90),
                               "label": IntField()},
                  num_workers=threads).from_indexed_dataset(ImageFolder(setup["folder"]))
    train = setup.get("train", True)
    if train:
        image = [RandomResizedCropRGBImageDecoder((res, res)), RandomHorizontalFlip()]
    else:
        image = [CenterCropRGBImageDecoder((res, res), ratio=res / setup["val_resize"])]
    loader = Loader(str(beton), batch_size=setup["batch_size"], num_workers=threads,
                    order=OrderOption.RANDOM if train else OrderOption.SEQUENTIAL, os_cache=True, drop_last=True,
                    seed=setup["seed"], pipelines={"image": image + [ToTensor(), ToTorchImage()],
                                                   "label": [IntDecoder(), ToTensor()]})
    note = f"{threads} thread(s); its writer re-encoded the images (jpg q90, max side 500)"
    return (lambda epoch: ((x, y.view(-1)) for x, y in loader)), note


if __name__ == "__main__":
    serve(build)
