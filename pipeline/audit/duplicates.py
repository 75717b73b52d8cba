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


def _equal_hash_groups(h: np.ndarray) -> list[np.ndarray]:
    """Groups of positions whose hashes are equal (each group >= 2, positions ascending)."""
    if len(h) < 2:
        return []
    order = np.argsort(h, kind="stable")
    same = h[order[1:]] == h[order[:-1]]
    if not same.any():
        return []
    edges = np.diff(np.concatenate([[0], same.astype(np.int8), [0]]))
    return [np.sort(order[a:b + 1]) for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1))]


def find_duplicate_keys(shard_keys: list[tuple[str, Sequence[str]]], hashes: list[bytes] | None = None) -> list[Problem]:
    """Keys must be unique across all shards and splits; each later occurrence is reported.

    `shard_keys`: (url, its keys) per shard; `hashes`: per shard, `key_hashes` of its keys (made
    here when not given)."""
    hashes = hashes if hashes is not None else [key_hashes(k) for _, k in shard_keys]
    h = np.frombuffer(b"".join(hashes), dtype="<u8")
    ends = np.cumsum([len(k) for _, k in shard_keys]).tolist()
    out = []
    for group in _equal_hash_groups(h):
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


def common_keys(a: Sequence[str], a_hashes: bytes, b: Sequence[str], b_hashes: bytes) -> list[str]:
    """The keys in both `a` and `b` (sorted), found through their hashes."""
    ha, hb = np.frombuffer(a_hashes, dtype="<u8"), np.frombuffer(b_hashes, dtype="<u8")
    if not len(ha) or not len(hb):
        return []
    inside = set(b[i] for i in np.flatnonzero(np.isin(hb, ha)).tolist())
    return sorted({a[i] for i in np.flatnonzero(np.isin(ha, hb)).tolist()} & inside)


def find_duplicate_content(per_split: dict[str, tuple[Sequence[str], bytes]]) -> dict:
    """Groups of samples with byte-identical images: per split and across splits (leakage).
    `per_split`: split -> (keys of the samples with an image, their 16-byte digests in that order)."""
    names, blobs, split_ids = sorted(per_split), [], []
    for i, name in enumerate(names):
        k, blob = per_split[name]
        blobs.append(blob)
        split_ids.append(np.full(len(k), i, dtype=np.int8))
    split_ends = np.cumsum([len(per_split[n][0]) for n in names]).tolist()

    def key(j: int) -> str:
        i = bisect.bisect_right(split_ends, j)
        return per_split[names[i]][0][j - (split_ends[i - 1] if i else 0)]
    keys = range(split_ends[-1] if split_ends else 0)
    result = {f"within_{n}": {"images": 0, "groups": 0, "examples": []} for n in names}
    if len(names) > 1:
        result["across_splits"] = {"images": 0, "groups": 0, "examples": []}
    if not keys:
        return result
    d = np.frombuffer(b"".join(blobs), dtype="<u8").reshape(-1, 2)
    sid = np.concatenate(split_ids)
    order = np.lexsort((d[:, 1], d[:, 0]))
    ds = d[order]
    same = np.all(ds[1:] == ds[:-1], axis=1)
    starts = np.flatnonzero(np.diff(np.concatenate([[0], same.astype(np.int8), [0]])) == 1)
    ends = np.flatnonzero(np.diff(np.concatenate([[0], same.astype(np.int8), [0]])) == -1) + 1
    for a, b in zip(starts, ends):
        idx = order[a:b]
        group_splits = Counter(sid[idx].tolist())
        for i, n in group_splits.items():
            if n > 1:
                r = result[f"within_{names[i]}"]
                r["images"] += n - 1
                r["groups"] += 1
                if len(r["examples"]) < EXAMPLES:
                    r["examples"].append(sorted(key(j) for j in idx if sid[j] == i))
        if len(group_splits) > 1:
            r = result["across_splits"]
            r["groups"] += 1
            r["images"] += len(idx)
            if len(r["examples"]) < EXAMPLES:
                r["examples"].append(sorted(f"{names[sid[j]]}:{key(j)}" for j in idx))
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
