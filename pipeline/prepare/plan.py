"""Which sample goes to which shard: a seeded global shuffle, then cut into shards.

The plan is a pure function of (members, classes, seed, shard limits, subset, label space, holdout):
members are first put in a canonical order (by key, then source), so every input form of the same
images (tar of tars, class tars, ImageFolder, the Hugging Face forms) yields the same plan, and the
same seed yields the same shards. Then, in this order: members without a label are set aside
(`no_label`), members of a class outside the label space are left out and counted
(`excluded_by_label_space`), a key met again is a duplicate (`duplicate_key`); from the rest a
held-out split is drawn (`holdout`, train only: it becomes val), then a subset (`select`, see
`subset`) picks what is kept and what it leaves out is counted (`SplitPlan.excluded`).

It works on a split's `MemberTable` (columns, not objects: 14 M members fit in bounded memory) and
keeps each shard as row numbers into it; a `ShardSpec` makes its `PlannedSample`s when asked (and
when it is pickled for a worker), so the parent never holds a sample object per image.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.format.label_spaces import DEFAULT_DATASET
from imagenet_shards.pipeline.prepare.config import Config
from imagenet_shards.pipeline.prepare.sources import Member
from imagenet_shards.pipeline.prepare.sources.table import MemberTable
from imagenet_shards.pipeline.prepare.subset import draw_classes, select_members

SPLIT_SEED_SALT = {"train": 0, "val": 1}
SPLIT_NAMES = {"train": "train", "val": "validation", "test": "test"}  # in shard file names
UNLABELED = -1  # the label of every test sample (the test split has no public labels)
_NOT_KEPT = -3  # a class the label table lacks (left to the subset or the label space to drop)
MAX_SORT_KEY_BYTES = 32  # keys longer than this are ordered by their full text within equal prefixes
_ROW = np.int32  # a row number: 4 B a member (a split of 2**31 members would need int64)


@dataclass(frozen=True, slots=True)
class PlannedSample:
    """One sample of a shard: its source member, its label and extra sample-json fields.

    The member's fields are read through it, not copied (slots: no __dict__ either)."""

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


@dataclass(frozen=True)
class _Rows:
    """What the shards of one split read their samples from: the table, a label per row, the extra
    json fields per class."""

    table: MemberTable
    labels: np.ndarray
    metas: dict

    def sample(self, row: int) -> PlannedSample:
        m = self.table[row]
        return PlannedSample(m, int(self.labels[row]), self.metas.get(m.wnid, ()))


class ShardSpec:
    """One shard to build: `split`, `index`, and its samples, given as a list or as rows of a table
    (made into `PlannedSample`s on access, and when pickled for a worker process). `preprocessed`:
    the samples' bytes are stored results of `process_image` (the one-pass path), not source bytes."""

    def __init__(self, split: str, index: int, samples: list[PlannedSample] | None = None, *,
                 dataset: str = DEFAULT_DATASET, rows: np.ndarray | None = None, source: _Rows | None = None,
                 preprocessed: bool = False):
        self.split, self.index, self.dataset, self.preprocessed = split, index, dataset, preprocessed
        self._samples = list(samples) if samples is not None or rows is None else None
        self._rows, self._source = rows, source

    @property
    def samples(self) -> list[PlannedSample]:
        if self._samples is not None:
            return self._samples
        return [self._source.sample(int(r)) for r in self._rows]

    @property
    def rows(self) -> np.ndarray | None:
        """The samples' rows in their table (None for a spec given its samples)."""
        return self._rows

    @property
    def table(self) -> MemberTable | None:
        return None if self._source is None else self._source.table

    def __len__(self) -> int:
        return len(self._samples) if self._samples is not None else len(self._rows)

    def paths(self) -> set[str]:
        """The files the samples' bytes are in (without making the samples)."""
        if self._samples is not None:
            return {s.path for s in self._samples}
        t = self._source.table
        groups = np.unique(t.group[self._rows])
        if not any(t.groups[g][2] for g in groups):  # no folder group: one file per group
            return {t.groups[g][0] for g in groups}
        return {t.path(int(r)) for r in self._rows}

    @property
    def url(self) -> str:
        """Path of the shard relative to OUT."""
        return f"{self.split}/{self.dataset}-{SPLIT_NAMES[self.split]}-{self.index:06d}.tar"

    def __getstate__(self):
        return {"split": self.split, "index": self.index, "dataset": self.dataset,
                "preprocessed": self.preprocessed, "_samples": self.samples, "_rows": None, "_source": None}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __repr__(self):
        return f"ShardSpec({self.split!r}, {self.index}, {len(self)} samples)"


