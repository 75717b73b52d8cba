"""The streaming shard loader: manifest -> epoch plan -> read -> shuffle -> decode -> uint8 batches.

Modules, in data-flow order: ``plan`` (the pure epoch plan), ``reading`` (shard pieces -> raw
records, through the lenient tar reader of ``imagenet_shards.pipeline.format.tar``), ``batching``
(shuffle buffer, decode, whole batches), ``decode`` (per-sample JPEG -> uint8 crop), ``position``
(where an epoch stands, and resuming it without decoding what it skips), ``fingerprint`` (count
and order-independent hash of the samples used), ``dataset`` (the DataLoader facade:
``ShardLoader``), ``make`` (``make_loader``: a loader from a manifest), ``cache`` (local copies of remote shards), ``gpu_decode``.
The names below are the package's public surface.
"""

from imagenet_shards.pipeline.format.manifest import Shard, read_manifest, split_shards
from imagenet_shards.train.loader.batching import (BadSampleError, BatchInfo, DecodeConfig, StreamPosition, batches,
                                                   shuffle_buffer)
from imagenet_shards.train.loader.dataset import ShardDataset, ShardLoader
from imagenet_shards.train.loader.make import make_loader
from imagenet_shards.train.loader.plan import Piece, PlanError, WorkerPlan, epoch_plan, rest_plan, shard_order
from imagenet_shards.train.loader.reading import SKIPPED, Record, open_url, read_pieces, read_shard

__all__ = ["BadSampleError", "BatchInfo", "DecodeConfig", "Piece", "PlanError", "Record", "SKIPPED", "Shard",
           "ShardDataset", "ShardLoader", "StreamPosition", "WorkerPlan", "batches", "epoch_plan", "make_loader",
           "open_url", "read_manifest", "read_pieces", "read_shard", "rest_plan", "shard_order", "shuffle_buffer",
           "split_shards"]
