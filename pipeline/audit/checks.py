"""Checks of one shard against its manifest entry, and of each sample against docs/format.md: pure
functions of (manifest entry, `ShardObservation`, class table) -> [Problem]."""

from __future__ import annotations

import json
import re
from collections import Counter

from imagenet_shards.pipeline.audit.observe import SampleObservation, ShardObservation
from imagenet_shards.pipeline.audit.report import Problem
from imagenet_shards.pipeline.format.digest import FAST
from imagenet_shards.pipeline.format.keys import key_for, train_key_wnid
from imagenet_shards.pipeline.format import pixels
from imagenet_shards.pipeline.format.manifest import JPEG_FORM, samples_in_tar

SAMPLE_EXTS = {JPEG_FORM: ("cls", "jpg", "json"), pixels.FORM: ("cls", "json", pixels.EXT)}  # by stored form
JSON_FIELDS = {"label": int, "wnid": str, "filename": str, "width": int, "height": int,
               "orig_width": int, "orig_height": int, "fixes": list}
TEST_SPLIT = "test"  # unlabeled: .cls is -1 and the json's wnid is null (docs/format.md)
TEST_JSON_FIELDS = {**JSON_FIELDS, "wnid": type(None)}


def check_sample(s: SampleObservation, split: str, classes: list[dict], shard: str,
                 adopted: dict | None = None, form: str = JPEG_FORM) -> list[Problem]:
    """The per-sample contract of docs/format.md: members, .cls, json, their agreement, the image bytes.

    `adopted` (the manifest's entry for a set prepare-shards adopt took over): the members are the
    set's own `sample_exts`, and of its .json (another writer's) only `label` and `wnid` are checked;
    its images may be in any format (adopt counted them by format; `run` recounts them). `form`: the
    manifest's stored form; a pixel set's image is KEY.yuv420, its size set by the json's width/height."""
    out = []
    exts = adopted["sample_exts"] if adopted else SAMPLE_EXTS[form]

    def bad(kind, detail):
        out.append(Problem(kind, shard, s.key, detail))

    counts = Counter(s.exts)
    missing = [e for e in exts if e not in counts]
    extra = sorted(e for e in counts if e not in exts) + sorted(e for e in exts if counts[e] > 1)
    if missing or extra:
        bad("sample_members", "; ".join(filter(None, [
            f"missing {', '.join('.' + e for e in missing)}" if missing else "",
            f"unexpected or repeated {', '.join('.' + e for e in extra)}" if extra else ""])))
    unlabeled = split == TEST_SPLIT
    label = _cls_label(s, unlabeled, classes, bad)
    meta = _sample_meta(s, unlabeled, adopted, form, bad)
    if meta is not None and unlabeled:
        if meta["label"] != -1:
            bad("label_mismatch", f"json label is {meta['label']}; test samples are unlabeled: -1")
    elif meta is not None:
        if label is not None and meta["label"] != label:
            bad("label_mismatch", f".cls says {label} ({classes[label]['wnid']}) but json says {meta['label']}")
        if 0 <= meta["label"] < len(classes) and classes[meta["label"]]["wnid"] != meta["wnid"]:
            bad("wnid_mismatch", f"json label {meta['label']} is {classes[meta['label']]['wnid']} in the class "
                                 f"table but json wnid is {meta['wnid']}")
        if not adopted and ("label_1k" in meta or (meta["label"] >= 0
                                                    and any("imagenet_1k_index" in c for c in classes[:1]))):
            out += _check_label_1k(meta, classes, shard, s.key)
        key_wnid = train_key_wnid(s.key)
        if split == "train" and key_wnid and key_wnid != meta["wnid"]:
            bad("wnid_mismatch", f"train key names class {key_wnid} but json wnid is {meta['wnid']}")
    if meta is not None and not adopted and key_for(meta["filename"]) != s.key:
        bad("key_mismatch", f"json filename {meta['filename']!r} does not give key {s.key}")
    if form == pixels.FORM:
        _check_planes(s, meta, counts, bad)
    else:
        _check_jpeg(s, meta, counts, adopted, bad)
    return out


