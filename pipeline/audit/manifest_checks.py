"""Checks of the manifest itself and the files beside it: schema, internal arithmetic, _info.json and
the wids indexes, files the manifest does not list, per-class counts. Pure functions -> [Problem]."""

from __future__ import annotations

import json
import posixpath
from collections import Counter

from imagenet_shards.pipeline.audit.checks import TEST_SPLIT
from imagenet_shards.pipeline.audit.report import Problem
from imagenet_shards.pipeline.format.digest import FAST, is_digest
from imagenet_shards.pipeline.format.label_spaces import list_sha256
from imagenet_shards.pipeline.format import pixels
from imagenet_shards.pipeline.format.manifest import JPEG_FORM, LEFT_OUT, info_json, wids_index


def _is_hex(x, n: int) -> bool:
    return isinstance(x, str) and len(x) == n and all(c in "0123456789abcdef" for c in x)


def _count_split(entries: list, split: str) -> int:
    return sum(1 for r in entries if isinstance(r, dict) and r.get("split") == split)


def check_manifest(m: dict) -> tuple[list[Problem], set[str]]:
    """Schema and internal arithmetic of a manifest; returns (problems, splits whose shard list is usable)."""
    out, usable = [], set()

    def bad(detail, kind="manifest_schema"):
        out.append(Problem(kind, "manifest.json", None, detail))

    for k, t in {"name": str, "config": dict, "sources": list, "classes": list, "splits": dict,
                 "rejected": list, "skipped": list, "fixed": dict, "totals": dict}.items():
        if not isinstance(m.get(k), t):
            bad(f"'{k}' is missing or not a {t.__name__}")
    for detail in _form_faults(m):
        bad(detail)
    classes = m.get("classes") if isinstance(m.get("classes"), list) else []
    for detail in _class_table_faults(m, classes):
        bad(detail)
    splits = m.get("splits") if isinstance(m.get("splits"), dict) else {}
    records = {k: m.get(k) if isinstance(m.get(k), list) else [] for k in ("rejected", "skipped")}
    urls = Counter()
    for name, s in sorted(splits.items()):
        ints = ("num_samples", "num_shards", "images_in", "num_rejected", "num_skipped")
        if not isinstance(s, dict) or any(not isinstance(s.get(k), int) for k in ints) \
                or not isinstance(s.get("shards"), list) or not isinstance(s.get("class_counts"), dict):
            bad(f"splits.{name} lacks {', '.join(ints)}, class_counts or shards")
            continue
        shards_ok = True
        for i, sh in enumerate(s["shards"]):
            if not (isinstance(sh, dict) and isinstance(sh.get("url"), str) and isinstance(sh.get("num_samples"), int)
                    and isinstance(sh.get("bytes"), int) and _is_hex(sh.get("sha256"), 64)
                    and _is_hex(sh.get("md5"), 32) and (FAST not in sh or is_digest(FAST, sh[FAST]))
                    and all(isinstance(k, str) for k in (sh.get("excluded") if isinstance(sh.get("excluded"), list)
                                                         else [None] if "excluded" in sh else []))):
                bad(f"splits.{name}.shards[{i}] lacks url, num_samples, bytes, sha256 or md5 (or its excluded "
                    f"is not a list of keys, or its {FAST} is not 32 hex digits)")
                shards_ok = False
                continue
            absolute = sh["url"].startswith("/") or "://" in sh["url"]  # adopt --out points at the set's own place
            if (absolute and "adopted" not in m) or (not absolute and ".." in sh["url"].split("/")):
                bad(f"splits.{name}.shards[{i}].url {sh['url']!r} is not relative to DATA")
                shards_ok = False
            urls[sh["url"]] += 1
        if shards_ok:
            usable.add(name)
            for detail in _split_faults(name, s, records, classes):
                bad(detail, "manifest_inconsistent")
    for url, n in sorted(urls.items()):
        if n > 1:
            bad(f"shard {url} is listed {n} times", "manifest_inconsistent")
    totals = m.get("totals") if isinstance(m.get("totals"), dict) else {}
    if splits and set(usable) == set(splits):
        want = {"samples": sum(s["num_samples"] for s in splits.values()),
                "shards": sum(s["num_shards"] for s in splits.values()),
                "bytes": sum(sh["bytes"] for s in splits.values() for sh in s["shards"]),
                "images_in": sum(s["images_in"] for s in splits.values() if "held_out_from" not in s),
                "rejected": len(records["rejected"]), "skipped": len(records["skipped"])}
        for k, v in want.items():
            if totals.get(k) != v:
                bad(f"totals.{k} is {totals.get(k)}, the splits add up to {v}", "manifest_inconsistent")
    return out, usable


