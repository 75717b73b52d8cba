"""--expect: compare a manifest with a known dataset's published facts (imagenet-1k)."""

from __future__ import annotations

from collections import Counter

from imagenet_shards.pipeline.audit.report import AuditError, Problem
from imagenet_shards.pipeline.format.keys import train_key_wnid


def load_expect(name: str) -> tuple[dict, list[str]]:
    """(facts, sorted WNIDs) of a known dataset for --expect."""
    if name != "imagenet-1k":
        raise AuditError(f"unknown --expect {name!r}: the known dataset is imagenet-1k")
    from imagenet_shards.pipeline.format.classes import imagenet_1k_classes, imagenet_1k_facts

    return imagenet_1k_facts(), [c.wnid for c in imagenet_1k_classes()]


def check_expect(m: dict, facts: dict, reference_wnids: list[str], splits: list[str], name: str) -> list[Problem]:
    """Compare a manifest with a known dataset's facts (counts allow for the recorded rejects)."""
    out = []

    def bad(kind, detail):
        out.append(Problem(kind, None, None, detail))

    wnids = [c["wnid"] for c in m["classes"]]
    if len(wnids) != facts["num_classes"]:
        bad("expect_classes", f"{len(wnids)} classes, {name} has {facts['num_classes']}")
    elif wnids != list(reference_wnids):
        odd = sorted(set(wnids) ^ set(reference_wnids))
        bad("expect_classes", f"the class table differs from {name}'s: {', '.join(odd[:5])}")
    for split in splits:
        f = facts["splits"].get(split)
        s = m["splits"].get(split)
        if f is None:
            continue
        if s is None:
            bad("expect_split_missing", f"no {split} split; {name} has {f['num_samples']} {split} images")
            continue
        # Rejected images were in the source and count toward it; duplicate keys are surplus members.
        rejects = [r for r in m["rejected"] if r.get("split") == split and r.get("reason") != "duplicate_key"]
        accounted = s["num_samples"] + len(rejects)
        if accounted != f["num_samples"]:
            gap = f["num_samples"] - accounted
            what = f"{gap} images missing: the copy is incomplete" if gap > 0 else f"{-gap} images too many"
            bad("expect_count", f"{split} has {s['num_samples']} samples + {len(rejects)} recorded rejects = "
                                f"{accounted}, {name} has {f['num_samples']}: {what}")
        per_class_rejects = Counter(w for r in rejects if (w := train_key_wnid(str(r.get("key", "")))))
        unattributed = len(rejects) - sum(per_class_rejects.values())
        counts = {w: s["class_counts"].get(w, 0) + per_class_rejects.get(w, 0) for w in wnids}
        lo, hi = f.get("per_class", f.get("min_per_class")), f.get("per_class", f.get("max_per_class"))
        if lo is None:
            continue
        over = {w: c for w, c in counts.items() if c > hi}
        short = {w: c for w, c in counts.items() if c < lo}
        if over:
            bad("expect_class_count", f"{len(over)} {split} classes have more than {name}'s {hi} images: "
                                      + ", ".join(f"{w} {c}" for w, c in list(over.items())[:5]))
        if short and sum(lo - c for c in short.values()) > unattributed:
            bad("expect_class_count", f"{len(short)} {split} classes have fewer than {name}'s {lo} images: "
                                      + ", ".join(f"{w} {c}" for w, c in list(short.items())[:5]))
    return out