def _cls_label(s: SampleObservation, unlabeled: bool, classes: list[dict], bad) -> int | None:
    """The label a sample's .cls gives (None if it has none or a bad one, said through `bad`)."""
    if s.cls is None:
        return None
    if unlabeled:
        if s.cls != b"-1":
            bad("cls_invalid", f".cls is {s.cls[:40]!r}; test samples are unlabeled: -1")
        return None
    if not re.fullmatch(rb"0|[1-9][0-9]*", s.cls):
        bad("cls_invalid", f".cls is {s.cls[:40]!r}, not a decimal label")
        return None
    label = int(s.cls)
    if not 0 <= label < len(classes):
        bad("cls_out_of_range", f".cls is {label}, outside [0, {len(classes)})")
        return None
    return label


def _sample_meta(s: SampleObservation, unlabeled: bool, adopted: dict | None, form: str, bad) -> dict | None:
    """A sample's json when it has the fields docs/format.md gives it (else None, said through `bad`);
    an adopted set's json only when it has our label and wnid."""
    if s.json is None:
        return None
    try:
        meta = json.loads(s.json)
        fields = ({k: JSON_FIELDS[k] for k in ("label", "wnid") if k in meta} if adopted
                  else TEST_JSON_FIELDS if unlabeled else JSON_FIELDS)
        wrong = [k for k, t in fields.items() if not isinstance(meta.get(k), t) or meta.get(k) is True]
    except (ValueError, AttributeError):
        bad("json_invalid", "json does not parse as an object")
        return None
    if wrong:
        bad("json_invalid", f"json lacks or mistypes {', '.join(wrong)}")
        return None
    if form != JPEG_FORM and meta.get("form") != form:
        bad("json_invalid", f"json form is {meta.get('form')!r}, the manifest's is {form!r}")
    if adopted and not {"label", "wnid"} <= set(meta):
        return None  # another writer's .json without our label and wnid: .cls was proved at adoption
    return meta


def _check_planes(s: SampleObservation, meta: dict | None, counts: Counter, bad) -> None:
    """A pixel sample's KEY.yuv420: the size its json's width x height implies; with deep, its planes read."""
    if pixels.EXT not in counts or meta is None:
        return
    want = pixels.payload_size(meta["width"], meta["height"]) if meta["width"] > 0 and meta["height"] > 0 else -1
    if s.jpg_size != want:
        bad("size_mismatch", f".{pixels.EXT} is {s.jpg_size} bytes but json says {meta['width']}x{meta['height']} "
                             f"({want} bytes)")
    elif s.decode_error is not None:
        bad("undecodable", s.decode_error)


def _check_jpeg(s: SampleObservation, meta: dict | None, counts: Counter, adopted: dict | None, bad) -> None:
    """A JPEG sample's image: a JPEG (any format Pillow reads for an adopted set), and with deep, decoded
    to 8-bit RGB of the json's size."""
    if ("jpg" in counts or "webp" in counts) and adopted and "formats" in adopted:  # any format Pillow reads
        if s.decode_error is not None:
            bad("undecodable", s.decode_error)
    elif "jpg" in counts:
        if s.jpg_head != b"\xff\xd8\xff":
            bad("not_jpeg", f".jpg does not start with a JPEG marker ({s.jpg_head!r})")
        if s.decode_error is not None:
            bad("undecodable", s.decode_error)
        elif s.decoded is not None:
            fmt, mode, w, h = s.decoded
            if fmt != "JPEG":
                bad("not_jpeg", f"decodes as {fmt}, not JPEG")
            if mode != "RGB" and not adopted:  # adopted images stay as written; the loader converts them
                bad("not_rgb", f"decodes as mode {mode}, not 8-bit 3-channel RGB")
            if meta is not None and not adopted and (w, h) != (meta["width"], meta["height"]):
                bad("size_mismatch", f"decodes to {w}x{h} but json says {meta['width']}x{meta['height']}")