def _form_faults(m: dict) -> list[str]:
    """The stored form's fields: `form` one we know; a pixel set's `max_side`, and its `derived_from` where it
    has one (a set prepared straight from the sources, `prepare-shards --pixels`, has none)."""
    form = m.get("form", JPEG_FORM)
    if form not in (JPEG_FORM, pixels.FORM):
        return [f"form is {form!r}, not {JPEG_FORM!r} or {pixels.FORM!r}"]
    if form == JPEG_FORM:
        return []
    out = []
    if not (isinstance(m.get("max_side"), int) and not isinstance(m["max_side"], bool) and m["max_side"] > 0):
        out.append(f"a {form} set's max_side is missing or not a positive integer")
    src = m.get("derived_from")
    well_formed = isinstance(src, dict) and isinstance(src.get("url"), str) and _is_hex(src.get("sha256"), 64)
    if "derived_from" in m and not well_formed:
        out.append(f"a {form} set's derived_from lacks the source set's url and sha256")
    return out


def _class_table_faults(m: dict, classes: list) -> list[str]:
    """The class table: {index, wnid, name} in index order, WNIDs unique (and sorted, unless a FILE's)."""
    for i, c in enumerate(classes):
        if not (isinstance(c, dict) and c.get("index") == i and isinstance(c.get("wnid"), str)
                and isinstance(c.get("name"), str)):
            return [f"classes[{i}] is not {{index: {i}, wnid, name}}"]
    wnids = [c["wnid"] for c in classes]
    if (m.get("label_space") or {}).get("name") == "file":  # a label-space FILE keeps its own order
        return ["class WNIDs are not unique"] if len(set(wnids)) != len(wnids) else []
    if wnids != sorted(set(wnids)):
        return ["class WNIDs are not unique and sorted (label = index of the WNID in sorted order)"]
    return []


def _split_faults(name: str, s: dict, records: dict, classes: list) -> list[str]:
    """A usable split's arithmetic: its sums against its counts, conservation, class_counts' WNIDs."""
    out = []
    sums = {"shards": len(s["shards"]), "shard samples": sum(sh["num_samples"] for sh in s["shards"]),
            "class counts": sum(s["class_counts"].values()),
            "rejected records": _count_split(records["rejected"], name),
            "skipped records": _count_split(records["skipped"], name)}
    said = {"shards": s["num_shards"], "shard samples": s["num_samples"],
            "class counts": 0 if name == TEST_SPLIT else s["num_samples"],  # the test split is unlabeled
            "rejected records": s["num_rejected"], "skipped records": s["num_skipped"]}
    for what in sums:
        if sums[what] != said[what]:
            out.append(f"splits.{name}: {what} add up to {sums[what]}, not {said[what]}")
    left_out = {k: s[k] for k in LEFT_OUT if k in s}  # inputs a run leaves out on purpose (format/manifest.py)
    wrong = [k for k, v in left_out.items() if not isinstance(v, int) or isinstance(v, bool)]
    if wrong:
        out.append(f"splits.{name}.{wrong[0]} is not an integer")
    elif s["images_in"] != s["num_samples"] + s["num_rejected"] + s["num_skipped"] + sum(left_out.values()):
        out.append(f"splits.{name}: images_in {s['images_in']} != num_samples + num_rejected + num_skipped"
                   + "".join(f" + {k}" for k in left_out)
                   + f" ({s['num_samples']} + {s['num_rejected']} + {s['num_skipped']}"
                   + "".join(f" + {v}" for v in left_out.values()) + ")")
    unknown = sorted(set(s["class_counts"]) - {c.get("wnid") for c in classes if isinstance(c, dict)})
    if unknown:
        out.append(f"splits.{name}.class_counts names WNIDs not in the class table: {', '.join(unknown[:5])}")
    out += [f"splits.{name}.short_classes: {detail}" for detail in _short_class_faults(s)]
    return out


