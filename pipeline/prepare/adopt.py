"""`prepare-shards adopt SRC`: take over a WebDataset ImageNet shard set written by someone else.

timm's `imagenet-1k-wds` (`_info.json` + `imagenet1k-{train,validation}-NNNN.tar`, samples of
`.jpg`/`.cls`/`.json`) or any set laid out alike is read once, never rewritten: every shard through
the one strict tar reader, hashed (sha256, md5, xxh3_128) from the same bytes, every sample checked. Nothing is
adopted unless the set is intact and its labels are proven (or, with `--trust-labels`, knowingly
taken on trust); then our manifest, the wids indexes and, where none exists, `_info.json` are
written beside the shards (or in `--out`, the shard urls then absolute), so audit-shards, the loader
and train-imagenet read it like a set of ours. docs/prepare.md says what is checked and why.

Images are adopted in any format Pillow decodes (counted by format in `adopted.formats`). With
`exclude_bad`, samples whose image nothing decodes are left out instead of refusing the set: each
is a `rejected` entry with its reason, its shard entry lists it under `excluded` (and counts only
the others in `num_samples`), and audit-shards and the loader pass over it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections import Counter

from tqdm import tqdm

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.format.digest import FAST
from imagenet_shards.pipeline.format.label_spaces import (is_imagenet_1k, known_names, label_space as
                                                          named_space, present_space)
from imagenet_shards.pipeline.format.manifest import (INFO_SPLIT_NAMES, MANIFEST_NAME, build_manifest, info_json,
                                                      write_outputs)
from imagenet_shards.pipeline.parallel import run_jobs
from imagenet_shards.pipeline.prepare.adopt_scan import ShardScan, scan_shard
from imagenet_shards.pipeline.prepare.job_state import class_table

SPLIT_WORDS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}
_SPLIT_RE = re.compile(r"(?:^|[-_./])(train|training|val|valid|validation|test)(?=[-_./])")


class AdoptError(ValueError):
    """The set cannot be adopted; the message is one line. `problems`: (kind, shard, key, detail) found."""

    def __init__(self, message: str, problems: list | None = None):
        super().__init__(message)
        self.problems = problems or []


def split_of(rel: str) -> str | None:
    """`train`/`val` from a shard's path (`imagenet1k-validation-0003.tar`, `train/x-000001.tar`), or None."""
    found = {SPLIT_WORDS[w] for w in _SPLIT_RE.findall("/" + rel.lower())}
    return found.pop() if len(found) == 1 else None


def find_shards(src: str) -> tuple[dict[str, list[str]], dict | None]:
    """({split: [shard paths relative to SRC]}, SRC's _info.json or None); split "test" holds the
    unlabeled test shards, which are not adopted.

    From `_info.json` (timm/HF style) where it lists the splits' filenames, else by listing SRC and
    its train/, val/, validation/ folders for *.tar named by split."""
    try:
        info = json.loads(storage.read_bytes(storage.join(src, "_info.json")))
    except FileNotFoundError:
        info = None
    except (OSError, ValueError) as e:
        raise AdoptError(f"cannot read {storage.redact(storage.join(src, '_info.json'))}: {storage.redact(e)}") from None
    splits: dict[str, list[str]] = {}
    if isinstance(info, dict) and isinstance(info.get("splits"), dict):
        for name, s in info["splits"].items():
            if isinstance(s, dict) and s.get("alt_label"):  # timm's train_12k: the same files read by label_12k
                continue
            files = s.get("filenames") if isinstance(s, dict) else None
            if SPLIT_WORDS.get(str(name).lower()) is None or not isinstance(files, list) \
                    or not all(isinstance(f, str) for f in files):
                raise AdoptError(f"_info.json split {name!r} is not a train, validation or test split listing its "
                                 "filenames")
            splits.setdefault(SPLIT_WORDS[name.lower()], []).extend(files)
        return splits, info
    if not storage.can_list(src):
        raise AdoptError(f"{storage.redact(src)} cannot be listed ({storage.protocol(src)}://) and has no _info.json "
                         "naming its shards")
    try:
        top = storage.listdir(src)
    except FileNotFoundError:
        raise AdoptError(f"{storage.redact(src)}: no such folder") from None
    rels = [n for n in top if n.endswith(".tar")]
    for folder in (n for n in top if n in SPLIT_WORDS and storage.isdir(storage.join(src, n))):
        rels += [f"{folder}/{n}" for n in storage.listdir(storage.join(src, folder)) if n.endswith(".tar")]
    for rel in rels:
        if split_of(rel) is None:
            raise AdoptError(f"cannot tell the split of {rel} (name shards *-train-*.tar and *-validation-*.tar, or "
                             "list them in _info.json)")
        splits.setdefault(split_of(rel), []).append(rel)
    if not set(splits) - {"test"}:
        raise AdoptError(f"{storage.redact(src)} holds no train or validation .tar shards")
    return splits, None


