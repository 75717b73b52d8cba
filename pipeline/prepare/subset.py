"""Subsets: which classes and which train images a run keeps, as pure functions of (members, classes, options, seed).

- `draw_classes`: the kept classes, sorted: N drawn from the sources' classes with the seed, or a
  given list checked against them (an unknown WNID is refused, naming the first).
- `select_members`: one split's members of the kept classes; for train, then N per class, a
  fraction of each class, or the names of a list (a name the source lacks is refused). N and the
  fraction are drawn among the members that can be images: a name that is never one (`._*`,
  `.DS_Store`, `Thumbs.db`: `format.keys.junk_name`) is not drawn, so it cannot take an image's place.
- `read_class_file`, `read_train_list`, `classes_option`: the files the command line takes.

Draws are numpy PCG64 permutations, as the plan's shuffle. Each class's train draw is seeded with
that class's WNID number, so a class keeps the same images whichever other classes are kept, and
the first k of its permutation are taken, so with one seed `--per-class 10` is inside
`--per-class 20` (and `--classes 10` inside `--classes 20`): subsets of one seed are nested.
"""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.keys import junk_name, key_for, train_key_wnid
from imagenet_shards.pipeline.format.subset import fraction_count
from imagenet_shards.pipeline.prepare.sources import WNID_RE, Member

CLASS_DRAW_SALT = 10  # seeds [seed, salt, ...]: streams apart from the plan's [seed, split]
TRAIN_DRAW_SALT = 11


class SubsetError(ValueError):
    """A subset option that cannot work with these sources; the message is one line naming the option."""


# ----------------------------------------------------------------------------- the options' files

