"""Reading one shard of a set `prepare-shards adopt` takes over: every member through the one strict
tar reader (`format.tar`), sha256, md5 and xxh3_128 of the same bytes, samples grouped by webdataset's rule
(a run of members with one key), and each sample checked and asked which class it names.

Runs in worker processes (`adopt` hands the shards to `parallel.run_jobs`) and never raises for bad
data: what it finds becomes `ShardScan.problems`, for `adopt` to refuse the set with, or (with
`exclude_bad`) a sample whose image nothing decodes becomes one of `ShardScan.excluded`.

Images are taken in whatever format Pillow reads (conversion scripts copy ImageNet's own files, the
PNG and the CMYK JPEGs included, under `.jpg`; webdataset, timm and our loader's Pillow path decode
them): `image_format` names the real format, counted per shard for the manifest. A sample's image
is its `.jpg`, or its `.webp` (timm's imagenet-w21-webp-wds).
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from dataclasses import dataclass, field

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
from imagenet_shards.pipeline.format.digest import FAST
from imagenet_shards.pipeline.format.tar import REGULAR, HashingReader, TarFormatError, iter_tar
from imagenet_shards.pipeline.prepare.image_formats import failure_reason, image_format_name, sniff_format

_WNID_RE = re.compile(r"(?<![0-9A-Za-z])n\d{8}(?![0-9])")
_LABEL_RE = re.compile(rb"0|[1-9][0-9]*")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")
_ALT_LABEL_RE = re.compile(r"^label_(\w+)$")  # timm's imagenet-22k-wds .json: label_12k (-1 outside the 12k)
IMAGE_EXTS = ("jpg", "webp")  # the member that holds a sample's image, the first a sample has
KEPT = 20  # problems kept per shard (all are counted)


@dataclass
class ShardScan:
    """What one read of a shard found (made in a worker process)."""

    rel: str
    split: str
    bytes: int = 0
    sha256: str = ""
    md5: str = ""
    xxh3_128: str = ""
    keys: list = field(default_factory=list)
    exts: Counter = field(default_factory=Counter)  # member extension -> samples that have it
    labels: Counter = field(default_factory=Counter)  # .cls -> samples
    pairs: dict = field(default_factory=dict)  # (label, WNID) -> first key with that evidence
    unverified: list = field(default_factory=list)  # (label, key) of samples that name no WNID
    formats: Counter = field(default_factory=Counter)  # image format -> samples (those adopted)
    alt_pairs: dict = field(default_factory=dict)  # (json field, value, WNID) -> first key (label_12k, ...)
    excluded: list = field(default_factory=list)  # (key, reason, detail) left out (exclude_bad)
    problems: list = field(default_factory=list)  # (kind, key, detail), the first KEPT
    num_problems: int = 0

    def problem(self, kind: str, key: str | None, detail: str) -> None:
        self.num_problems += 1
        if len(self.problems) < KEPT:
            self.problems.append((kind, key, detail))


def _name_lookup() -> dict[str, str | None]:
    names: dict[str, str | None] = {}
    for c in imagenet_1k_classes():
        names[c.name] = None if c.name in names else c.wnid  # None: two classes share it ("crane")
    return names


def sample_evidence(key: str, members: dict[str, bytes], *,
                    names: dict | None = None) -> tuple[int | None, str | None, list[tuple[str, str]]]:
    """(label, WNID the sample names or None, problems) of one sample's members {ext: bytes}.

    The WNID comes from the .json (`wnid`/`synset`, a unique `class_name`, a WNID in `filename`) or
    the key (`n01440764_10026`); sources that disagree are a problem. A .json `label` must equal .cls.
    The image itself is `image_format`'s to judge."""
    problems, wnids, label = [], set(), None
    if not any(e in members for e in IMAGE_EXTS):
        problems.append(("sample_members", "no .jpg (or .webp)"))
    if "cls" not in members:
        problems.append(("sample_members", "no .cls"))
    cls = members.get("cls")
    if cls is not None:
        if _LABEL_RE.fullmatch(cls):
            label = int(cls)
        else:
            problems.append(("cls_invalid", f".cls is {cls[:20]!r}, not a label (unlabeled samples cannot be adopted)"))
    wnids.update(_WNID_RE.findall(key.rsplit("/", 1)[-1]))
    if "json" in members:
        try:
            meta = json.loads(members["json"])
            if not isinstance(meta, dict):
                raise ValueError("not an object")
        except ValueError as e:
            problems.append(("json_invalid", f".json does not parse as an object ({e})"))
            meta = {}
        for k in ("wnid", "synset"):
            if isinstance(meta.get(k), str):
                wnids.update(_WNID_RE.findall(meta[k]) or [meta[k]])
        if isinstance(meta.get("filename"), str):
            wnids.update(_WNID_RE.findall(meta["filename"]))
        if isinstance(meta.get("class_name"), str) and _WNID_RE.fullmatch(meta["class_name"]):
            wnids.add(meta["class_name"])  # timm's 12k/22k writer puts the synset there
        elif isinstance(meta.get("class_name"), str) and (names or {}).get(meta["class_name"]):
            wnids.add(names[meta["class_name"]])
        if isinstance(meta.get("label"), int) and label is not None and meta["label"] != label:
            problems.append(("label_mismatch", f".cls says {label} but .json label is {meta['label']}"))
    if len(wnids) > 1:
        problems.append(("wnid_conflict", f"the sample names several classes: {', '.join(sorted(wnids))}"))
    return label, (next(iter(wnids)) if len(wnids) == 1 else None), problems