@dataclass
class SplitPlan:
    split: str
    shards: list[ShardSpec]
    duplicates: list[Member]  # members whose key was already taken (rejected: duplicate_key)
    unlabeled: list[Member]   # members of a flat val source with no label (rejected: no_label)
    images_in: int
    excluded: int = 0  # usable members the subset left out (not read, not in any shard)
    excluded_by_label_space: int = 0  # members of a class outside the label space (not read)
    unknown: list[Member] = field(default_factory=list)  # ... listed instead, as skipped (`list_outside`)
    held_out: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # train rows moved to val
    table: MemberTable | None = field(default=None, repr=False)  # the split's members (the held-out rows' too)


def shuffled_order(n: int, seed: int, split: str) -> np.ndarray:
    """A permutation of range(n), a pure function of (n, seed, split)."""
    rng = np.random.default_rng([seed, SPLIT_SEED_SALT.get(split, 2)])
    return rng.permutation(n)


def canonical_order(table: MemberTable) -> tuple[np.ndarray, np.ndarray]:
    """(rows sorted by (key, source), stably; for each sorted position, whether its key equals the one
    before). Sorted on the keys' first bytes in a numpy array (n x up to 32 B, no string object per
    member); members whose first bytes tie (a duplicate key, or keys longer than that) are put in
    (key, source) order by their full text."""
    n = len(table)
    if n == 0:
        return np.zeros(0, _ROW), np.zeros(0, bool)
    width = min(table.max_key_bytes, MAX_SORT_KEY_BYTES)
    prefixes = table.key_prefixes(width)
    order = np.argsort(prefixes, kind="stable").astype(_ROW)
    tie = np.zeros(n, bool)
    for a in range(1, n, 1 << 20):  # in chunks: no second n x width copy
        b = min(n, a + (1 << 20))
        tie[a:b] = prefixes[order[a:b]] == prefixes[order[a - 1:b - 1]]
    del prefixes
    same = tie.copy()
    starts = np.flatnonzero(np.diff(np.concatenate([[False], tie, [False]]).astype(np.int8)) == 1) - 1
    ends = np.flatnonzero(np.diff(np.concatenate([[False], tie, [False]]).astype(np.int8)) == -1)
    for a, b in zip(starts, ends):  # a run of tied prefixes: [a, b)
        rows = sorted(order[a:b].tolist(), key=lambda r: (table.key(r), table.source(r)))
        order[a:b] = rows
        keys = [table.key(r) for r in rows]
        same[a + 1:b] = [k == p for k, p in zip(keys[1:], keys[:-1])]
    return order, same


def _canonical_order(members: list[Member]) -> list[Member]:
    """The members sorted by (key, source), stably (see `canonical_order`)."""
    order, _ = canonical_order(MemberTable.from_members(members))
    return [members[i] for i in order]


def _select_rows(select: Callable[[list[Member]], list[Member]], table: MemberTable, rows: np.ndarray,
                 whole: bool) -> np.ndarray:
    """The rows `select` (a subset, taking and returning Members) keeps, in the given order. Called
    class by class (the subset's draws are per class), so only one class is ever a list of Members;
    `whole`: call it once on every member (a train list checks names across classes)."""
    if whole:
        kept = {m.key for m in select([table[r] for r in rows])}
        return rows[np.fromiter((table.key(r) in kept for r in rows), bool, len(rows))]
    keep = np.zeros(len(table), bool)
    for _, group in table.rows_by_class(rows):
        members = [table[r] for r in group]
        kept = {m.key for m in select(members)}
        keep[group] = [m.key in kept for m in members]
    return rows[keep[rows]]


