"""Per-iteration learning-rate schedules and the per-epoch progressive-resolution schedule.

Both are pure functions of the position in training, so a resumed run (or one resumed on a
different number of processes) recomputes them from (epoch, step) alone.
"""

from __future__ import annotations

import math

import torch

SCHEDULES = ("cosine", "step", "linear")
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
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} (expected one of {', '.join(SCHEDULES)})")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    t = min(1.0, (step - warmup_steps) / span)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * t))
    if schedule == "linear":
        return 1.0 - t
    return STEP_GAMMA ** sum(t >= m for m in STEP_MILESTONES)


def make_lr_scheduler(optimizer: torch.optim.Optimizer, *, total_steps: int, warmup_steps: int,
                      schedule: str) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR stepped once per iteration over `lr_factor`."""
    lr_factor(0, total_steps=total_steps, warmup_steps=warmup_steps, schedule=schedule)  # validate

    def factor(step: int) -> float:
        return lr_factor(step, total_steps=total_steps, warmup_steps=warmup_steps, schedule=schedule)

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