# the label spaces a set's .cls may index, tried in this order after ImageNet-1k's and the set's own WNIDs
OTHER_SPACES = ("imagenet-12k", "imagenet-22k", "imagenet-21k-goog", "imagenet-21k-miil", "imagenet-21k-miil-w21")
# timm's extra label fields (`label_12k`) and the space each indexes
ALT_LABEL_SPACES = {"1k": "imagenet-1k", "12k": "imagenet-12k", "22k": "imagenet-22k", "21k": "imagenet-21k-goog"}


def label_space(pairs: dict[tuple[int, str], str], where: dict[str, str]) -> list[str]:
    """The class list that every (label, WNID) pair follows: ImageNet-1k's 1000, the WNIDs the set
    holds, sorted (a class subset, labelled as prepare-shards labels one, or a set labelled by its own
    classes, as winter21's 19,167), or another known label space (timm's imagenet-12k-wds and
    imagenet-22k-wds: `OTHER_SPACES`, the first that fits). AdoptError naming the first sample that
    breaks the sorted-WNID convention. `where`: key -> shard, for the message."""
    table = list(named_space("imagenet-1k").wnids)
    if not pairs:
        return table
    index = {w: i for i, w in enumerate(table)}
    known = set().union(*(named_space(n).wnids for n in known_names()))
    for (label, wnid), key in pairs.items():
        if wnid not in known:
            raise AdoptError(f"sample {key} in {where[key]} names {wnid}, which is not an ImageNet-1k class nor in any "
                             "known label space: this is not an ImageNet shard set")
    present = sorted({w for _, w in pairs})
    for classes in (table, present, *(named_space(n).wnids for n in OTHER_SPACES)):
        idx = {w: i for i, w in enumerate(classes)}
        if all(idx.get(w) == label for label, w in pairs):
            return list(classes)
    (label, wnid), key = next(((lw, k) for lw, k in pairs.items() if index.get(lw[1]) != lw[0]
                               and present.index(lw[1]) != lw[0]))
    sub = f", {present.index(wnid)} among the {len(present)} this set holds" if len(present) < len(table) else ""
    in_1k = f"label {index[wnid]} among ImageNet-1k's sorted WNIDs" if wnid in index else "not an ImageNet-1k class"
    raise AdoptError(f"labels do not follow the sorted-WNID convention: sample {key} in {where[key]} has .cls {label} "
                     f"but its class {wnid} is {in_1k}{sub}, and no known label space ({', '.join(OTHER_SPACES)}) "
                     "fits all labels either (an off-by-one, or the devkit's ILSVRC2012_ID order?); not adopted: "
                     "training on it would learn wrong labels")


def space_of(classes: list[str]):
    """(label-space name, LabelSpace or None) of an adopted set's class list: `imagenet-1k`, another
    known space, `subset` (some ImageNet-1k classes, the legacy record) or `present`."""
    if classes == list(named_space("imagenet-1k").wnids):
        return "imagenet-1k", None
    for name in OTHER_SPACES:
        if classes == list(named_space(name).wnids):
            return name, named_space(name)
    if is_imagenet_1k(classes):
        return "subset", None
    return "present", present_space(classes)


def check_alt_labels(scans: list[ShardScan], where: dict[str, str]) -> dict[str, str]:
    """The extra label fields (`label_12k`) every sample's .json agrees with, field -> its label space
    (-1: a class outside that space); AdoptError naming the first sample that disagrees. Fields of an
    unknown space are left as they are (not listed)."""
    verified = {}
    for s in scans:
        for (field_, value, wnid), key in s.alt_pairs.items():
            name = ALT_LABEL_SPACES.get(field_.removeprefix("label_"))
            if name is None:
                continue
            want = named_space(name).index.get(wnid, -1)
            if value != want:
                raise AdoptError(f"sample {key} in {where[key]} has {field_} {value} in its .json but its class {wnid} "
                                 f"is {want} in {name}" + (" (not in it: -1)" if want < 0 else "")
                                 + "; not adopted: that label field is wrong")
            verified[field_] = name
    return dict(sorted(verified.items()))


