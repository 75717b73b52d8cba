"""ReaL top-1 (Beyer et al. 2020, "Are we done with ImageNet?", arXiv 2006.07159): the reassessed
val labels, a set of acceptable classes per image.

The table is manifests/imagenet-1k/real_labels.json (provenance in manifests/imagenet-1k/README.md):
entry i lists the ImageNet-1k labels (sorted-WNID indices) of `ILSVRC2012_val_{i+1:08d}`; 3,163 of
the 50,000 lists are empty, and those images do not count (as in the paper and timm's
`RealLabelsImagenet`). A prediction is right when its top-1 class is in the image's set.

A sample is matched by its shard key, which prepare-shards keeps as the original file stem; a val
split whose keys are not those stems, or a label space other than ImageNet-1k, is refused.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import torch

from imagenet_shards.pipeline.format.classes import IMAGENET_1K_DIR, imagenet_1k_classes

REAL_LABELS_FILE = "real_labels.json"
VAL_KEY = re.compile(r"^ILSVRC2012_val_(\d{8})$")
NUM_VAL = 50000


class RealLabelsError(ValueError):
    """The ReaL labels cannot be used with this shard set (the message says why, on one line)."""


@lru_cache(maxsize=4)
def load_real_labels(path: str | None = None) -> tuple[tuple[int, ...], ...]:
    """The ReaL label sets in val-image order (index i: ILSVRC2012_val_{i+1:08d})."""
    file = Path(path) if path else Path(IMAGENET_1K_DIR) / REAL_LABELS_FILE
    data = json.loads(file.read_text())
    if not isinstance(data, list) or not all(isinstance(x, list) for x in data):
        raise RealLabelsError(f"{file}: expected a JSON list of label lists")
    return tuple(tuple(int(v) for v in x) for x in data)


def val_index(key: str) -> int:
    """0-based val image index of an original val key; RealLabelsError for any other key."""
    m = VAL_KEY.match(key)
    if m is None or not 1 <= int(m.group(1)) <= NUM_VAL:
        raise RealLabelsError(f"--eval-real needs the original val keys (ILSVRC2012_val_00000001 ...), but this "
                              f"shard set has the val key {key!r}: prepare the val split from the original "
                              f"archive or Kaggle's folder, or drop --eval-real")
    return int(m.group(1)) - 1


class RealLabels:
    """Per-batch ReaL targets for keys: `targets(keys)` -> int64 [B, K] (K = the widest set, -1 padding;
    a row of -1 is an image ReaL does not count)."""

    def __init__(self, labels: tuple[tuple[int, ...], ...] | None = None):
        self.labels = load_real_labels() if labels is None else labels
        self.width = max(1, max((len(x) for x in self.labels), default=1))

    def targets(self, keys) -> torch.Tensor:
        out = torch.full((len(keys), self.width), -1, dtype=torch.int64)
        for row, key in enumerate(keys):
            i = val_index(key)
            if i >= len(self.labels):
                raise RealLabelsError(f"the ReaL table has {len(self.labels)} entries, the val key {key!r} is past it")
            got = self.labels[i]
            if got:
                out[row, :len(got)] = torch.tensor(got, dtype=torch.int64)
        return out


def real_hits(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(images whose top-1 is in their ReaL set, images ReaL counts), both device scalars."""
    pred = logits.argmax(1, keepdim=True)
    counted = targets[:, 0] >= 0
    hit = (targets == pred).any(1) & counted
    return hit.sum(), counted.sum()


def check_label_space(manifest: dict | None) -> None:
    """RealLabelsError unless the manifest's classes are ImageNet-1k's 1000 (ReaL's indices)."""
    if manifest is None:
        return
    wnids = [c.get("wnid") if isinstance(c, dict) else c for c in manifest.get("classes") or []]
    if wnids != [c.wnid for c in imagenet_1k_classes()]:
        raise RealLabelsError(f"--eval-real needs the ImageNet-1k label space (its 1000 WNIDs in sorted order); "
                              f"this shard set has {len(wnids)} classes of another label space")


def first_val_key(data: str, manifest: dict) -> str | None:
    """The key of the val split's first sample (one tar header read), or None for an empty split."""
    from imagenet_shards.pipeline.format.manifest import split_shards
    from imagenet_shards.train.loader.plan import Piece
    from imagenet_shards.train.loader.reading import read_pieces
    shards = split_shards(manifest, data, "val")
    for i, shard in enumerate(shards):
        if shard.num_samples:
            return next((r.key for r in read_pieces(shards, [Piece(i, 0, 1)])), None)
    return None


def check_shard_set(data: str | None, manifest: dict | None) -> None:
    """RealLabelsError unless the shard set's label space and val keys fit the ReaL table."""
    check_label_space(manifest)
    if data and manifest is not None:
        key = first_val_key(data, manifest)
        if key is not None:
            val_index(key)
