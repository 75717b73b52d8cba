"""Which sample goes to which shard: a seeded global shuffle, then cut into shards.

The plan is a pure function of (members, classes, seed, shard limits): members are first put in a
canonical order (by key), so every input form of the same images (tar of tars, class tars,
ImageFolder) yields the same plan, and the same seed yields the same shards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from imagenet_shards.pipeline.prepare.sources import Member

SPLIT_SEED_SALT = {"train": 0, "val": 1}
SHARD_PREFIX = {"train": "imagenet1k-train", "val": "imagenet1k-validation", "test": "imagenet1k-test"}
UNLABELED = -1  # the label of every test sample (the test split has no public labels)


@dataclass(frozen=True)
class PlannedSample:
    key: str
    label: int
    wnid: str | None  # None in the test split
    filename: str
    path: str
    offset: int
    size: int
    source: str


@dataclass
class ShardSpec:
    split: str
    index: int
    samples: list[PlannedSample] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Path of the shard relative to OUT."""
        return f"{self.split}/{SHARD_PREFIX[self.split]}-{self.index:06d}.tar"


@dataclass
class SplitPlan:
    split: str
    shards: list[ShardSpec]
    duplicates: list[Member]  # members whose key was already taken (rejected: duplicate_key)
    unlabeled: list[Member]   # members of a flat val source with no label (rejected: no_label)
    images_in: int


def shuffled_order(n: int, seed: int, split: str) -> np.ndarray:
    """A permutation of range(n), a pure function of (n, seed, split)."""
    rng = np.random.default_rng([seed, SPLIT_SEED_SALT.get(split, 2)])
    return rng.permutation(n)


def plan_split(split: str, members: list[Member], wnid_to_label: dict[str, int], *, seed: int,
               shard_samples: int | None = 1000, shard_bytes: int | None = None) -> SplitPlan:
    """Shuffle one split's members with `seed` and cut them into shards.

    `shard_bytes` cuts by the sum of *source* sizes (exact for pass-through images, an estimate for
    re-encoded ones). The first member with a given key wins; later ones are rejected as duplicates.
    Members without a label are rejected (no_label), except in the test split, whose samples all
    get the label ``UNLABELED``.
    """
    if not shard_samples and not shard_bytes:
        raise ValueError("give shard_samples or shard_bytes")
    seen, unique, duplicates, unlabeled = set(), [], [], []
    for m in sorted(members, key=lambda m: (m.key, m.source)):
        if m.wnid is None and split != "test":
            unlabeled.append(m)
        elif m.key in seen:
            duplicates.append(m)
        else:
            seen.add(m.key)
            unique.append(m)
    order = shuffled_order(len(unique), seed, split)
    shards: list[ShardSpec] = []
    current = ShardSpec(split, 0)
    current_bytes = 0
    for i in order:
        m = unique[i]
        full = (shard_samples and len(current.samples) >= shard_samples) or (
            shard_bytes and current.samples and current_bytes + m.size > shard_bytes)
        if full:
            shards.append(current)
            current, current_bytes = ShardSpec(split, len(shards)), 0
        label = UNLABELED if split == "test" else wnid_to_label[m.wnid]
        wnid = None if split == "test" else m.wnid
        current.samples.append(PlannedSample(m.key, label, wnid, m.filename, m.path, m.offset, m.size, m.source))
        current_bytes += m.size
    if current.samples:
        shards.append(current)
    return SplitPlan(split, shards, duplicates, unlabeled, len(members))


def part_of(shard_number: int, part: int, num_parts: int) -> bool:
    """Whether the shard with this global number (train shards first, then val) belongs to part `part` of `num_parts`."""
    return shard_number % num_parts == part