def _check_label_1k(meta: dict, classes: list[dict], shard: str, key: str) -> list[Problem]:
    """A class subset's sample json keeps the ImageNet-1k index (`label_1k`); it must be the one
    the class table gives its class (`imagenet_1k_index`)."""
    if "label_1k" not in meta:
        return [Problem("label_1k_mismatch", shard, key, "json lacks label_1k, which a class-subset set's "
                                                        "samples carry")]
    got = meta["label_1k"]
    if got is not None and (not isinstance(got, int) or isinstance(got, bool)):
        return [Problem("json_invalid", shard, key, f"json label_1k is {got!r}, not an integer or null")]
    if 0 <= meta["label"] < len(classes) and classes[meta["label"]].get("imagenet_1k_index", "absent") != got:
        want = classes[meta["label"]].get("imagenet_1k_index", "absent")
        return [Problem("label_1k_mismatch", shard, key, f"json label_1k is {got} but the class table gives "
                                                        f"{meta['wnid']} the ImageNet-1k index {want}")]
    return []


def sample_wnid(s: SampleObservation, classes: list[dict]) -> str | None:
    """The class a sample counts toward: its json wnid, else its .cls's class."""
    try:
        return json.loads(s.json)["wnid"]
    except (TypeError, ValueError, KeyError):
        pass
    try:
        return classes[int(s.cls)]["wnid"]
    except (TypeError, ValueError, IndexError):
        return None


def check_shard(entry: dict, obs: ShardObservation, split: str, classes: list[dict],
                adopted: dict | None = None, form: str = JPEG_FORM) -> list[Problem]:
    """A listed shard against its manifest entry: present, size, hashes, tar structure, samples, count.

    Samples the entry lists as `excluded` (adopt --exclude-bad) must be there, and are not checked."""
    url = entry["url"]
    if not obs.exists:
        return [Problem("shard_missing", url, None, "listed in the manifest but not there")]
    if obs.read_error:
        return [Problem("shard_unreadable", url, None, obs.read_error)]
    out = []
    if obs.size != entry["bytes"]:
        short = " (truncated?)" if obs.size < entry["bytes"] else ""
        out.append(Problem("shard_size", url, None, f"{obs.size} bytes, manifest says {entry['bytes']}{short}"))
    if obs.sha256 != entry["sha256"]:
        out.append(Problem("shard_sha256", url, None, f"sha256 {obs.sha256}, manifest says {entry['sha256']}"))
    if FAST in entry and obs.xxh3_128 is not None and obs.xxh3_128 != entry[FAST]:  # optional field
        out.append(Problem("shard_xxh3_128", url, None, f"xxh3_128 {obs.xxh3_128}, manifest says {entry[FAST]}"))
    if obs.md5 is not None and obs.md5 != entry["md5"]:
        out.append(Problem("shard_md5", url, None, f"md5 {obs.md5}, manifest says {entry['md5']}"))
    out += [Problem(kind, url, key, detail) for kind, key, detail in obs.tar_problems]
    excluded = set(entry.get("excluded") or ())
    for s in obs.samples:
        if s.key not in excluded:
            out += check_sample(s, split, classes, url, adopted, form)
    if len(obs.samples) != samples_in_tar(entry):
        out.append(Problem("shard_count", url, None, f"{len(obs.samples)} samples, manifest says "
                           f"{entry['num_samples']}" + (f" + {len(excluded)} excluded" if excluded else "")))
    if obs.complete:
        out += [Problem("sample_missing", url, key, "the manifest lists it as excluded but the shard does not hold it")
                for key in sorted(excluded - {s.key for s in obs.samples})]
    return out