def set_problems(scans: list[ShardScan], info: dict | None) -> tuple[list, int, dict[str, str]]:
    """(problems kept, problems counted, key -> shard) over the whole set: each shard's own, keys
    met twice, a member only some samples have, and shard lengths its _info.json states wrongly."""
    problems, where = [], {}
    count = sum(s.num_problems for s in scans)
    for s in scans:
        problems += [(kind, s.rel, key, detail) for kind, key, detail in s.problems]
        for key in s.keys:
            if key in where:
                problems.append(("duplicate_key", s.rel, key, f"also in {where[key]}"))
            where.setdefault(key, s.rel)
    exts = set().union(*(s.exts for s in scans)) - {"jpg", "webp", "cls"}  # image and .cls: checked per sample
    for s in scans:
        problems += [("sample_members", s.rel, None, f"{len(s.keys) - s.exts[e]} samples lack .{e}")
                     for e in sorted(exts) if s.exts[e] != len(s.keys)]
    lengths = {f: n for s in ((info or {}).get("splits") or {}).values()
               for f, n in zip(s.get("filenames") or [], s.get("shard_lengths") or [])}
    problems += [("info_mismatch", s.rel, None, f"_info.json says {lengths[s.rel]} samples, it holds {len(s.keys)}")
                 for s in scans if lengths.get(s.rel, len(s.keys)) != len(s.keys)]
    return problems, count + len(problems) - sum(len(s.problems) for s in scans), where


def prove_labels(scans: list[ShardScan], where: dict[str, str], trust_labels: bool) -> tuple[list[str], Counter]:
    """(classes the labels index, per split the samples taken on trust); AdoptError if labels break the
    convention, or if some prove nothing and `trust_labels` is off."""
    pairs: dict = {}
    for s in scans:
        for pair, key in s.pairs.items():
            pairs.setdefault(pair, key)
    classes = label_space(pairs, where)
    unverified = Counter({s.split: 0 for s in scans})
    for s in scans:
        unverified[s.split] += len(s.unverified)
        for label, key in s.unverified:
            if label >= len(classes):
                raise AdoptError(f"sample {key} in {s.rel} has .cls {label}, outside the set's {len(classes)} classes "
                                 f"({space_of(classes)[0] if len(classes) >= 1000 else 'the WNIDs its other samples name'})")
    if sum(unverified.values()) and not trust_labels:
        parts = [f"{split}: {n:,} of {sum(len(s.keys) for s in scans if s.split == split):,}"
                 for split, n in sorted(unverified.items()) if n]
        raise AdoptError(f"the labels of {sum(unverified.values()):,} samples cannot be verified ({'; '.join(parts)} "
                         "name no WNID in their .json, file name or key), so a wrong label order could not be told "
                         "apart: rerun with --trust-labels only if you know they are sorted-WNID indexes")
    return classes, unverified


