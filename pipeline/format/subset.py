"""The subset record of a manifest (``config.subset``) and the rules its writer and its readers share.

A subset run records what was asked, never the 1.2 M names it left out (see docs/format.md):
``classes`` (``{"count": N, "seed": S}`` for a seeded draw, ``{"count": K, "wnids": [...], "sha256": H}``
for a list), ``per_class``, ``fraction``, ``train_list`` (``{"names", "sha256", "class_counts"}``).
Class subsets apply to every labeled split; ``per_class``, ``fraction`` and ``train_list`` to train.
prepare-shards applies these rules and audit-shards ``--expect`` derives the expected counts from the
same functions, so the two cannot drift apart.
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

CLASS_SUBSET_SPLITS = ("train", "val")  # test is unlabeled: a class subset cannot apply to it
TRAIN_SUBSET_SPLITS = ("train",)  # per_class, fraction, train_list


def selects(record: dict | None, split: str) -> bool:
    """Whether the subset record picks images within the classes of `split` (per_class, fraction,
    train_list): then each class holds what was drawn for it, less the drawn images that were
    rejected or skipped, which the manifest names per class (``short_classes``)."""
    return bool(record) and split in TRAIN_SUBSET_SPLITS and any(
        record.get(k) is not None for k in ("per_class", "fraction", "train_list"))


def fraction_count(n: int, fraction: float) -> int:
    """How many of a class's `n` train images `--fraction` keeps: F x n rounded half up, at least 1
    (every class of the label space keeps an image), at most n. Exact decimal arithmetic on
    str(F), so 0.1 x 1300 is 130, not 130.00000000000003 rounded by luck."""
    if n <= 0:
        return 0
    return min(n, max(1, math.floor(Fraction(str(fraction)) * n + Fraction(1, 2))))


def names_sha256(names) -> str:
    """sha256 of a name list in canonical form: sorted, unique, one per line, a final newline; equal
    to the file's own sha256 when the file is exactly that."""
    return hashlib.sha256("".join(f"{n}\n" for n in sorted(set(names))).encode()).hexdigest()


def describe(record: dict | None) -> str:
    """The subset record in a few words (for messages): e.g. "100 listed classes, 50 per class"."""
    if not record:
        return "no subset"
    parts = []
    classes = record.get("classes")
    if isinstance(classes, dict):
        how = "listed" if "wnids" in classes else f"drawn with seed {classes.get('seed')}"
        parts.append(f"{classes.get('count')} classes {how}")
    if record.get("per_class") is not None:
        parts.append(f"{record['per_class']} train images per class")
    if record.get("fraction") is not None:
        parts.append(f"a {record['fraction']} fraction of each train class")
    if isinstance(record.get("train_list"), dict):
        parts.append(f"a train list of {record['train_list'].get('names')} names")
    return ", ".join(parts) or "no subset"