def plan_split(split: str, members, wnid_to_label: dict[str, int], *, seed: int,
               shard_samples: int | None = 1000, shard_bytes: int | None = None,
               select: Callable[[list[Member]], list[Member]] | None = None, select_whole: bool = False,
               label_1k: dict[str, int | None] | None = None, space: frozenset[str] | None = None,
               holdout: Callable | None = None, dataset: str = DEFAULT_DATASET,
               list_outside: bool = False) -> SplitPlan:
    """Shuffle one split's members (a MemberTable or a list of Members) with `seed`; cut into shards.

    `shard_bytes` cuts by the sum of *source* sizes (exact for pass-through images, an estimate for
    re-encoded ones). The first member with a given key wins; later ones are rejected as duplicates.
    Members without a label are rejected (no_label), except in the test split, whose samples all
    get the label ``UNLABELED``. `space` (a label space's WNIDs): members of other classes are left
    out and counted, or with `list_outside` returned (`SplitPlan.unknown`, in key order) instead of
    counted: the WNIDs outside a full release's default space (--skip-unknown-wnids). `holdout(table, rows) -> (kept rows, held rows)` draws the held-out split
    (`SplitPlan.held_out`). `select` (a subset) returns the members to keep, from the unique
    labeled ones in key order; `label_1k` (a class subset: WNID -> ImageNet-1k index or None) adds
    ``label_1k`` to each labeled sample's json."""
    if not shard_samples and not shard_bytes:
        raise ValueError("give shard_samples or shard_bytes")
    table = MemberTable.from_members(members)
    order, same_key = canonical_order(table)
    test = split == "test"
    code_label = np.array([UNLABELED if test or w is None else wnid_to_label.get(w, _NOT_KEPT)
                           for w in table.wnids] or [0], dtype=np.int32)
    code_outside = np.array([not test and w is not None and space is not None and w not in space
                             for w in table.wnids] or [False])
    code_unlabeled = np.array([not test and w is None for w in table.wnids] or [False])
    codes = table.cls[order] if len(order) else np.zeros(0, np.int32)
    unlabeled_pos = np.flatnonzero(code_unlabeled[codes])
    outside_pos = np.flatnonzero(code_outside[codes])
    cand = np.flatnonzero(~code_unlabeled[codes] & ~code_outside[codes]).astype(_ROW)
    del codes
    run = np.cumsum(~same_key, dtype=_ROW)  # equal keys share a run number
    dup = np.zeros(len(cand), bool)
    dup[1:] = run[cand[1:]] == run[cand[:-1]]
    del run
    unique = order[cand[~dup]]
    duplicates = [table[r] for r in order[cand[dup]]]
    unlabeled = [table[r] for r in order[unlabeled_pos]]
    unknown = [table[r] for r in order[outside_pos]] if list_outside else []
    outside = 0 if list_outside else len(outside_pos)
    del order, same_key, cand, dup
    held = np.zeros(0, np.int64)
    if holdout is not None:
        unique, held = holdout(table, unique)
    excluded = 0
    if select is not None:
        kept = _select_rows(select, table, unique, select_whole)
        excluded, unique = len(unique) - len(kept), kept
    labels = code_label[table.cls] if len(table) else np.zeros(0, np.int32)
    if len(unique) and labels[unique].min() == _NOT_KEPT:
        raise ValueError(f"{split}: a kept member's class has no label (the label table and the subset disagree)")
    metas = {} if label_1k is None else {w: (("label_1k", i),) for w, i in label_1k.items()}  # one tuple a class
    rows = unique[shuffled_order(len(unique), seed, split).astype(_ROW)]
    del unique
    source = _Rows(table, labels, metas)
    shards = [ShardSpec(split, i, dataset=dataset, rows=r, source=source)
              for i, r in enumerate(_cut(rows, table.size, shard_samples, shard_bytes))]
    return SplitPlan(split, shards, duplicates, unlabeled, len(table), excluded, outside, unknown, held, table)