def adopt(src: str, *, out: str | None = None, trust_labels: bool = False, deep: bool = False,
          exclude_bad: bool = False, workers: int | None = None, progress: bool = True) -> dict:
    """Scan the shard set at SRC (folder or URL) and write our manifest for it; returns the summary.

    Written beside the shards (shard urls relative), or to `out` (urls absolute: paths or URLs of
    SRC). AdoptError, before anything is written, for a set that is not intact, labels that break
    the sorted-WNID convention, or labels no sample proves (unless `trust_labels`); an image that
    nothing decodes is a fault too, unless `exclude_bad` (then that sample is left out, recorded)."""
    t0 = time.monotonic()
    src, dest = str(src).rstrip("/") or "/", str(out or src).rstrip("/") or "/"
    local, in_place, existing = _destination(src, dest)
    splits, info = find_shards(src)
    ignored = splits.pop("test", [])  # unlabeled: nothing a classifier can train or evaluate on
    jobs = [(rel if "://" in rel else storage.join(src, rel), rel, split, deep, exclude_bad)
            for split in sorted(splits) for rel in splits[split]]
    scans: list = [None] * len(jobs)
    with tqdm(total=len(jobs), desc="adopt: scan", unit="shard", disable=not progress, dynamic_ncols=True) as bar:
        for i, scan in run_jobs(scan_shard, jobs, workers=workers):
            scans[i] = scan
            bar.update()
    where = _refuse_problems(src, scans, info)
    classes, unverified = prove_labels(scans, where, trust_labels)
    extra_labels = check_alt_labels(scans, where)
    space_name, space = space_of(classes)
    adopted = {"from": storage.redact(src) if local is None else os.path.abspath(local),
               "sample_exts": sorted(set().union(*(s.exts for s in scans))), "ignored": sorted(ignored),
               "label_space": space_name,
               **({"extra_labels": extra_labels} if extra_labels else {}),
               "formats": {split: dict(sorted(sum((s.formats for s in scans if s.split == split), Counter()).items()))
                           for split in sorted(splits)},
               "labels": {split: {"verified": sum(len(s.keys) for s in scans if s.split == split) - n, "trusted": n}
                          for split, n in sorted(unverified.items())}}

    def url(rel: str) -> str:  # as the manifest lists it: relative beside the shards, else absolute
        if in_place or "://" in rel:
            return rel
        return os.path.abspath(os.path.join(local, rel)) if local is not None else storage.join(src, rel)

    state = {"config": {"mode": "adopt", "trust_labels": trust_labels, "deep": deep, "exclude_bad": exclude_bad},
             "classes": class_table(classes, {c.wnid: c.index for c in imagenet_1k_classes()}
                                    if space_name == "subset" else None),  # a subset keeps each class's 1k index
             "sources": [], "splits": {}}
    if space is not None:  # a full-ImageNet space: named in the manifest, as prepare-shards names one
        state["label_space"], state["dataset"] = space.record(), space.dataset
    records = {split: _split_records(state, split, [s for s in scans if s.split == split], classes, adopted["from"], url)
               for split in sorted(splits)}
    manifest = build_manifest(state, records)
    _write(dest, manifest, existing, adopted)
    return summarize(manifest, dest, time.monotonic() - t0)


def _destination(src: str, dest: str) -> tuple[str | None, bool, dict | None]:
    """Check where the manifest goes, before any scan: (SRC as a local path or None, whether the manifest
    goes beside the shards, the manifest already at DEST or None). AdoptError for a URL with
    credentials (they would be written into the manifest), a DEST that cannot be written, or a
    manifest at DEST that adopt did not write."""
    for url in (src, dest):
        if storage.redact(url) != url:
            raise AdoptError(f"{storage.redact(url)} carries credentials in the URL, which would be written into the "
                             "manifest: give them through --storage-option or the environment")
    local, local_dest = storage.local_path(src), storage.local_path(dest)
    in_place = os.path.abspath(local) == os.path.abspath(local_dest) if local and local_dest else src == dest
    if in_place and (local is None or not os.access(local, os.W_OK)):
        raise AdoptError(f"{storage.redact(src)} is {'remote' if local is None else 'read-only'}: give --out DIR "
                         "for the manifest (the shards stay where they are)")
    if not storage.can_write(dest):
        raise AdoptError(f"--out {storage.redact(dest)} is read-only: give a folder or a store you can write to")
    try:
        existing = json.loads(storage.read_bytes(storage.join(dest, MANIFEST_NAME)))
    except (OSError, ValueError):
        existing = None
    if existing is not None and not (isinstance(existing, dict) and "adopted" in existing):
        raise AdoptError(f"{storage.redact(dest)} already holds a {MANIFEST_NAME} that adopt did not write: audit that "
                         "set with audit-shards, or give another --out")
    return local, in_place, existing


def _refuse_problems(src: str, scans: list[ShardScan], info: dict | None) -> dict[str, str]:
    """AdoptError naming the set's problems (set_problems), if it has any; else where each key is."""
    problems, count, where = set_problems(scans, info)
    if problems:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(Counter(p[0] for p in problems).items()))
        kind, shard, key, detail = problems[0]
        hint = ("; --exclude-bad adopts the set without the images nothing decodes, each recorded with its reason"
                if any(p[0] == "undecodable" for p in problems) else "")
        raise AdoptError(f"{storage.redact(src)} has problems, nothing adopted: {count} ({kinds}); first: {shard}"
                         + (f" {key}" if key else "") + f": {detail}{hint}", problems)
    return where