def read_class_file(path) -> tuple[str, ...]:
    """The WNIDs of a class list: one per line (anything after it on the line, e.g. a name, is
    ignored), '#' starts a comment, blank lines skipped; sorted and unique. SubsetError naming the
    first line that does not start with a WNID, or a file without any."""
    wnids = []
    for n, line in enumerate(_lines(path, "--classes"), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if not WNID_RE.match(words[0]):
            raise SubsetError(f"--classes {path}: line {n} starts with {words[0]!r}, not a WNID (nXXXXXXXX)")
        wnids.append(words[0])
    if not wnids:
        raise SubsetError(f"--classes {path} lists no WNIDs")
    return tuple(sorted(set(wnids)))


def classes_option(value: str) -> int | tuple[str, ...]:
    """--classes N|FILE: a number of classes to draw, else the WNIDs of the file it names (a local
    path or file://; another URL is refused)."""
    if value.strip().isdigit():
        return int(value)
    value = _local("--classes", value)
    if not os.path.exists(value):
        raise SubsetError(f"--classes takes a number or a file of WNIDs; there is no file {value}")
    return read_class_file(value)


def train_name(name: str) -> str:
    """One train image name as `WNID/KEY`: `n01440764/n01440764_10026.JPEG` and `n01440764_10026.JPEG`
    (its class read from the key) both give `n01440764/n01440764_10026`. ValueError for a name that
    does not say its class, or whose folder and key name different classes."""
    parts = [p for p in name.strip().replace("\\", "/").split("/") if p]
    if not parts or any(c.isspace() for c in name.strip()):
        raise ValueError(f"{name!r} is not one image name")
    key = key_for(parts[-1])
    folder = parts[-2] if len(parts) > 1 and WNID_RE.match(parts[-2]) else None
    from_key = train_key_wnid(key)
    if folder and from_key and folder != from_key:
        raise ValueError(f"{name!r}: the folder names class {folder} but the file name {from_key}")
    wnid = folder or from_key
    if wnid is None:
        raise ValueError(f"{name!r} does not say its class (write it as nXXXXXXXX/{parts[-1]})")
    return f"{wnid}/{key}"


def train_names(names) -> tuple[str, ...]:
    """`train_name` of each name; sorted and unique (a name listed twice is one image)."""
    return tuple(sorted({train_name(n) for n in names}))


def read_train_list(path) -> tuple[str, ...]:
    """The image names of a train list (e.g. the 1 % / 10 % semi-supervised lists), one per line,
    as `train_names` gives them; '#' comments and blank lines skipped. SubsetError naming the
    first bad line."""
    names = []
    for n, line in enumerate(_lines(path, "--train-list"), 1):
        text = line.split("#", 1)[0].strip()
        if text:
            try:
                names.append(train_name(text))
            except ValueError as e:
                raise SubsetError(f"--train-list {path}: line {n}: {e}") from None
    if not names:
        raise SubsetError(f"--train-list {path} lists no images")
    return tuple(sorted(set(names)))


def _local(flag: str, value) -> str:
    """The local path a file option names (a plain path or file://); SubsetError for another URL."""
    path = storage.local_path(value)
    if path is None:
        raise SubsetError(f"{flag} takes a local path, not a URL ({storage.redact(value)}): copy the file here first")
    return path


def _lines(path, flag: str) -> list[str]:
    path = _local(flag, path)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SubsetError(f"cannot read {flag} {path}: {getattr(e, 'strerror', None) or e}") from None


# ----------------------------------------------------------------------------- selection

def draw_classes(classes: list[str], wanted: int | tuple[str, ...], seed: int) -> list[str]:
    """The kept classes, sorted. `classes`: the sources' WNIDs, sorted; `wanted`: N (drawn with
    `seed`) or WNIDs. SubsetError if N exceeds the classes or a WNID is not among them."""
    if isinstance(wanted, int):
        if wanted > len(classes):
            raise SubsetError(f"--classes {wanted}: the sources have only {len(classes)} classes")
        order = np.random.default_rng([seed, CLASS_DRAW_SALT]).permutation(len(classes))
        return sorted(classes[i] for i in order[:wanted])
    have = set(classes)
    unknown = [w for w in wanted if w not in have]
    if unknown:
        raise SubsetError(f"--classes: {unknown[0]} is not a class of the sources ({len(unknown)} of the "
                          f"{len(wanted)} listed WNIDs are not; the sources have {len(classes)} classes)")
    return sorted(wanted)


def select_members(split: str, members: list[Member], kept: set[str] | None, *, seed: int,
                   per_class: int | None = None, fraction: float | None = None,
                   train_list: tuple[str, ...] | None = None) -> list[Member]:
    """The members of one split that the subset keeps, in the order given.

    `kept`: the kept classes (None: all); it applies to labeled members (the test split has no
    class and is kept whole). `per_class`, `fraction`, `train_list` apply to train only; the first two
    draw among the members whose names can be images (`junk_name`: never drawn, so left out). Each
    member's key must be unique (the plan drops duplicate keys first). SubsetError for a train-list
    name that is not in the split, or that the source has under another class."""
    out = [m for m in members if kept is None or m.wnid is None or m.wnid in kept]
    if split != "train":
        return out
    if train_list is not None:
        wnid_of = {m.key: m.wnid for m in members}
        for name in train_list:
            wnid, key = name.split("/", 1)
            if key not in wnid_of:
                missing = sum(1 for x in train_list if x.split("/", 1)[1] not in wnid_of)
                raise SubsetError(f"--train-list: {key} (class {wnid}) is not in the train source ({missing} of "
                                  f"{len(train_list)} listed names are not); is the list for this copy?")
            if wnid_of[key] != wnid:
                raise SubsetError(f"--train-list names {key} in class {wnid}, but the train source has it in "
                                  f"{wnid_of[key]}")
        listed = {name.split("/", 1)[1] for name in train_list}
        return [m for m in out if m.key in listed]
    if per_class is None and fraction is None:
        return out
    by_class: dict[str, list[Member]] = defaultdict(list)
    for m in out:
        if not junk_name(m.filename):  # never an image: not drawn, left out (excluded_by_subset) like the undrawn
            by_class[m.wnid].append(m)
    keep = set()
    for wnid, group in by_class.items():
        group = sorted(group, key=lambda m: m.key)
        k = min(per_class, len(group)) if per_class is not None else fraction_count(len(group), fraction)
        order = np.random.default_rng([seed, TRAIN_DRAW_SALT, int(wnid[1:])]).permutation(len(group))
        keep.update(group[i].key for i in order[:k])
    return [m for m in out if m.key in keep]