def _cut(rows: np.ndarray, sizes: np.ndarray, shard_samples: int | None, shard_bytes: int | None) -> list[np.ndarray]:
    """The shuffled rows cut into shards: `shard_samples` a shard, or greedily up to `shard_bytes` of
    source size (a member that would overflow starts the next shard; a shard holds at least one)."""
    if shard_samples:
        return [rows[a:a + shard_samples] for a in range(0, len(rows), shard_samples)]
    out, start, total = [], 0, 0
    for i, size in enumerate(sizes[rows].tolist()):
        if i > start and total + size > shard_bytes:
            out.append(rows[start:i])
            start, total = i, 0
        total += size
    if len(rows) > start:
        out.append(rows[start:])
    return out


def plan_splits(config: Config, members: dict, classes: list[str], *, holdout: Callable | None = None):
    """(kept classes, label_1k, plans by split): the job's subset resolved against the sources'
    `classes` (the label space's WNIDs in label order, or the sources' sorted), then each split planned.
    A class subset relabels: label = index among the kept WNIDs, sorted; `label_1k` (WNID -> ImageNet-1k
    index, None outside ImageNet-1k; None without a class subset) goes into each labeled sample's
    json. With a label space (`config.label_space`), members of other classes are left out and
    counted. `holdout` (train only) draws the held-out rows, planned as the val split. SubsetError
    for a subset the sources cannot give."""
    label_1k, kept, select = None, None, {}
    if config.classes is not None:
        classes = draw_classes(classes, config.classes, config.seed)
        index_1k = {c.wnid: c.index for c in imagenet_1k_classes()}
        label_1k = {w: index_1k.get(w) for w in classes}
        kept = set(classes)
    if config.subset:
        select = {s: partial(select_members, s, kept=kept, seed=config.seed, per_class=config.per_class,
                             fraction=config.fraction, train_list=config.train_list) for s in members}
    space = config.space_wnids  # `classes` are its WNIDs here: `run` resolved it
    dataset = config.label_space.dataset if space is not None else DEFAULT_DATASET
    wnid_to_label = {w: i for i, w in enumerate(classes)}
    common = dict(seed=config.seed, shard_samples=config.shard_samples, shard_bytes=config.shard_bytes,
                  label_1k=label_1k, space=space, dataset=dataset, select_whole=config.train_list is not None,
                  list_outside=config.skip_unknown_wnids)
    plans = {s: plan_split(s, ms, wnid_to_label, select=select.get(s), holdout=holdout if s == "train" else None,
                           **common)
             for s, ms in members.items()}
    if holdout is not None and "train" in plans:
        plans["val"] = plan_rows("val", plans["train"].table, plans["train"].held_out, wnid_to_label, **common)
    return classes, label_1k, plans


def plan_rows(split: str, table: MemberTable, rows: np.ndarray, wnid_to_label: dict[str, int], *, seed: int,
              shard_samples: int | None, shard_bytes: int | None, label_1k=None, dataset: str = DEFAULT_DATASET,
              **_) -> SplitPlan:
    """Plan a split of rows already chosen from `table` (unique keys, labelled, in key order): the
    held-out split."""
    code_label = np.array([wnid_to_label.get(w, _NOT_KEPT) if w else UNLABELED for w in table.wnids] or [0],
                          dtype=np.int32)
    labels = code_label[table.cls] if len(table) else np.zeros(0, np.int32)
    metas = {} if label_1k is None else {w: (("label_1k", i),) for w, i in label_1k.items()}
    rows = rows[shuffled_order(len(rows), seed, split).astype(_ROW)]
    source = _Rows(table, labels, metas)
    shards = [ShardSpec(split, i, dataset=dataset, rows=r, source=source)
              for i, r in enumerate(_cut(rows, table.size, shard_samples, shard_bytes))]
    return SplitPlan(split, shards, [], [], len(rows), table=table)


def part_of(shard_number: int, part: int, num_parts: int) -> bool:
    """Whether the shard with this global number (train shards first, then val) belongs to part `part` of `num_parts`."""
    return shard_number % num_parts == part
