"""Duplicates across the whole set: keys (must be unique) and image content (a warning; across splits: leakage).

At the full ImageNet's 14.2 M samples a set of every key (~130 B each in a dict) would not fit the
audit's memory budget, so keys are compared as 8-byte hashes sorted in numpy (`key_hashes`, made in
the workers) and only keys whose hashes meet are decoded and compared (`KeyColumn` holds a shard's
keys as one byte string): the same findings, ~40 B a sample (docs/benchmarks.md, "Full ImageNet scale").
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter
from collections.abc import Sequence

import numpy as np

from imagenet_shards.pipeline.audit.report import WARNING, Problem

EXAMPLES = 5


def key_hashes(keys) -> bytes:
    """8 bytes a key (blake2b, little-endian uint64 when read by numpy), in the keys' order."""
    return b"".join(hashlib.blake2b(k.encode("utf-8", "surrogateescape"), digest_size=8).digest() for k in keys)


def pack_keys(keys: list[str]) -> bytes:
    """A shard's keys as one byte string (keys hold no newline: format/keys.py)."""
    return "\n".join(keys).encode("utf-8", "surrogateescape")


class KeyColumn(Sequence):
    """The keys of many shards in order, each shard's kept packed (`pack_keys`) and decoded on access."""

    def __init__(self, packed: list[bytes], counts: list[int]):
        self._packed, self._ends = packed, np.cumsum(counts).tolist() if counts else []
        self._last = (-1, None)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def shard(self, s: int) -> list[str]:
        if self._last[0] != s:
            blob = self._packed[s]
            self._last = (s, blob.decode("utf-8", "surrogateescape").split("\n") if blob else [])
        return self._last[1]

    def __getitem__(self, i: int) -> str:
        if not 0 <= i < len(self):
            raise IndexError(i)
        s = bisect.bisect_right(self._ends, i)
        return self.shard(s)[i - (self._ends[s - 1] if s else 0)]


def _equal_groups(h: np.ndarray) -> list[np.ndarray]:
    """Groups of positions whose values in `h` (uint64) are equal (each group >= 2, positions
    ascending). One argsort (8 B a value); the sorted values are compared a chunk at a time."""
    n = len(h)
    if n < 2:
        return []
    order = np.argsort(h, kind="stable")
    same = np.zeros(n - 1, bool)
    for a in range(0, n - 1, 1 << 20):
        b = min(n - 1, a + (1 << 20))
        same[a:b] = h[order[a + 1:b + 1]] == h[order[a:b]]
    if not same.any():
        return []
    edges = np.diff(np.concatenate([[0], same.astype(np.int8), [0]]))
    return [np.sort(order[a:b + 1]) for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1))]


def _as_array(x, width: int) -> np.ndarray:
    """Bytes or an array of little-endian uint64 words, as an (n,) or (n, width) uint64 array (no copy)."""
    a = x if isinstance(x, np.ndarray) else np.frombuffer(x, dtype="<u8")
    return a.reshape(-1, width) if width > 1 else a.reshape(-1)


def find_duplicate_keys(shard_keys: list[tuple[str, Sequence[str]]], hashes=None) -> list[Problem]:
    """Keys must be unique across all shards and splits; each later occurrence is reported.

    `shard_keys`: (url, its keys) per shard; `hashes`: `key_hashes` of all those keys in order
    (bytes or uint64 array; made here when not given)."""
    if hashes is None:
        hashes = b"".join(key_hashes(k) for _, k in shard_keys)
    h = _as_array(hashes, 1)
    ends = np.cumsum([len(k) for _, k in shard_keys]).tolist()
    out = []
    for group in _equal_groups(h):
        first: dict[str, str] = {}
        for g in group.tolist():
            s = bisect.bisect_right(ends, g)
            url, keys = shard_keys[s]
            k = keys[g - (ends[s - 1] if s else 0)]
            if k not in first:
                first[k] = url
            else:
                where = "earlier in the same shard" if first[k] == url else f"also in {first[k]}"
                out.append((g, Problem("duplicate_key", url, k, where)))
    return [p for _, p in sorted(out, key=lambda x: x[0])]


def common_keys(a: Sequence[str], a_hashes, b: Sequence[str], b_hashes) -> list[str]:
    """The keys in both `a` and `b` (sorted), found through their hashes (bytes or uint64 arrays)."""
    ha, hb = _as_array(a_hashes, 1), _as_array(b_hashes, 1)
    if not len(ha) or not len(hb):
        return []
    inside = set(b[i] for i in np.flatnonzero(np.isin(hb, ha)).tolist())
    return sorted({a[i] for i in np.flatnonzero(np.isin(ha, hb)).tolist()} & inside)


def find_duplicate_content(per_split: dict) -> dict:
    """Groups of samples with byte-identical images: per split and across splits (leakage).
    `per_split`: split -> (keys of the samples with an image, their 16-byte digests in that order, as
    bytes or an (n, 2) uint64 array). Sorted on the digests' first 8 bytes (8 B a sample, no copy of
    the digests); samples whose first 8 bytes meet are grouped by all 16."""
    names = sorted(per_split)
    arrays = [_as_array(per_split[n][1], 2) for n in names]
    split_ends = np.cumsum([len(a) for a in arrays]).tolist()
    result = {f"within_{n}": {"images": 0, "groups": 0, "examples": []} for n in names}
    if len(names) > 1:
        result["across_splits"] = {"images": 0, "groups": 0, "examples": []}
    if not split_ends or not split_ends[-1]:
        return result

    def locate(j: int) -> tuple[int, int]:
        i = bisect.bisect_right(split_ends, j)
        return i, j - (split_ends[i - 1] if i else 0)

    first = np.concatenate([a[:, 0] for a in arrays])
    for candidates in _equal_groups(first):
        full: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for j in candidates.tolist():
            i, k = locate(j)
            full.setdefault((int(arrays[i][k, 0]), int(arrays[i][k, 1])), []).append((i, k))
        for members in (m for m in full.values() if len(m) > 1):
            group_splits = Counter(i for i, _ in members)
            for i, n in group_splits.items():
                if n > 1:
                    r = result[f"within_{names[i]}"]
                    r["images"] += n - 1
                    r["groups"] += 1
                    if len(r["examples"]) < EXAMPLES:
                        r["examples"].append(sorted(per_split[names[i]][0][k] for si, k in members if si == i))
            if len(group_splits) > 1:
                r = result["across_splits"]
                r["groups"] += 1
                r["images"] += len(members)
                if len(r["examples"]) < EXAMPLES:
                    r["examples"].append(sorted(f"{names[i]}:{per_split[names[i]][0][k]}" for i, k in members))
    return result


def duplicate_warnings(dups: dict) -> list[Problem]:
    """The warnings (not errors) that `find_duplicate_content`'s groups give: within a split, and across splits."""
    out = []
    for name, r in dups.items():
        if not r["images"]:
            continue
        eg = "; ".join(" = ".join(g) for g in r["examples"][:3])
        if name == "across_splits":
            out.append(Problem("duplicate_content_across_splits", None, None,
                               f"{r['groups']} images appear byte-identical in more than one split "
                               f"({r['images']} samples; train/val leakage), e.g. {eg}", WARNING))
        else:
            split = name.removeprefix("within_")
            out.append(Problem("duplicate_content", None, None,
                               f"{r['images']} {split} images are byte-identical copies of another {split} image "
                               f"({r['groups']} groups), e.g. {eg}", WARNING))
    return out
