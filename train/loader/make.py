"""``make_loader``: a ``ShardLoader`` over one split of a shard set, from its manifest (``dataset``
holds the loader and its dataset; this module only reads the manifest and wires the options)."""

from __future__ import annotations

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.digest import shard_check
from imagenet_shards.pipeline.format.manifest import manifest_form, read_manifest, split_shards
from imagenet_shards.train.augment import interpolation as interp
from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.loader.batching import DecodeConfig
from imagenet_shards.train.loader.cache import ShardCache
from imagenet_shards.train.loader.dataset import ShardDataset, ShardLoader
from imagenet_shards.train.loader.reading import BAD_SHARDS


def make_loader(data: str, split: str, batch_size: int, *, train: bool | None = None, workers: int = 4,
                seed: int = 0, epoch: int = 0, rank: int = 0, world_size: int = 1, res: int = 224,
                val_resize: int = 256, val_crop: int = 224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                hflip: bool = True, decoder: str = "auto", aug: str | None = None, shuffle_buffer: int = 2000,
                pin_memory: bool = False, persistent_workers: bool = False, prefetch_factor: int = 4,
                strict: bool = False, cache_dir: str | None = None, cache_bytes: int | None = None,
                val_crop_ratio: float | None = None, repeats: int = 1, keys: bool = False,
                readahead: storage.ReadAheadPolicy | None = storage.ReadAheadPolicy(), bad_shards: str = "stop",
                verify: bool = True, interpolation: str = "bilinear", accumulate: int = 1,
                dct_scaling: str = "auto") -> ShardLoader:
    """A ``ShardLoader`` over ``split`` of the shard set at DATA (a directory or URL with manifest.json).

    ``train`` defaults to ``split == "train"``: random-resized crops, shuffled, full batches only.
    Otherwise: centre crops, manifest order, every sample exactly once (see docs/loader.md).
    ``cache_dir``: keep local copies of remote shards there, at most ``cache_bytes`` (default 90%
    of that disk), least recently used evicted first (``cache.ShardCache``). ``val_crop_ratio``:
    FFCV's val centre crop (that fraction of the shorter side, resized to ``val_crop``) instead of
    resize + crop. ``repeats`` > 1: repeated augmentation in train (``plan.repeated_plan``).
    ``keys``: eval batches come as (images, labels, keys). ``readahead``: how remote shards are read
    without a cache (parallel ranged reads ahead of the decoder, ``storage.readahead``; None: one
    sequential stream per shard). ``verify``: check each shard read against the manifest's digest
    (xxh3_128, else sha256; ``reading.read_shard``); ``bad_shards``: what a shard that fails does,
    ``"stop"`` (a ``ShardDigestError`` naming it) or ``"skip"`` (its samples counted as bad samples,
    with the reason). ``interpolation``: the crops' filter, bilinear or bicubic, or for train crops
    random (timm's per-image choice; ``augment.interpolation``). ``accumulate``: micro-batches per
    optimizer step (``position`` keeps that many more batches back); with ``repeats`` > 1 on fewer
    ranks than repeats, the copies of a sample go to different micro-batches of a step
    (``plan.spread_plan``). ``dct_scaling``: ``"off"`` decodes
    every JPEG crop at full size instead of libjpeg's 1/2, 1/4, 1/8 scale (``decode.DCT_SCALINGS``)."""
    if train is None:
        train = split == "train"
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if val_crop > val_resize and val_crop_ratio is None:
        raise ValueError(f"val_crop {val_crop} is larger than val_resize {val_resize}")
    if repeats < 1 or accumulate < 1:
        raise ValueError(f"repeats and accumulate must be >= 1, got {repeats} and {accumulate}")
    if bad_shards not in BAD_SHARDS:
        raise ValueError(f"bad_shards must be one of {', '.join(BAD_SHARDS)}, got {bad_shards!r}")
    dec.make_aug(aug)  # validate the name early
    interp.check(interpolation, train=train)
    dec.check_dct_scaling(dct_scaling)
    manifest = read_manifest(data)
    cfg = DecodeConfig(train=train, res=res, val_resize=val_resize, val_crop=val_crop, scale=tuple(scale),
                       ratio=tuple(ratio), hflip=hflip, decoder=dec.resolve_decoder(decoder), aug=aug,
                       val_ratio=val_crop_ratio, interpolation=interpolation, form=manifest_form(manifest),
                       dct_scaling=dct_scaling)
    shards = split_shards(manifest, data, split)
    cache = ShardCache(cache_dir, cache_bytes) if cache_dir else None
    dataset = ShardDataset(shards, batch_size=batch_size, cfg=cfg, workers=workers, seed=seed, rank=rank,
                           world_size=world_size, shuffle_buffer=shuffle_buffer, strict=strict, epoch=epoch,
                           cache=cache, prefetch_factor=prefetch_factor, repeats=repeats, readahead=readahead,
                           shard_bytes=_shard_bytes(manifest, split), bad_shards=bad_shards, accumulate=accumulate,
                           digests=[shard_check(s) for s in manifest["splits"][split]["shards"]] if verify else None)
    return ShardLoader(dataset, workers=workers, pin_memory=pin_memory, persistent_workers=persistent_workers,
                       prefetch_factor=prefetch_factor, keys=keys and not train)


def _shard_bytes(manifest: dict, split: str) -> list[int | None]:
    """Each shard's size as the manifest records it (None where it does not), in ``split_shards`` order."""
    return [b if isinstance(b := s.get("bytes"), int) and b >= 0 else None for s in manifest["splits"][split]["shards"]]