def _split_records(state: dict, split: str, mine: list[ShardScan], classes: list[str], name: str, url) -> list[dict]:
    """One split of the adopted set: its source and split entries added to `state`; its shard records."""
    fingerprint = hashlib.sha256("".join(f"{s.rel}\t{s.sha256}\n" for s in mine).encode()).hexdigest()
    state["sources"].append({"split": split, "kind": "adopted-webdataset", "name": name,
                             "bytes": sum(s.bytes for s in mine), "shards": len(mine),
                             "fingerprint": f"shards-sha256:{fingerprint}"})
    state["splits"][split] = {"plan_rejected": [], "images_in": sum(len(s.keys) for s in mine)}
    return [{"index": i, "url": url(s.rel), "num_samples": len(s.keys) - len(s.excluded),
             "bytes": s.bytes, "sha256": s.sha256, "md5": s.md5, FAST: s.xxh3_128, "skipped": [], "fixed": [],
             "rejected": [{"split": split, "key": key, "source": s.rel, "reason": reason,
                           "detail": detail} for key, reason, detail in s.excluded],
             **({"excluded": sorted(key for key, _, _ in s.excluded)} if s.excluded else {}),
             "class_counts": {classes[label]: n for label, n in s.labels.items()}}
            for i, s in enumerate(mine)]


def _write(dest: str, manifest: dict, existing: dict | None, adopted: dict) -> None:
    """The manifest, the wids indexes and `_info.json` where it is ours to (re)write."""
    try:
        present = json.loads(storage.read_bytes(storage.join(dest, "_info.json")))
    except (OSError, ValueError):
        present = None
    # ours to (re)write: absent, or what an earlier adopt wrote; another writer's stays as it is
    write_info = present is None or present == info_json(manifest) or \
        (existing or {}).get("adopted", {}).get("info_json") == "written"
    manifest["adopted"] = dict(adopted, info_json="written" if write_info else "source")
    storage.makedirs(dest)
    write_outputs(dest, manifest, info=write_info)


def summarize(manifest: dict, dest: str, wall_s: float) -> dict:
    """The summary the CLI prints (and --json gives), from an adopted manifest."""
    a = manifest["adopted"]
    return {"adopted": a["from"], "out": storage.redact(dest), "label_space": a["label_space"], "ignored": a["ignored"],
            "classes": len(manifest["classes"]), "info_json": a["info_json"], "samples": manifest["totals"]["samples"],
            "shards": manifest["totals"]["shards"], "bytes": manifest["totals"]["bytes"], "wall_s": round(wall_s, 3),
            "splits": {s: {"samples": v["num_samples"], "shards": v["num_shards"], "excluded": v["num_rejected"],
                           "classes": len(v["class_counts"]), "formats": a.get("formats", {}).get(s, {}),
                           **a["labels"][s]}
                       for s, v in manifest["splits"].items()}}


def summary_text(s: dict) -> str:
    """The human-readable summary of an adoption."""
    lines = [f"prepare-shards adopt: {s['samples']:,} samples in {s['shards']} shards "
             f"({storage.human_bytes(s['bytes'])}) of {s['adopted']} -> {s['out']}/{MANIFEST_NAME}"]
    for split, v in s["splits"].items():
        lines.append(f"  {INFO_SPLIT_NAMES.get(split, split):10s}: {v['samples']:,} samples, {v['classes']} classes; "
                     f"labels verified {v['verified']:,}, trusted {v['trusted']:,}; images "
                     + ", ".join(f"{fmt} {n:,}" for fmt, n in v["formats"].items())
                     + (f"; {v['excluded']:,} left out (--exclude-bad; listed in the manifest's rejected)"
                        if v["excluded"] else ""))
    lines.append(f"  labels: sorted-WNID indexes of {s['classes']} classes ({s['label_space']}); _info.json "
                 + ("written" if s["info_json"] == "written" else "kept (the source's own)")
                 + (f"; not adopted: {len(s['ignored'])} unlabeled test shards" if s["ignored"] else ""))
    return "\n".join(lines)


__all__ = ["AdoptError", "adopt", "find_shards", "label_space", "prove_labels", "set_problems", "split_of",
           "summarize", "summary_text"]
