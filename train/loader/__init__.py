"""The streaming shard loader: manifest -> epoch plan -> read -> shuffle -> decode -> uint8 batches."""

from imagenet_shards.train.loader.dataset import ShardLoader, make_loader

__all__ = ["ShardLoader", "make_loader"]