def check_label_space(m: dict) -> list[Problem]:
    """The class table against the label space the manifest records (`label_space.{name,sha256}`):
    the table, one WNID a line in label order, must hash to the recorded sha256 (format.label_spaces.
    list_sha256), so a table edited, cut or reordered after the run is caught even where its .cls
    and json agree with it. A manifest that records no label space (an ILSVRC run) has nothing to check."""
    ls = m.get("label_space")
    if ls is None:
        return []
    if not (isinstance(ls, dict) and isinstance(ls.get("name"), str) and _is_hex(ls.get("sha256"), 64)):
        return [Problem("manifest_schema", "manifest.json", None, "'label_space' lacks name or sha256")]
    classes = m["classes"]  # check_manifest vouched for it
    got = list_sha256(c["wnid"] for c in classes)
    if got == ls["sha256"]:
        return []
    return [Problem("label_space_mismatch", "manifest.json", None,
                    f"the class table ({len(classes)} classes) hashes to sha256 {got}, but the manifest records "
                    f"label space {ls['name']} ({ls.get('num_classes', '?')} classes) as sha256 {ls['sha256']}: "
                    "the labels are not the recorded space's")]


def _short_class_faults(s: dict) -> list[str]:
    """A train selection's `short_classes` (format/manifest.py) against the split's own counts: each
    entry's samples are its class count, and drawn = samples + the reasons' counts."""
    short = s.get("short_classes")
    if short is None:
        return []
    if not isinstance(short, dict):
        return ["is not an object"]
    out = []
    for wnid, e in sorted(short.items()):
        reasons = e.get("reasons") if isinstance(e, dict) else None
        if not (isinstance(reasons, dict) and all(isinstance(n, int) for n in reasons.values())
                and isinstance(e.get("drawn"), int) and isinstance(e.get("samples"), int)):
            out.append(f"{wnid} is not {{drawn, samples, reasons}}")
        elif e["samples"] != s["class_counts"].get(wnid, 0) or e["drawn"] != e["samples"] + sum(reasons.values()):
            out.append(f"{wnid}: {e['samples']} samples of {e['drawn']} drawn with {sum(reasons.values())} failed, but "
                       f"class_counts has {s['class_counts'].get(wnid, 0)}")
    return out


def _first_difference(a, b, path="") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path or 'list'} has {len(a)} entries, expected {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path or 'value'} is {json.dumps(a)[:80]}, expected {json.dumps(b)[:80]}"


def check_side_files(m: dict, info: dict | None, wids: dict[str, dict | None]) -> list[Problem]:
    """_info.json and each split's wids index must be exactly what the manifest implies."""
    out = []
    want = info_json(m)
    if (m.get("adopted") or {}).get("info_json") == "source":
        pass  # an adopted set's own _info.json, left as its writer made it (adopt checked its shard lengths)
    elif info is None:
        out.append(Problem("info_missing", "_info.json", None, "missing or not JSON"))
    elif info != want:
        out.append(Problem("info_mismatch", "_info.json", None, _first_difference(info, want)))
    for split, got in sorted(wids.items()):
        name = f"{split}.wids.json"
        if got is None:
            out.append(Problem("wids_missing", name, None, "missing or not JSON"))
        elif got != (want := wids_index(m, split)):
            out.append(Problem("wids_mismatch", name, None, _first_difference(got, want)))
    return out


def check_extra_files(listed: set[str], found: dict[str, list[str]]) -> list[Problem]:
    """Files in the split folders that the manifest does not list. `found`: folder -> names in it."""
    return [Problem("shard_extra", posixpath.join(folder, name), None, "in a split folder but not in the manifest")
            for folder, names in sorted(found.items()) for name in names
            if posixpath.join(folder, name) not in listed]


def check_class_counts(split: str, manifest_counts: dict, observed: Counter) -> list[Problem]:
    """Per-class sample counts read from a split's shards against the manifest's `class_counts`."""
    out = []
    for wnid in sorted(set(manifest_counts) | set(observed), key=str):
        want, got = manifest_counts.get(wnid, 0), observed.get(wnid, 0)
        if want != got:
            out.append(Problem("class_count", None, None, f"{split} {wnid}: {got} samples, manifest says {want}"))
    return out


def check_format_counts(split: str, manifest_counts: dict, observed: Counter) -> list[Problem]:
    """An adopted split's images per format, read from its shards, against the manifest's
    `adopted.formats` (what adopt counted): a swapped-in image of another format shows here."""
    return [Problem("format_count", None, None, f"{split}: {got} {fmt or 'unreadable'} images, manifest says {want}")
            for fmt in sorted(set(manifest_counts) | set(observed), key=str)
            if (want := manifest_counts.get(fmt, 0)) != (got := observed.get(fmt, 0))]
