"""Batch memory that loader workers reuse once the main process is done with it.

Why: a worker hands each batch to the main process in shared memory. A fresh shared-memory block
per batch (what PyTorch's ``default_collate`` does too) costs its page faults and zeroing every
time: measured on the 2-vCPU KVM guest of docs/benchmarks.md, ~8 ms per 64 x 3 x 224 x 224 uint8
batch, ~125 µs per image, against ~0.2 ms to refill a block already mapped.

How, without ever overwriting a batch someone still holds: each worker keeps a ring of shared
blocks (``SlotRing``). Every use of a block gets a fresh token; the worker sends (slot, token) with
the batch (``BatchInfo``). The main process (``Releaser``) keeps a weak reference to the storage
of each batch it yields and, once that storage is gone (the user dropped every tensor and view
of it; with ``pin_memory`` the pinned copy), writes the token into a small shared board. A block is
reused only when the board holds the token of its last use; when none is free the worker takes a
fresh block, as before. So a user who keeps batches (``list(loader)``) just gets fresh memory.
Tokens start from a random base per ring, so a late release from a previous ring (a worker of an
earlier epoch) never frees a block of the current one.

The hand-off itself (``outgoing`` in the worker, ``Releaser.receive`` in the main process, when the
DataLoader does not pin): torch sends a shared tensor by passing its file descriptor over a fresh
socket connection to the worker (multiprocessing's resource sharer, with its handshake), ~0.5 ms of
CPU per tensor on the 2-vCPU box, two per batch. So the labels travel as bytes in the pickle, and a
recycled block as its shape only: the main process keeps each ring block it has received (mapped
once) and hands out a fresh alias of it, whose storage is what ``track`` watches. Measured on
that box (busy), 224 px pixel shards, one pinned core: ~10-20 µs per image less (docs/benchmarks.md).
"""

from __future__ import annotations

import collections
import math
import os

import numpy as np
import torch
from torch.multiprocessing.reductions import StorageWeakRef

def ring_size(prefetch_factor: int) -> int:
    """Slots in a worker's ring for a DataLoader built with ``prefetch_factor``: the batches in
    flight, the one being filled, the one the consumer holds and one whose release is still on its
    way (trainer/watch/host.py counts the same for /dev/shm)."""
    return prefetch_factor + 3


def new_board(workers: int, prefetch_factor: int) -> torch.Tensor:
    """The shared release board: one int64 per (worker, slot), written by the main process."""
    return torch.zeros((max(1, workers), ring_size(prefetch_factor)), dtype=torch.int64).share_memory_()


def fresh_shared(shape: tuple) -> torch.Tensor:
    """A uint8 tensor allocated straight in shared memory (no copy when it is sent to the main process)."""
    try:
        storage = torch.UntypedStorage._new_shared(math.prod(shape))
        return torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)
    except (AttributeError, RuntimeError):
        return torch.empty(shape, dtype=torch.uint8)


class SlotRing:
    """A worker's reusable batch blocks; ``take`` returns (tensor, slot, token, recycled), slot -1 for a
    block outside the ring. ``keep``: how many of the last blocks taken are never handed out again
    (a worker interleaving ``keep`` streams: each stream's previous batch)."""

    def __init__(self, board: torch.Tensor, worker: int, keep: int = 1):
        self.board, self.worker = board, worker
        k = board.shape[1]
        self.blocks: list[torch.Tensor | None] = [None] * k
        self.tokens = [0] * k  # the token of each block's last use (0: never used)
        self.next_token = (int.from_bytes(os.urandom(5), "little") << 16) + 1  # < 2**56: an int64
        # the slots of the previous batch(es): the refill of a short batch may still read them
        self.last: collections.deque = collections.deque(maxlen=max(1, keep))

    def take(self, shape: tuple) -> tuple[torch.Tensor, int, int, bool]:
        """A uint8 block of ``shape`` in shared memory that nobody holds any more."""
        token = self.next_token
        self.next_token += 1
        row = self.board[self.worker].tolist()
        for k, block in enumerate(self.blocks):
            if k in self.last:
                continue
            if block is None or (self.tokens[k] and row[k] == self.tokens[k]):
                recycled = block is not None and tuple(block.shape) == tuple(shape)
                if not recycled:
                    block = self.blocks[k] = fresh_shared(shape)
                self.tokens[k] = token
                self.last.append(k)
                return block, k, token, recycled
        self.last.append(-1)
        return fresh_shared(shape), -1, token, False


def outgoing(images: torch.Tensor, labels: torch.Tensor, info) -> tuple:
    """What a worker sends for a batch (``Releaser.receive`` undoes it): the labels as bytes, and the
    images as their shape alone when they are in a recycled ring block (the main process has it)."""
    shape = tuple(images.shape) if info.slot >= 0 and info.recycled else None
    return shape or images, labels.numpy().tobytes(), info


def _alias(storage: torch.UntypedStorage, shape: tuple) -> torch.Tensor:
    """A uint8 tensor of ``shape`` over the start of ``storage`` with a storage object of its own
    (through numpy), so that a weak reference to it dies with the batch, not with the block."""
    whole = torch.empty(0, dtype=torch.uint8).set_(storage)
    return torch.from_numpy(whole.numpy())[:math.prod(shape)].view(shape)


class Releaser:
    """Main-process side: watches the batches handed out and frees their slots once they are gone."""

    def __init__(self, board: torch.Tensor, keep_blocks: bool = False):
        self.board, self.keep_blocks = board, keep_blocks
        self.pending: list[tuple[StorageWeakRef, int, int, int]] = []
        self.blocks: dict[tuple[int, int], torch.UntypedStorage] = {}  # (worker, slot): the ring block (receive)

    def receive(self, images, labels, info) -> tuple[torch.Tensor, torch.Tensor]:
        """(images, labels) of a batch as the consumer gets them, the images tracked. ``keep_blocks``
        (the workers send through ``outgoing``): a ring block's images come as an alias of the block,
        which this keeps for its next uses."""
        if isinstance(labels, (bytes, bytearray)):
            labels = torch.from_numpy(np.frombuffer(bytearray(labels), dtype=np.int64))
        if info.slot >= 0 and self.keep_blocks:
            key = (info.worker, info.slot)
            if isinstance(images, torch.Tensor):
                self.blocks[key] = images.untyped_storage()
                shape = tuple(images.shape)
            else:
                shape = tuple(images)
            if key not in self.blocks:
                raise RuntimeError(f"worker {info.worker} sent ring slot {info.slot} as recycled, but this process "
                                   f"never received that block")
            images = _alias(self.blocks[key], shape)
        self.track(images, info.worker, info.slot, info.token)
        return images, labels

    def track(self, images: torch.Tensor, worker: int, slot: int, token: int) -> None:
        """Remember the batch just received; its slot is freed once its storage is gone."""
        if slot >= 0:
            self.pending.append((StorageWeakRef(images.untyped_storage()), worker, slot, token))

    def release_done(self) -> None:
        """Write the token of every batch whose storage is gone into the board."""
        still = []
        for ref, worker, slot, token in self.pending:
            if ref.expired():
                self.board[worker, slot] = token
            else:
                still.append((ref, worker, slot, token))
        self.pending = still
