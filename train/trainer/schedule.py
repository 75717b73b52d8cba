"""Learning-rate schedules and the per-epoch progressive-resolution schedule.

All are pure functions of the position in training, so a resumed run (or one resumed on a
different number of processes) recomputes them from (epoch, step) alone. Besides our own
per-iteration shapes (`cosine`, `linear`, `step`, each after a linear warmup) there are the exact
shapes of the published recipes (docs/recipes.md), each named after what it computes:

- `triangle` (FFCV's `cyclic`, ffcv-imagenet train_imagenet.py:107-113 and 356-358): the lr at
  each integer epoch is interpolated along [start_factor at epoch 0, 1 at `peak_epoch`, end_factor
  at the last epoch], and within epoch e it goes linearly from lr(e) to lr(e+1), per iteration.
- `step-epochs` (torchvision's StepLR, stepped once per epoch): gamma ** (epoch // step_epochs).
- `cosine-epochs` (torchvision's LinearLR warmup then CosineAnnealingLR, both stepped per epoch):
  start_factor + (1 - start_factor) * e / W for e < W, then end + (1 - end)(1 + cos(pi (e - W) / (E - W))) / 2.
- `timm-cosine` (timm's CosineLRScheduler with t_in_epochs, warmup_prefix False, stepped per epoch):
  start + e (1 - start) / W for e < W, then end + (1 - end)(1 + cos(pi e / E)) / 2, end after E.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

SCHEDULES = ("cosine", "step", "linear", "triangle", "step-epochs", "cosine-epochs", "timm-cosine")
ITERATION_SCHEDULES = ("cosine", "step", "linear")  # ours: linear warmup, then the shape, per iteration
# `step` decays by STEP_GAMMA at these fractions of the post-warmup iterations.
STEP_MILESTONES = (0.5, 0.75)
STEP_GAMMA = 0.1
# Intermediate ramp resolutions are rounded to this multiple (FFCV uses 32): few distinct shapes
# keep cudnn autotuning and torch.compile recompiles cheap.
RES_MULTIPLE = 32


def default_lr(global_batch: int) -> float:
    """Linear scaling rule (Goyal et al. 2017): 0.1 per 256 images of global batch."""
    return 0.1 * global_batch / 256


def lr_factor(step: int, *, total_steps: int, warmup_steps: int, schedule: str) -> float:
    """Multiplier of the base lr before optimizer step `step` (0-based).

    Linear warmup from 1/warmup_steps to 1 over `warmup_steps` iterations, then `cosine` (to 0),
    `linear` (to 0, FFCV's triangular tail) or `step` (x0.1 at 50% and 75% of what is left).
    """
    if schedule not in ITERATION_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} (expected one of {', '.join(ITERATION_SCHEDULES)})")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    t = min(1.0, (step - warmup_steps) / span)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * t))
    if schedule == "linear":
        return 1.0 - t
    return STEP_GAMMA ** sum(t >= m for m in STEP_MILESTONES)


@dataclass(frozen=True)
class LrSchedule:
    """Everything the lr multiplier depends on; `factor(step)` is the multiplier of the peak lr
    before optimizer step `step` (0-based). Factors, not absolute lrs: a peak scaled for another
    world size scales the whole curve (a source's absolute warmup/minimum lr is turned into a
    factor of the scaled peak by the recipe resolver)."""

    kind: str
    epochs: int
    steps_per_epoch: int
    warmup_epochs: float = 0.0
    peak_epoch: float = 2.0      # triangle
    start_factor: float = 0.0    # triangle: at epoch 0; cosine-epochs / timm-cosine: at warmup start
    end_factor: float = 0.0      # triangle: at the last epoch; the cosines: their floor
    step_epochs: int = 30        # step-epochs
    gamma: float = 0.1           # step-epochs

    def __post_init__(self):
        if self.kind not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.kind!r} (expected one of {', '.join(SCHEDULES)})")
        if self.epochs < 1 or self.steps_per_epoch < 1:
            raise ValueError(f"schedule needs epochs and steps per epoch >= 1, got {self.epochs}, "
                             f"{self.steps_per_epoch}")

    def _epoch_value(self, e: float) -> float:
        """The per-epoch curves at (integer) epoch e."""
        E, W = self.epochs, self.warmup_epochs
        if self.kind == "triangle":
            return float(np.interp(e, (0.0, self.peak_epoch, float(E)), (self.start_factor, 1.0, self.end_factor)))
        if self.kind == "step-epochs":
            return self.gamma ** (int(e) // self.step_epochs)
        if self.kind == "cosine-epochs":
            if e < W:
                return self.start_factor + (1.0 - self.start_factor) * e / W
            t = min(1.0, (e - W) / max(1e-12, E - W))
            return self.end_factor + (1.0 - self.end_factor) * 0.5 * (1.0 + math.cos(math.pi * t))
        # timm-cosine
        if e < W:
            return self.start_factor + e * (1.0 - self.start_factor) / W
        if e >= E:
            return self.end_factor
        return self.end_factor + 0.5 * (1.0 - self.end_factor) * (1.0 + math.cos(math.pi * e / E))

    def factor(self, step: int) -> float:
        spe = self.steps_per_epoch
        if self.kind in ITERATION_SCHEDULES:
            return lr_factor(step, total_steps=self.epochs * spe, warmup_steps=int(self.warmup_epochs * spe),
                             schedule=self.kind)
        epoch, i = divmod(step, spe)
        if self.kind == "triangle":  # lr(e) -> lr(e + 1) linearly over the epoch's iterations
            a, b = self._epoch_value(epoch), self._epoch_value(epoch + 1)
            return a + (b - a) * i / spe
        return self._epoch_value(epoch)

    def lr_at_epochs(self, peak: float) -> list[float]:
        """The lr before the first step of each epoch."""
        return [peak * self.factor(e * self.steps_per_epoch) for e in range(self.epochs)]


def make_lr_scheduler(optimizer: torch.optim.Optimizer, schedule: LrSchedule) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR stepped once per optimizer step over `schedule.factor`."""

    def factor(step: int) -> float:
        return schedule.factor(step)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def default_ramp(epochs: int) -> tuple[int, int]:
    """FFCV's habit: stay at the start resolution until ~70% of training, reach the end at ~85%."""
    start = int(0.7 * epochs)
    return start, max(start, int(0.85 * epochs))


def resolution_at(epoch: int, *, start_res: int, end_res: int | None,
                  ramp: tuple[int, int]) -> int:
    """Train resolution for `epoch` (0-based): start_res until ramp[0], end_res from ramp[1].

    In between, linear interpolation rounded to a multiple of RES_MULTIPLE (the endpoints exact).
    """
    if end_res is None or end_res == start_res:
        return start_res
    a, b = ramp
    if epoch <= a:
        return start_res
    if epoch >= b:
        return end_res
    res = start_res + (end_res - start_res) * (epoch - a) / (b - a)
    return max(RES_MULTIPLE, int(round(res / RES_MULTIPLE)) * RES_MULTIPLE)


def schedule_for(config, steps_per_epoch: int) -> LrSchedule:
    """The lr schedule of a run (a TrainConfig or anything with its fields) at `steps_per_epoch`
    optimizer steps an epoch."""
    return LrSchedule(kind=config.schedule, epochs=config.epochs, steps_per_epoch=steps_per_epoch,
                      warmup_epochs=config.warmup_epochs or 0.0, peak_epoch=config.lr_peak_epoch,
                      start_factor=config.lr_start_factor, end_factor=config.lr_end_factor,
                      step_epochs=config.lr_step_epochs, gamma=config.lr_gamma)


def run_resolution(config, epoch: int) -> int:
    """A run's train resolution in `epoch`: --res, or the --res -> --end-res ramp over --ramp-epochs
    (default `default_ramp`)."""
    ramp = tuple(config.ramp_epochs) if config.ramp_epochs else default_ramp(config.epochs)
    return resolution_at(epoch, start_res=config.res, end_res=config.end_res, ramp=ramp)
