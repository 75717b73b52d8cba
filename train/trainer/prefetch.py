"""From loader batches (uint8, pinned, on the host) to model-ready batches on the device.

`DevicePrefetcher` copies batch i+1 to the GPU on a side CUDA stream while the model runs on
batch i, then normalizes it there (mean/std, to the compute dtype), applies channels_last,
MixUp/CutMix and random erasing. On CPU the same code runs with no streams. The time spent
blocked on the loader's `next()` is reported with each batch: that is the data wait.

All device-side randomness comes from per-epoch generators seeded by (seed, epoch, rank), so an
epoch's augmentations do not depend on what ran before it (exact resume at epoch boundaries);
`rng_state` is their state before the batch held ahead, for a mid-epoch checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

import numpy as np
import torch

# ImageNet channel statistics in uint8 units, so normalization is one fused sub/mul.
MEAN_255 = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD_255 = (0.229 * 255, 0.224 * 255, 0.225 * 255)
# timm's random-erasing defaults: erased area fraction, aspect ratio range, attempts per sample.
ERASE_AREA = (0.02, 1 / 3)
ERASE_RATIO = (0.3, 1 / 0.3)
ERASE_ATTEMPTS = 10


@dataclass(frozen=True)
class DeviceAugment:
    """Batch-level augmentation done on the device. Alphas of 0 switch MixUp/CutMix off.

    With both alphas > 0 each batch uses one of them, CutMix with probability `switch_prob`
    (timm's habit). Pairs are (i, B-1-i): the loader already shuffled, so no permutation needed.
    """

    num_classes: int
    mixup: float = 0.0
    cutmix: float = 0.0
    switch_prob: float = 0.5
    random_erase: float = 0.0
    erase_fill: str = "noise"  # "noise": N(0,1) per pixel (timm's "pixel" mode); "zero": 0 (torchvision's value=0)

    @property
    def mixes(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0


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


def cutmix_box(height: int, width: int, lam: float, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1) of a box covering ~(1-lam) of the image, centred uniformly, clipped."""
    cut = math.sqrt(1.0 - lam)
    ch, cw = int(height * cut), int(width * cut)
    cy, cx = int(rng.integers(height)), int(rng.integers(width))
    y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, height)
    x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, width)
    return y0, y1, x0, x1


def mix_batch(x: torch.Tensor, labels: torch.Tensor, aug: DeviceAugment,
              rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """MixUp or CutMix of sample i with sample B-1-i. Returns (images, soft targets float32 [B,C]).

    Label smoothing is left to the loss (CrossEntropyLoss smooths probability targets too).
    """
    use_cutmix = aug.cutmix > 0 and (aug.mixup <= 0 or rng.random() < aug.switch_prob)
    lam = float(rng.beta(aug.cutmix, aug.cutmix) if use_cutmix else rng.beta(aug.mixup, aug.mixup))
    flipped = x.flip(0)
    if use_cutmix:
        h, w = x.shape[-2:]
        y0, y1, x0, x1 = cutmix_box(h, w, lam, rng)
        x = x.clone()
        x[:, :, y0:y1, x0:x1] = flipped[:, :, y0:y1, x0:x1]
        lam = 1.0 - (y1 - y0) * (x1 - x0) / float(h * w)  # the area actually pasted
    else:
        x = x.mul(lam).add_(flipped, alpha=1.0 - lam)
    one_hot = torch.nn.functional.one_hot(labels, aug.num_classes).float()
    targets = one_hot.mul(lam).add_(one_hot.flip(0), alpha=1.0 - lam)
    return x, targets


def erase_boxes(batch: int, height: int, width: int, prob: float,
                rng: np.random.Generator) -> np.ndarray:
    """Per-sample erase boxes [B,4] (y0, x0, h, w); h = w = 0 where a sample is not erased."""
    boxes = np.zeros((batch, 4), dtype=np.int64)
    chosen = rng.random(batch) < prob
    area = height * width
    targets = rng.uniform(*ERASE_AREA, size=(batch, ERASE_ATTEMPTS)) * area
    ratios = np.exp(rng.uniform(math.log(ERASE_RATIO[0]), math.log(ERASE_RATIO[1]),
                                size=(batch, ERASE_ATTEMPTS)))
    hs = np.round(np.sqrt(targets * ratios)).astype(np.int64)
    ws = np.round(np.sqrt(targets / ratios)).astype(np.int64)
    fits = (hs < height) & (ws < width) & (hs > 0) & (ws > 0)
    us = rng.random((batch, ERASE_ATTEMPTS, 2))  # uniform positions, scaled per attempt below
    for i in np.flatnonzero(chosen & fits.any(axis=1)):
        j = int(np.argmax(fits[i]))
        h, w = int(hs[i, j]), int(ws[i, j])
        boxes[i] = (int(us[i, j, 0] * (height - h + 1)), int(us[i, j, 1] * (width - w + 1)), h, w)
    return boxes


def random_erase(x: torch.Tensor, boxes: np.ndarray, generator: torch.Generator, fill: str = "noise") -> torch.Tensor:
    """Fill each sample's box with per-pixel N(0,1) noise (timm's "pixel" mode, normalized space), or
    with 0 (`fill="zero"`: torchvision's RandomErasing default value, the mean after normalization)."""
    if not (boxes[:, 2] > 0).any():
        return x
    b, _, h, w = x.shape
    bx = torch.from_numpy(boxes)
    if x.device.type == "cuda":  # non_blocking from pageable memory would stall the stream: pin first
        bx = bx.pin_memory()
    bx = bx.to(x.device, non_blocking=True)
    rows = torch.arange(h, device=x.device).view(1, h, 1)
    cols = torch.arange(w, device=x.device).view(1, 1, w)
    y0, x0 = bx[:, 0].view(b, 1, 1), bx[:, 1].view(b, 1, 1)
    y1, x1 = y0 + bx[:, 2].view(b, 1, 1), x0 + bx[:, 3].view(b, 1, 1)
    mask = ((rows >= y0) & (rows < y1) & (cols >= x0) & (cols < x1)).unsqueeze(1)
    if fill == "zero":
        return x.masked_fill(mask, 0.0)
    noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=torch.float32)
    return torch.where(mask, noise.to(x.dtype), x)


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
                 rank: int = 0):
        self.loader = loader
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

    def rng_state(self) -> dict | None:
        """The augmentation's random state from before the batch held ahead was prepared: what a
        run resumed after the batch just handed over must start from (None without augmentation)."""
        return self._resume_rng

    def load_rng_state(self, state: dict | None) -> None:
        """Continue the epoch's augmentation stream from `rng_state()` (after `set_epoch`)."""
        if state is not None:
            self.rng.bit_generator.state = state["numpy"]
            self.generator.set_state(state["torch"])

    def _fetch(self, it: Iterator) -> tuple | None:
        if self.aug is not None:  # a few µs a batch: numpy's PCG64 state and the generator's
            self._resume_rng = {"numpy": self.rng.bit_generator.state, "torch": self.generator.get_state()}
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
            return (*self._prepare(images, labels), wait, keys[0] if keys else None)

    def __iter__(self) -> Iterator[DeviceBatch]:
        it = iter(self.loader)
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
