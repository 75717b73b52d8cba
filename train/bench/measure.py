"""Our loader as a timed batch stream: the single-loader measurement of ``bench-loader``."""

from __future__ import annotations

import time

from imagenet_shards.train.bench.baselines import val_resize
from imagenet_shards.train.bench.timing import BatchStream, summarize, time_stream
from imagenet_shards.train import loader as D
from imagenet_shards.train.loader import decode as dec


def our_stream(data: str, *, split: str = "train", workers: int = 1, batch_size: int = 64, decoder: str = "auto",
               res: int = 224, dct_scaling: str = "auto") -> tuple[BatchStream, D.ShardLoader]:
    """``make_loader`` over ``data`` as an endless stream (next epoch after the last batch), and the loader.

    Val crops (``split`` other than train) resize to ``res * 256 / 224`` and centre-crop ``res``;
    ``dct_scaling`` goes to the loader (``decode.DCT_SCALINGS``)."""
    loader = D.make_loader(data, split, batch_size, workers=workers, res=res, decoder=decoder, val_crop=res,
                           val_resize=val_resize(res), persistent_workers=workers > 0, dct_scaling=dct_scaling)

    def epochs(e):
        loader.set_epoch(e)
        return loader
    return BatchStream(epochs), loader


def measure_loader(data: str, *, split: str = "train", workers: int = 1, batches: int = 50, batch_size: int = 64,
                   decoder: str = "auto", res: int = 224, warmup: int = 5, rounds: int = 1,
                   dct_scaling: str = "auto") -> dict:
    """images/s of ``make_loader`` (train crops unless ``split`` is not train): the median of ``rounds``
    (``images_per_s``), the best round (``images_per_s_best``) and images per CPU-second."""
    stream, loader = our_stream(data, split=split, workers=workers, batch_size=batch_size, decoder=decoder, res=res,
                                dct_scaling=dct_scaling)
    t0 = time.perf_counter()
    out = summarize([time_stream(stream, batches=batches, warmup=warmup) for _ in range(rounds)])
    out["store"] = loader.store_stats(seconds=time.perf_counter() - t0)  # remote DATA: bytes/s, requests/s, wait
    out.update(workers=workers, batch_size=batch_size, decoder=dec.resolve_decoder(decoder), res=res, split=split,
               dct_scaling=dct_scaling,
               images_per_s_per_worker=out["images_per_s"] / max(1, workers))
    return out
