"""Streaming training: shard loader, device prefetch, trainer, loader benchmark."""
