"""--expect: compare a manifest with a known dataset's published facts (imagenet-1k).

A subset set (`config.subset`, pipeline/format/subset.py) is compared with the facts scaled to
the subset it records: its classes must be ImageNet-1k classes with their 1k indexes; val holds
50 per kept class; train per class stays within 732..1300, or what `per_class`, `fraction` or
`train_list` leave of that. The facts give no per-class train counts, so a class subset's train
total is checked as a range (K x 732 .. K x 1300) and each class within its bounds.
"""

from __future__ import annotations

from collections import Counter

from imagenet_shards.pipeline.audit.report import AuditError, Problem
from imagenet_shards.pipeline.format.keys import junk_name, train_key_wnid
from imagenet_shards.pipeline.format.subset import CLASS_SUBSET_SPLITS, describe, fraction_count, selects

# Rejects and skips found while indexing or planning (not while reading the image): with a train
# selection (per_class, fraction, train_list) they were never candidates, so they do not count toward it.
PLAN_REASONS = ("duplicate_key", "no_label", "unsafe_key", "not_a_regular_file")


def recorded_expect(m: dict) -> str | None:
    """The default --expect: the label space the manifest records (`label_space.name`), when it is a
    known one (not `present` or `file`, which have no table of their own to compare with), else None."""
    from imagenet_shards.pipeline.format.label_spaces import known_names

    name = (m.get("label_space") or {}).get("name") if isinstance(m.get("label_space"), dict) else None
    return name if name in known_names() else None


def load_expect(name: str, *, counts: bool = True) -> tuple[dict, list[str]]:
    """(facts, WNIDs in label order) of a known dataset for --expect: imagenet-1k's published counts,
    or a label space of manifests/label-spaces, whose facts are its class table only (the full
    release's per-class counts are not published, so no count is checked). `counts=False`: the
    class table only, imagenet-1k's too (the default --expect: a subset or a small copy is no error)."""
    from imagenet_shards.pipeline.format.label_spaces import known_names, label_space

    if name == "imagenet-1k" and counts:
        from imagenet_shards.pipeline.format.classes import imagenet_1k_classes, imagenet_1k_facts

        return imagenet_1k_facts(), [c.wnid for c in imagenet_1k_classes()]
    if name not in known_names():
        raise AuditError(f"unknown --expect {name!r}: known are {', '.join(known_names())}")
    space = label_space(name)
    return {"name": name, "num_classes": space.num_classes, "splits": {}}, list(space.wnids)


def touches(subset: dict | None, split: str) -> bool:
    """Whether the subset changes what `split` holds (a class subset, or a selection within classes)."""
    return selects(subset, split) or (bool(subset) and isinstance(subset.get("classes"), dict)
                                      and split in CLASS_SUBSET_SPLITS)


def expected_counts(f: dict, split: str, subset: dict | None, wnids: list[str], num_classes: int):
    """(total (lo, hi), per-class {wnid: (lo, hi)} or None) that a split of `wnids` should hold,
    from the dataset's split facts `f` and the manifest's subset record (None: the whole dataset)."""
    lo, hi = f.get("per_class", f.get("min_per_class")), f.get("per_class", f.get("max_per_class"))
    selection = selects(subset, split)
    if not touches(subset, split) or (not selection and len(wnids) == num_classes):
        return (f["num_samples"],) * 2, None if lo is None else {w: (lo, hi) for w in wnids}
    if selection and isinstance(subset.get("train_list"), dict):
        listed = subset["train_list"].get("class_counts") or {}
        per_class = {w: (listed.get(w, 0),) * 2 for w in wnids}
    elif lo is None:
        return (0, f["num_samples"]), None
    elif selection and subset.get("per_class") is not None:
        per_class = {w: (min(subset["per_class"], lo), min(subset["per_class"], hi)) for w in wnids}
    elif selection:
        per_class = {w: (fraction_count(lo, subset["fraction"]), fraction_count(hi, subset["fraction"]))
                     for w in wnids}
    else:
        per_class = {w: (lo, hi) for w in wnids}
    return (sum(a for a, _ in per_class.values()), sum(b for _, b in per_class.values())), per_class


def _check_classes(m: dict, subset: dict | None, reference_wnids: list[str], facts: dict, name: str) -> list[Problem]:
    wnids = [c["wnid"] for c in m["classes"]]
    chosen = (subset or {}).get("classes")
    if not isinstance(chosen, dict):  # the whole label space
        if len(wnids) != facts["num_classes"]:
            return [Problem("expect_classes", None, None, f"{len(wnids)} classes, {name} has {facts['num_classes']}")]
        if wnids != list(reference_wnids):
            odd = sorted(set(wnids) ^ set(reference_wnids))
            return [Problem("expect_classes", None, None, f"the class table differs from {name}'s: {', '.join(odd[:5])}")]
        return []
    out = []
    if len(wnids) != chosen.get("count"):
        out.append(f"{len(wnids)} classes, the recorded subset has {chosen.get('count')}")
    if "wnids" in chosen and wnids != sorted(chosen["wnids"]):
        odd = sorted(set(wnids) ^ set(chosen["wnids"]))
        out.append(f"the class table differs from the recorded class list: {', '.join(odd[:5])}")
    index = {w: i for i, w in enumerate(reference_wnids)}
    foreign = [w for w in wnids if w not in index]
    if foreign:
        out.append(f"{len(foreign)} classes are not {name} classes: {', '.join(foreign[:5])}")
    moved = [c for c in m["classes"] if c["wnid"] in index and c.get("imagenet_1k_index") != index[c["wnid"]]]
    if moved:
        out.append(f"{len(moved)} classes carry another {name} index than their WNID has: " + ", ".join(
            f"{c['wnid']} {c.get('imagenet_1k_index')} (is {index[c['wnid']]})" for c in moved[:5]))
    return [Problem("expect_classes", None, None, detail) for detail in out]


