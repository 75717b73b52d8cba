"""DALI's CPU pipeline as a ``bench-loader --compare`` row: run by ``$PEERS/dali/bin/python``
(shared/peers/setup.sh).

As shared/peers/README.md asks: ``fn.readers.file`` over the same images as files +
``fn.decoders.image_random_crop(device="cpu")`` + ``fn.resize`` + ``fn.crop_mirror_normalize`` (random
mirror); val: ``fn.decoders.image`` + ``fn.resize(resize_shorter=...)`` + a centred
``crop_mirror_normalize`` crop; ``num_threads=workers``, ``device_id=None`` (CPU only). Its output is float CHW, normalized
(the row's note says so): more bytes out per image than the uint8 of the other rows.
"""

from __future__ import annotations

from pathlib import Path

if __package__:  # imported as part of the package (docs, tools)
    from imagenet_shards.train.bench.peer_serve import serve
else:  # run by the DALI environment's python: this folder is first on sys.path
    from peer_serve import serve

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def build(setup: dict):
    from nvidia.dali import fn, pipeline_def, types

    threads, res, batch_size = max(1, setup["workers"]), setup["res"], setup["batch_size"]
    train = setup.get("train", True)

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=setup["seed"])
    def pipe():
        jpegs, labels = fn.readers.file(file_root=setup["folder"], random_shuffle=train, name="reader")
        if train:
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
            images = fn.resize(images, resize_x=res, resize_y=res)
            return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD,
                                            mirror=fn.random.coin_flip()), labels
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_shorter=setup["val_resize"])
        return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mean=MEAN, std=STD,
                                        crop=(res, res)), labels

    p = pipe()
    p.build()
    per_epoch = max(1, sum(1 for _ in Path(setup["folder"]).rglob("*.JPEG")) // batch_size)

    def epochs(epoch):
        for _ in range(per_epoch):
            images, labels = p.run()
            yield images.as_array(), labels.as_array().reshape(-1)
    return epochs, f"{threads} thread(s); float32 CHW out (crop_mirror_normalize), not uint8"


if __name__ == "__main__":
    serve(build)
