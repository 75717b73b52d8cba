"""The training loss: cross-entropy (with label smoothing), or the binary cross-entropy of ResNet
Strikes Back (one sigmoid per class, "1-vs-all", arXiv 2110.00476 section 2).

Targets come as int64 labels, or as soft targets [B, C] when MixUp/CutMix mixed the batch
(augment.device.mix_batch: the mixed one-hot rows, unsmoothed). Both losses smooth the same way, as
torch's CrossEntropyLoss and timm's `mixup_target` do: t * (1 - s) + s / C. The BCE loss then, like
timm's `BinaryCrossEntropy(target_threshold=...)` (timm 0.5, timm/loss/binary_cross_entropy.py),
sets every target above the threshold to 1 and the rest to 0 — with RSB's 0.2, both classes of a
MixUp/CutMix pair count as present unless one covers more than 80 % of the image — and averages
`binary_cross_entropy_with_logits` over batch and classes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

LOSSES = ("ce", "bce")


class BinaryCrossEntropy(torch.nn.Module):
    """Mean BCE-with-logits against (smoothed, optionally thresholded) one-hot or soft targets."""

    def __init__(self, *, smoothing: float = 0.0, target_threshold: float | None = None):
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"label smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        self.target_threshold = target_threshold

    def targets(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The [B, C] float targets the loss compares the logits with."""
        num_classes = logits.shape[-1]
        if target.ndim == 1:
            target = F.one_hot(target, num_classes).to(torch.float32)
        target = target.to(torch.float32)
        if self.smoothing:
            target = target * (1.0 - self.smoothing) + self.smoothing / num_classes
        if self.target_threshold is not None:
            target = (target > self.target_threshold).to(torch.float32)
        return target

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(logits.float(), self.targets(logits, target))


def make_criterion(loss: str, *, label_smoothing: float = 0.0,
                   bce_target_threshold: float | None = None) -> torch.nn.Module:
    """The training criterion named `loss` (one of `LOSSES`); ValueError for another name."""
    if loss == "ce":
        return torch.nn.CrossEntropyLoss(label_smoothing=label_smoothing)
    if loss == "bce":
        return BinaryCrossEntropy(smoothing=label_smoothing, target_threshold=bce_target_threshold)
    raise ValueError(f"unknown loss {loss!r} (expected one of {', '.join(LOSSES)})")
