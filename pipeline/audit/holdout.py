"""A held-out val split (`prepare-shards --holdout-per-class K`): disjoint from train, and K per class.

The manifest records what was asked (`config.holdout.per_class`) and that val came from train
(`splits.val.held_out_from`). From what the shards hold: no key is in both splits
(`holdout_overlap`; duplicate keys are also reported set-wide, this names the leak), and each
class's val images, with the val images rejected while building, number 0 or K: K where the class
had more than K train images (so at least one stayed in train), 0 where it had K or fewer
(`holdout_count`). A pure function of (manifest, keys read per split) -> [Problem].
"""

from __future__ import annotations

from collections import Counter

from imagenet_shards.pipeline.audit.duplicates import common_keys, key_hashes
from imagenet_shards.pipeline.audit.report import Problem
from imagenet_shards.pipeline.format.keys import train_key_wnid

EXAMPLES = 5


def check_holdout(m: dict, keys_by_split: dict) -> list[Problem]:
    """Problems of a held-out split (none when the manifest records no holdout). `keys_by_split`:
    split -> its keys, or (its keys, their `key_hashes`)."""
    k = ((m.get("config") or {}).get("holdout") or {}).get("per_class")
    splits = m.get("splits") or {}
    if k is None or "val" not in splits or "train" not in splits:
        return []
    out = []
    if "train" in keys_by_split and "val" in keys_by_split:
        (a, ha), (b, hb) = (x if isinstance(x, tuple) else (x, key_hashes(x))
                            for x in (keys_by_split["train"], keys_by_split["val"]))
        both = common_keys(a, ha, b, hb)
        if both:
            out.append(Problem("holdout_overlap", None, None, f"{len(both)} held-out val images are also in train: "
                                                              + ", ".join(both[:EXAMPLES])))
    rejected = {s: Counter(train_key_wnid(str(r.get("key", ""))) for r in m.get("rejected") or []
                           if r.get("split") == s) for s in ("train", "val")}
    train, val = splits["train"].get("class_counts") or {}, splits["val"].get("class_counts") or {}
    selection = any(x in ((m.get("config") or {}).get("subset") or {}) for x in ("per_class", "fraction", "train_list"))
    odd = []
    for wnid in sorted(set(train) | set(val) | set(rejected["val"]) - {None}):
        held = val.get(wnid, 0) + rejected["val"].get(wnid, 0)
        stayed = train.get(wnid, 0) + rejected["train"].get(wnid, 0)
        if held not in (0, k):
            odd.append(f"{wnid} has {held} held out")
        elif held == k and stayed == 0:
            odd.append(f"{wnid} has {k} held out and none left in train")
        elif held == 0 and stayed > k and not selection:
            odd.append(f"{wnid} has {stayed} train images and none held out")
    if odd:
        out.append(Problem("holdout_count", None, None, f"{len(odd)} classes do not hold out {k} images (or none, "
                                                        f"with {k} or fewer): " + "; ".join(odd[:EXAMPLES])))
    return out
