"""From loader batches (uint8, pinned, on the host) to model-ready batches on the device.

`DevicePrefetcher` copies batch i+1 to the GPU on a side CUDA stream while the model runs on
batch i, then normalizes it there (mean/std, to the compute dtype), applies channels_last,
MixUp/CutMix and random erasing (`augment.device`). On CPU the same code runs with no streams.
The time spent blocked on the loader's `next()` is reported with each batch: that is the data wait.

All device-side randomness comes from per-epoch generators seeded by (seed, epoch, rank), so an
epoch's augmentations do not depend on what ran before it (exact resume at epoch boundaries);
`rng_state(n)` is their state before batch n of the epoch's iteration was prepared (default: the
batch held ahead), for a mid-epoch checkpoint.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import time
from typing import Iterable, Iterator, NamedTuple

import numpy as np
import torch

from imagenet_shards.train.augment.device import DeviceAugment, erase_boxes, mix_batch, random_erase

# ImageNet channel statistics in uint8 units, so normalization is one fused sub/mul.
MEAN_255 = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD_255 = (0.229 * 255, 0.224 * 255, 0.225 * 255)


class DeviceBatch(NamedTuple):
    """images: float [B,3,H,W] in the compute dtype; targets: labels, or soft labels [B,C] when
    mixed; labels: the original int64 labels (for accuracy); wait_s: seconds blocked on the loader;
    keys: the samples' keys when the loader hands them over (eval with ReaL labels), else None."""

    images: torch.Tensor
    targets: torch.Tensor
    labels: torch.Tensor
    wait_s: float
    keys: tuple | None = None