def image_format(data: bytes, *, deep: bool = False) -> tuple[str | None, tuple[str, str] | None]:
    """(the image's real format, None), or (None, (reason, detail)) when nothing decodes it.

    The format is `image_format_name`'s (what audit-shards recounts); Pillow must read the header
    (`deep`: decode the whole image). The reasons are prepare-shards' words for the same faults:
    empty, not_an_image, truncated, corrupt."""
    from PIL import Image, ImageFile

    if not data:
        return None, ("empty", "the .jpg member is empty")
    sniffed = sniff_format(data)
    saved, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, False
    try:
        with Image.open(io.BytesIO(data)) as im:
            if deep:
                im.load()
    except Exception as e:  # noqa: BLE001 - whatever the decoder says is the finding
        message = f"{type(e).__name__}: {e}"
        if sniffed is None:
            return None, ("not_an_image", f"no decoder reads it ({len(data)} bytes starting {data[:8]!r}): {message}")
        return None, (failure_reason(sniffed, data, None, message), f"a {sniffed} that does not decode: {message}")
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = saved
    return image_format_name(data), None


def alt_labels(members: dict[str, bytes]) -> dict[str, int]:
    """The extra label fields of a sample's .json (`label_12k`: its class's index in another label
    space, -1 outside it), as written by timm's imagenet-22k-wds writer; {} when there are none."""
    try:
        meta = json.loads(members["json"])
    except (KeyError, ValueError):
        return {}
    if not isinstance(meta, dict):
        return {}
    return {k: v for k, v in meta.items() if _ALT_LABEL_RE.match(k) and isinstance(v, int) and not isinstance(v, bool)}


def scan_shard(url: str, rel: str, split: str, deep: bool = False, exclude_bad: bool = False) -> ShardScan:
    """Read one shard once (strict tar reader, sha256, md5 and xxh3_128 of the same bytes) and check every sample.
    Never raises for bad data: what is wrong becomes `problems`; with `exclude_bad`, a sample whose
    image nothing decodes is `excluded` instead (its label is then not used)."""
    scan, names = ShardScan(rel, split), _name_lookup()

    def add(key, members):
        scan.keys.append(key)
        scan.exts.update(members.keys())
        ext = next((e for e in IMAGE_EXTS if e in members), None)
        if ext is not None:
            fmt, bad = image_format(members[ext], deep=deep)
            if bad is not None and exclude_bad:
                scan.excluded.append((key, *bad))
                return
            if bad is not None:
                scan.problem("undecodable", key, f".{ext}: {bad[1]} ({bad[0]})")
            else:
                scan.formats[fmt] += 1
        label, wnid, problems = sample_evidence(key, members, names=names)
        for kind, detail in problems:
            scan.problem(kind, key, detail)
        if label is not None:
            scan.labels[label] += 1
            if wnid is None:
                scan.unverified.append((label, key))
            else:
                scan.pairs.setdefault((label, wnid), key)
                for name, value in alt_labels(members).items():
                    scan.alt_pairs.setdefault((name, value, wnid), key)

    try:
        with storage.open_url(url, "rb") as f:
            r = HashingReader(f, ("sha256", "md5", FAST))
            key, members = None, {}
            try:
                for m in iter_tar(r, where=storage.redact(url)):
                    if m.type not in REGULAR or m.name.startswith("/") or ".." in m.name.split("/") \
                            or _UNSAFE.search(m.name) or not m.ext or not m.key.rsplit("/", 1)[-1]:
                        scan.problem("member_name", m.key, f"member {m.name!r} (type {m.type!r}) is not a regular "
                                     "file named KEY.EXT with a safe relative KEY")
                        continue
                    if m.key != key:  # webdataset's rule: a sample is a run of members with one key
                        if key is not None:
                            add(key, members)
                        key, members = m.key, {}
                    if m.ext in members:
                        scan.problem("sample_members", m.key, f"a second .{m.ext}")
                    members[m.ext] = m.data
                if key is not None:
                    add(key, members)
            except TarFormatError as e:
                scan.problem(e.kind, e.key, e.detail)
                for _ in r.read_rest():
                    pass
            scan.bytes, scan.sha256, scan.md5 = r.bytes_read, r.hexdigest("sha256"), r.hexdigest("md5")
            scan.xxh3_128 = r.hexdigest(FAST)
    except FileNotFoundError:
        scan.problem("shard_missing", None, "listed but not there")
    except OSError as e:
        scan.problem("shard_unreadable", None, storage.redact(e))
    return scan


__all__ = ["IMAGE_EXTS", "KEPT", "ShardScan", "alt_labels", "image_format", "sample_evidence", "scan_shard"]
