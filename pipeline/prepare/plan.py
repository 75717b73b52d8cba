"""Which sample goes to which shard: a seeded global shuffle, then cut into shards.

The plan is a pure function of (members, classes, seed, shard limits, subset): members are first
put in a canonical order (by key), so every input form of the same images (tar of tars, class tars,
ImageFolder) yields the same plan, and the same seed yields the same shards. A subset (`select`,
see `subset`) picks from the members left after duplicate keys and unlabeled images are set aside,
so those are recorded as in a full run; what it leaves out is counted (`SplitPlan.excluded`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter

import numpy as np

from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.prepare.config import Config
from imagenet_shards.pipeline.prepare.sources import Member
from imagenet_shards.pipeline.prepare.subset import draw_classes, select_members

SPLIT_SEED_SALT = {"train": 0, "val": 1}
SHARD_PREFIX = {"train": "imagenet1k-train", "val": "imagenet1k-validation", "test": "imagenet1k-test"}
UNLABELED = -1  # the label of every test sample (the test split has no public labels)


@dataclass(frozen=True, slots=True)
class PlannedSample:
    """One sample of a shard: its source member, its label and extra sample-json fields.

    The member's fields are read through it, not copied: at ImageNet's size there are ~1.3 M
    samples in the parent (and in the forked workers' inherited memory), and a copy of seven fields
    each cost ~48 B a sample on top of the member itself (slots: no __dict__ either)."""

    member: Member
    label: int  # UNLABELED in the test split
    meta: tuple[tuple[str, object], ...] = ()  # extra sample-json fields: label_1k in a class subset

    @property
    def wnid(self) -> str | None:
        """The class WNID; None in the test split."""
        return None if self.label == UNLABELED else self.member.wnid

    @property
    def key(self) -> str:
        return self.member.key

    @property
    def filename(self) -> str:
        return self.member.filename

    @property
    def path(self) -> str:
        return self.member.path

    @property
    def offset(self) -> int:
        return self.member.offset

    @property
    def size(self) -> int:
        return self.member.size

    @property
    def source(self) -> str:
        return self.member.source


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
    excluded: int = 0  # usable members the subset left out (not read, not in any shard)


def shuffled_order(n: int, seed: int, split: str) -> np.ndarray:
    """A permutation of range(n), a pure function of (n, seed, split)."""
    rng = np.random.default_rng([seed, SPLIT_SEED_SALT.get(split, 2)])
    return rng.permutation(n)


def _canonical_order(members: list[Member]) -> list[Member]:
    """The members sorted by (key, source): two stable sorts (source, then key) give that order
    without a (key, source) tuple per member (~85 MB at ImageNet's size); the archives come nearly
    sorted, so each pass is close to linear."""
    out = sorted(members, key=attrgetter("source"))
    out.sort(key=attrgetter("key"))
    return out


def plan_split(split: str, members: list[Member], wnid_to_label: dict[str, int], *, seed: int,
               shard_samples: int | None = 1000, shard_bytes: int | None = None,
               select: Callable[[list[Member]], list[Member]] | None = None,
               label_1k: dict[str, int | None] | None = None) -> SplitPlan:
    """Shuffle one split's members with `seed` and cut them into shards.

    `shard_bytes` cuts by the sum of *source* sizes (exact for pass-through images, an estimate for
    re-encoded ones). The first member with a given key wins; later ones are rejected as duplicates.
    Members without a label are rejected (no_label), except in the test split, whose samples all
    get the label ``UNLABELED``. `select` (a subset) returns the members to keep, from the unique
    labeled ones in key order; `label_1k` (a class subset: WNID -> ImageNet-1k index or None) adds
    ``label_1k`` to each labeled sample's json.
    """
    if not shard_samples and not shard_bytes:
        raise ValueError("give shard_samples or shard_bytes")
    unique, duplicates, unlabeled, last = [], [], [], None
    for m in _canonical_order(members):
        if m.wnid is None and split != "test":
            unlabeled.append(m)
        elif m.key == last:  # sorted by key: a duplicate key follows the member that kept it
            duplicates.append(m)
        else:
            last = m.key
            unique.append(m)
    excluded = 0
    if select is not None:
        kept = select(unique)
        excluded, unique = len(unique) - len(kept), kept
    metas = {} if label_1k is None else {w: (("label_1k", i),) for w, i in label_1k.items()}  # one tuple a class
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
        if split == "test":
            current.samples.append(PlannedSample(m, UNLABELED))
        else:
            current.samples.append(PlannedSample(m, wnid_to_label[m.wnid], metas.get(m.wnid, ())))
        current_bytes += m.size
    if current.samples:
        shards.append(current)
    return SplitPlan(split, shards, duplicates, unlabeled, len(members), excluded)


def plan_splits(config: Config, members: dict[str, list[Member]], classes: list[str]):
    """(kept classes, label_1k, plans by split): the job's subset resolved against the sources'
    sorted `classes`, then each split planned. A class subset relabels: label = index among the kept
    WNIDs, sorted; `label_1k` (WNID -> ImageNet-1k index, None outside ImageNet-1k; None without a
    class subset) goes into each labeled sample's json. SubsetError for a subset the sources cannot give."""
    label_1k, kept, select = None, None, {}
    if config.classes is not None:
        classes = draw_classes(classes, config.classes, config.seed)
        index_1k = {c.wnid: c.index for c in imagenet_1k_classes()}
        label_1k = {w: index_1k.get(w) for w in classes}
        kept = set(classes)
    if config.subset:
        select = {s: partial(select_members, s, kept=kept, seed=config.seed, per_class=config.per_class,
                             fraction=config.fraction, train_list=config.train_list) for s in members}
    wnid_to_label = {w: i for i, w in enumerate(classes)}
    plans = {s: plan_split(s, ms, wnid_to_label, seed=config.seed, shard_samples=config.shard_samples,
                           shard_bytes=config.shard_bytes, select=select.get(s), label_1k=label_1k)
             for s, ms in members.items()}
    return classes, label_1k, plans


def part_of(shard_number: int, part: int, num_parts: int) -> bool:
    """Whether the shard with this global number (train shards first, then val) belongs to part `part` of `num_parts`."""
    return shard_number % num_parts == part