@functools.lru_cache(maxsize=None)
def _channel_stats(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    # made once per device: a fresh host->device copy per batch would block the host
    mean = torch.tensor(MEAN_255, device=device).view(1, 3, 1, 1)
    return mean, 1.0 / torch.tensor(STD_255, device=device).view(1, 3, 1, 1)


def normalize(images: torch.Tensor, dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    """uint8 [B,3,H,W] -> (x/255 - mean)/std in `dtype` (arithmetic in float32)."""
    mean, inv_std = _channel_stats(images.device)
    return to_model_layout(images.float().sub_(mean).mul_(inv_std), dtype, channels_last)


def to_model_layout(x: torch.Tensor, dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    """`x` in the compute dtype and memory format in one pass (a layout change then a cast would
    read and write the batch twice); `x` itself when both already hold."""
    return x.to(dtype, memory_format=torch.channels_last if channels_last else torch.preserve_format)


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` on `device`; asynchronous only from pinned memory (non_blocking from pageable memory
    stages through a driver buffer and stalls the stream it is issued on)."""
    if t.device == device:
        return t
    return t.to(device, non_blocking=device.type == "cuda" and t.is_pinned())


class LoaderError(RuntimeError):
    """The loader failed (a damaged or missing shard, a storage error); the message is one line."""


def error_line(exc: BaseException) -> str:
    """One line for an exception raised by a loader. A DataLoader worker's exception arrives with
    the worker's whole traceback in its message; the last line of it is the original error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if len(lines) > 1 and "Traceback" in str(exc):
        last = lines[-1]
        kind, sep, rest = last.partition(": ")
        return rest if sep and kind.replace(".", "").replace("_", "").isalnum() else last
    return " ".join(lines)


class DevicePrefetcher:
    """Iterate a loader of (uint8 images, int64 labels) as `DeviceBatch`es on `device`.

    `aug=None` (evaluation) only normalizes. Call `set_epoch(e)` before each epoch: it forwards to
    the loader and reseeds the device-side augmentation.
    """

    def __init__(self, loader: Iterable, device: torch.device, *, dtype: torch.dtype = torch.float32,
                 channels_last: bool = False, aug: DeviceAugment | None = None, seed: int = 0,
                 rank: int = 0, keep: int = 16):
        self.loader = loader
        self.keep = keep  # batches of augmentation state kept back (rng_state): at least --accumulate + 1
        self.device = device
        self.dtype = dtype
        self.channels_last = channels_last
        self.aug = aug
        self.seed = seed
        self.rank = rank
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.set_epoch(0, forward=False)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int, forward: bool = True) -> None:
        if forward and hasattr(self.loader, "set_epoch"):
            self.loader.set_epoch(epoch)
        self.rng = np.random.default_rng([self.seed, epoch, self.rank, 0x5EED])
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(self.rng.integers(2**62)))
        self._resume_rng = None if self.aug is None else {"numpy": self.rng.bit_generator.state,
                                                          "torch": self.generator.get_state()}
        # (batch index in the iteration, the state before it was prepared) of the last few batches: a
        # stop past its deadline saves from the last completed step, which under --accumulate may be
        # batches before the one held ahead
        self._rng_log: collections.deque = collections.deque(maxlen=self.keep)
        self._fetched = 0

    def _prepare(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        images, labels = to_device(images, self.device), to_device(labels, self.device)
        x = normalize(images, torch.float32, False)
        targets = labels
        aug = self.aug
        # erasing is a per-sample transform, so it comes before the batch is mixed (torchvision's
        # presets erase in the dataset transform and mix in collate_fn; timm's loader does the same)
        if aug is not None and aug.random_erase > 0:
            boxes = erase_boxes(x.shape[0], x.shape[2], x.shape[3], aug.random_erase, self.rng)
            x = random_erase(x, boxes, self.generator, aug.erase_fill)
        if aug is not None and aug.mixes:
            x, targets = mix_batch(x, labels, aug, self.rng)
        return to_model_layout(x, self.dtype, self.channels_last), targets, labels

    def rng_state(self, batches: int | None = None) -> dict | None:
        """The augmentation's random state from before batch `batches` of this iteration was prepared
        (default: the batch held ahead): what a run resumed after `batches` batches must start from
        (None without augmentation)."""
        if batches is None or self.aug is None:
            return self._resume_rng
        for index, state in self._rng_log:
            if index == batches:
                return state
        raise ValueError(f"no augmentation state kept for batch {batches} (fetched {self._fetched})")

    def load_rng_state(self, state: dict | None) -> None:
        """Continue the epoch's augmentation stream from `rng_state()` (after `set_epoch`)."""
        if state is not None:
            self.rng.bit_generator.state = state["numpy"]
            self.generator.set_state(state["torch"])

    def _fetch(self, it: Iterator) -> tuple | None:
        # On CUDA this runs on the side stream: a loader that hands over device tensors made on a
        # stream of its own (--gpu-decode) makes the current (side) stream wait for them.
        with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
            t0 = time.perf_counter()
            try:
                images, labels, *keys = next(it)  # (images, labels[, keys])
            except StopIteration:
                return None
            except Exception as e:  # from the loader's workers: one line, not a worker traceback
                raise LoaderError(error_line(e)) from e
            wait = time.perf_counter() - t0
            if self.aug is not None:  # a few µs a batch: numpy's PCG64 state and the generator's
                self._resume_rng = {"numpy": self.rng.bit_generator.state, "torch": self.generator.get_state()}
                self._rng_log.append((self._fetched, self._resume_rng))
            self._fetched += 1
            return (*self._prepare(images, labels), wait, keys[0] if keys else None)

    def __iter__(self) -> Iterator[DeviceBatch]:
        it = iter(self.loader)
        self._fetched = 0
        self._rng_log.clear()
        try:
            nxt = self._fetch(it)
            while nxt is not None:
                current = nxt
                if self.stream is not None:
                    main = torch.cuda.current_stream(self.device)
                    main.wait_stream(self.stream)
                    for t in current[:3]:
                        t.record_stream(main)  # made on the side stream, used and freed on the main one
                # Issue the next copy before handing this batch over, so it overlaps with the step.
                nxt = self._fetch(it)
                yield DeviceBatch(*current)
        finally:
            close = getattr(it, "close", None)
            if close is not None:  # an epoch cut short: let the loader stop (and count) now
                close()


class SyntheticBatches:
    """`steps` copies of one device-resident random uint8 batch: the model-only ceiling.

    Same interface as the shard loader (len, set_epoch, set_resolution), so the trainer and the
    prefetcher run unchanged; the prefetcher's copy becomes a no-op.
    """

    def __init__(self, steps: int, batch_size: int, res: int, num_classes: int,
                 device: torch.device, seed: int = 0):
        self.steps, self.batch_size, self.num_classes = steps, batch_size, num_classes
        self.device, self.seed = device, seed
        self.num_samples = steps * batch_size
        self.set_resolution(res)

    def __len__(self) -> int:
        return self.steps

    def set_epoch(self, epoch: int) -> None:
        pass

    def set_resolution(self, res: int) -> None:
        g = torch.Generator().manual_seed(self.seed)
        self.res = res
        self.images = torch.randint(0, 256, (self.batch_size, 3, res, res), generator=g,
                                    dtype=torch.uint8).to(self.device)
        self.labels = torch.randint(0, self.num_classes, (self.batch_size,), generator=g).to(self.device)

    def __iter__(self):
        for _ in range(self.steps):
            yield self.images, self.labels
