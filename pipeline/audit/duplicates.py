"""Duplicates across the whole set: keys (must be unique) and image content (a warning; across splits: leakage)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from imagenet_shards.pipeline.audit.report import WARNING, Problem

EXAMPLES = 5


def find_duplicate_keys(shard_keys: list[tuple[str, list[str]]]) -> list[Problem]:
    """Keys must be unique across all shards and splits; each later occurrence is reported."""
    seen: dict[str, str] = {}
    out = []
    for url, keys in shard_keys:
        for k in keys:
            if k not in seen:
                seen[k] = url
            else:
                where = "earlier in the same shard" if seen[k] == url else f"also in {seen[k]}"
                out.append(Problem("duplicate_key", url, k, where))
    return out


def find_duplicate_content(per_split: dict[str, tuple[list[str], bytes]]) -> dict:
    """Groups of samples with byte-identical images: per split and across splits (leakage)."""
    names, keys, blobs, split_ids = sorted(per_split), [], [], []
    for i, name in enumerate(names):
        k, blob = per_split[name]
        keys += k
        blobs.append(blob)
        split_ids.append(np.full(len(k), i, dtype=np.int8))
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
                    r["examples"].append(sorted(keys[j] for j in idx if sid[j] == i))
        if len(group_splits) > 1:
            r = result["across_splits"]
            r["groups"] += 1
            r["images"] += len(idx)
            if len(r["examples"]) < EXAMPLES:
                r["examples"].append(sorted(f"{names[sid[j]]}:{keys[j]}" for j in idx))
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