def counted_inputs(m: dict, split: str, subset: dict | None) -> list[dict]:
    """The rejected and skipped records of `split` that count toward the dataset's images: not
    duplicate keys, not names that are never images, and with a train selection not the ones set
    aside before the draw (they were never candidates)."""
    records = [r for k in ("rejected", "skipped") if isinstance(m.get(k), list) for r in m[k]]
    return [r for r in records if isinstance(r, dict) and r.get("split") == split
            and r.get("reason") != "duplicate_key" and not junk_name(str(r.get("source") or r.get("key") or ""))
            and not (selects(subset, split) and r.get("reason") in PLAN_REASONS)]


def _failures(entry) -> int:
    """How many drawn images of one `short_classes` entry are not samples."""
    reasons = entry.get("reasons") if isinstance(entry, dict) else None
    return sum(n for n in reasons.values() if isinstance(n, int)) if isinstance(reasons, dict) else 0


def check_expect(m: dict, facts: dict, reference_wnids: list[str], splits: list[str], name: str) -> list[Problem]:
    """Compare a manifest with a known dataset's facts, scaled to the subset it records (counts
    allow for the recorded rejects)."""
    subset = (m.get("config") or {}).get("subset") or None
    out = _check_classes(m, subset, reference_wnids, facts, name)

    def bad(kind, detail):
        out.append(Problem(kind, None, None, detail))

    wnids = [c["wnid"] for c in m["classes"]]
    for split in splits:
        of = f"{name} scaled to the subset ({describe(subset)})" if touches(subset, split) else name
        f = facts["splits"].get(split)
        s = m["splits"].get(split)
        if f is None:
            continue
        if s is None:
            bad("expect_split_missing", f"no {split} split; {name} has {f['num_samples']} {split} images")
            continue
        (want_lo, want_hi), bounds = expected_counts(f, split, subset, wnids, facts["num_classes"])
        # Rejected and skipped images were in the source and count toward it, as prepare drew them;
        # duplicate keys are surplus members, and names that are never images (`._*`, format.keys.
        # junk_name) are not images of the dataset. Where a subset changed the split, a reject counts
        # if it belongs to a kept class, and may count if its class is unknown (val keys do not name
        # one); a train selection's manifest names its short classes exactly (`short_classes`).
        partial = touches(subset, split)
        rejects = counted_inputs(m, split, subset)
        rejects_by_class = Counter(train_key_wnid(str(r.get("key", ""))) for r in rejects)
        if isinstance(s.get("short_classes"), dict):  # exact: prepare counted each class's failed draws
            rejects_by_class = Counter({w: _failures(v) for w, v in s["short_classes"].items()})
            rejects_by_class[None] = max(0, len(rejects) - sum(rejects_by_class.values()))
        unattributed = rejects_by_class.pop(None, 0)
        kept = set(wnids)
        certain = sum(c for w, c in rejects_by_class.items() if w in kept) if partial else len(rejects)
        maybe = unattributed if partial else 0
        lo, hi = s["num_samples"] + certain, s["num_samples"] + certain + maybe
        if hi < want_lo or lo > want_hi:
            gap = want_lo - hi if hi < want_lo else want_hi - lo
            what = f"{gap} images missing: the copy is incomplete" if gap > 0 else f"{-gap} images too many"
            recorded = f"{certain} recorded rejects and skips = {lo}" if not maybe else \
                f"{certain}..{certain + maybe} recorded rejects and skips = {lo}..{hi}"
            wanted = f"{want_lo}" if want_lo == want_hi else f"{want_lo}..{want_hi}"
            bad("expect_count", f"{split} has {s['num_samples']} samples + {recorded}, {of} has {wanted}: {what}")
        if bounds is None:
            continue
        counts = {w: s["class_counts"].get(w, 0) + rejects_by_class.get(w, 0) for w in wnids}
        over = {w: c for w, c in counts.items() if c > bounds[w][1]}
        short = {w: c for w, c in counts.items() if c < bounds[w][0]}
        if over:
            bad("expect_class_count", f"{len(over)} {split} classes have more than " + (
                f"{of} allows: " + ", ".join(f"{w} {c} (at most {bounds[w][1]})" for w, c in list(over.items())[:5])
                if partial else f"{name}'s {bounds[wnids[0]][1]} images: "
                + ", ".join(f"{w} {c}" for w, c in list(over.items())[:5])))
        if short and sum(bounds[w][0] - c for w, c in short.items()) > unattributed:
            bad("expect_class_count", f"{len(short)} {split} classes have fewer than " + (
                f"{of} needs: " + ", ".join(f"{w} {c} (at least {bounds[w][0]})" for w, c in list(short.items())[:5])
                if partial else f"{name}'s {bounds[wnids[0]][0]} images: "
                + ", ".join(f"{w} {c}" for w, c in list(short.items())[:5])))
    return out
