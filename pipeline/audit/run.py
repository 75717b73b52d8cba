"""audit-shards as a library: compare what a shard set holds with what its manifest says.

Two halves, as everywhere in this project:
- observe (in worker processes, one shard at a time): stream the shard once through sha256 (and
  md5 with --deep) in constant memory, parse the tar from the same bytes, and note each sample's members, label,
  json and a digest of its image (and with `deep`, what a full decode gives) -> ShardObservation;
- check (pure functions): (manifest, observations, class table, facts) -> [Problem].
`audit()` runs both over every shard and adds the set-wide checks (keys, counts, duplicates,
--expect). The CLI (audit_cli) only prints the report and picks the exit code.
All reads of DATA go through imagenet_shards.pipeline.storage.fs, so DATA may be a local path or a URL.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import re
import tarfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np
from tqdm import tqdm

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.parallel import run_jobs
from imagenet_shards.pipeline.format.manifest import FORMAT, FORMAT_VERSION, info_json, wids_index
from imagenet_shards.pipeline.prepare.sources import key_for
from imagenet_shards.pipeline.format.tar import HashingReader, TarFormatError, iter_tar, split_name

ERROR, WARNING = "error", "warning"
SAMPLE_EXTS = ("cls", "jpg", "json")
JSON_FIELDS = {"label": int, "wnid": str, "filename": str, "width": int, "height": int,
               "orig_width": int, "orig_height": int, "fixes": list}
IGNORED_DIRS = ("_prepare",)  # prepare-shards' job state, not part of the shard set
EXAMPLES = 5
TRAIN_KEY_RE = re.compile(r"^(n\d{8})_")
DIGEST_BYTES = 16


@dataclass(frozen=True)
class Problem:
    """One finding. `shard` is the shard's url relative to DATA (or the file concerned), `key` a sample key."""

    kind: str
    shard: str | None = None
    key: str | None = None
    detail: str = ""
    severity: str = ERROR


class AuditError(Exception):
    """The audit cannot run (no manifest, unreadable DATA, bad arguments); the message is one line."""


@dataclass
class AuditReport:
    data: str
    deep: bool
    splits: list[str]
    problems: list[Problem] = field(default_factory=list)  # errors and warnings, in check order
    counts: dict = field(default_factory=dict)  # per split: what the manifest says and what was read
    duplicates: dict = field(default_factory=dict)  # content duplicates: counts and example key groups
    timing: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # checks that could not run here, and why

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict:
        return {"data": self.data, "ok": self.ok, "deep": self.deep, "splits": self.splits,
                "num_errors": len(self.errors), "num_warnings": len(self.warnings),
                "problems": [asdict(p) for p in self.problems], "counts": self.counts,
                "duplicates": self.duplicates, "timing": self.timing, "notes": self.notes}


# ---------------------------------------------------------------------------------------------------
# Observing one shard.

@dataclass
class SampleObservation:
    key: str
    exts: list[str]
    cls: bytes | None = None
    json: bytes | None = None
    jpg_head: bytes = b""
    jpg_size: int = 0
    digest: bytes = b""  # of the stored image bytes (sha1, truncated), for duplicate detection
    decoded: tuple | None = None  # deep: (format, mode, width, height)
    decode_error: str | None = None


@dataclass
class ShardObservation:
    url: str
    exists: bool = True
    read_error: str | None = None
    size: int | None = None
    sha256: str | None = None
    md5: str | None = None
    tar_problems: list[tuple[str, str | None, str]] = field(default_factory=list)  # (kind, key, detail)
    samples: list[SampleObservation] = field(default_factory=list)
    complete: bool = False  # the tar parsed to its end marker


def decode_image(data: bytes) -> tuple[tuple | None, str | None]:
    """Fully decode JPEG bytes: ((format, mode, width, height), None) or (None, the decoder's message)."""
    from PIL import Image, ImageFile

    saved, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, False
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return (im.format, im.mode, im.width, im.height), None
    except Exception as e:  # noqa: BLE001 - any decoder failure is the finding
        return None, f"{type(e).__name__}: {e}"
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = saved


def observe_samples(members, deep: bool, problems: list):
    """Group consecutive tar members into samples (webdataset's rule); note member-level problems."""
    current = None
    for m in members:
        if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
            problems.append(("tar_not_regular", None, f"{m.name} is not a regular file (type {m.type!r})"))
            continue
        if m.name.startswith("/") or ".." in m.name.split("/"):
            problems.append(("tar_unsafe_name", None, f"member name {m.name!r} is absolute or climbs out with '..'"))
        key, ext = split_name(m.name)
        if current is None or current.key != key:
            if current is not None:
                yield current
            current = SampleObservation(key, [])
        current.exts.append(ext)
        if ext == "cls":
            current.cls = m.data
        elif ext == "json":
            current.json = m.data
        elif ext == "jpg":
            current.jpg_head, current.jpg_size = m.data[:3], len(m.data)
            # sha1: hardware-accelerated where sha256 is, fast where it is not; collisions by accident only matter
            current.digest = hashlib.sha1(m.data).digest()[:DIGEST_BYTES]
            if deep:
                current.decoded, current.decode_error = decode_image(m.data)
    if current is not None:
        yield current


def observe_shard(url: str, *, deep: bool = False) -> ShardObservation:
    """Read one shard once: size, sha256 (and md5 when deep), tar structure and every sample.

    md5 only proves again what a matching sha256 proves; it is checked with `deep` (it costs as much
    as sha256 and the content digest together). Never raises for bad data.
    """
    obs = ShardObservation(url)
    try:
        obs.size = storage.size(url)
    except FileNotFoundError:
        obs.exists = False
        return obs
    except OSError as e:
        obs.read_error = f"{type(e).__name__}: {e}"
        return obs
    try:
        with storage.open_url(url, "rb") as f:
            r = HashingReader(f, ("sha256", "md5") if deep else ("sha256",))
            try:
                for sample in observe_samples(iter_tar(r), deep, obs.tar_problems):
                    obs.samples.append(sample)  # one by one: a fault keeps the samples before it
                obs.complete = True
            except TarFormatError as e:
                obs.tar_problems.append((e.kind, e.key, e.detail))
                for _ in r.read_rest():  # hash the rest: the file's digest is still worth reporting
                    pass
            obs.sha256 = r.hexdigest("sha256")
            obs.md5 = r.hexdigest("md5") if deep else None
    except OSError as e:
        obs.read_error = f"{type(e).__name__}: {e}"
    return obs


# ---------------------------------------------------------------------------------------------------
# Checks: pure functions of (manifest, observations).

def check_sample(s: SampleObservation, split: str, classes: list[dict], shard: str) -> list[Problem]:
    """The per-sample contract of docs/format.md: members, .cls, json, their agreement, the image bytes."""
    out = []

    def bad(kind, detail):
        out.append(Problem(kind, shard, s.key, detail))

    counts = Counter(s.exts)
    missing = [e for e in SAMPLE_EXTS if e not in counts]
    extra = sorted(e for e in counts if e not in SAMPLE_EXTS) + sorted(e for e in SAMPLE_EXTS if counts[e] > 1)
    if missing or extra:
        bad("sample_members", "; ".join(filter(None, [
            f"missing {', '.join('.' + e for e in missing)}" if missing else "",
            f"unexpected or repeated {', '.join('.' + e for e in extra)}" if extra else ""])))
    label = None
    if s.cls is not None:
        if re.fullmatch(rb"0|[1-9][0-9]*", s.cls):
            label = int(s.cls)
            if not 0 <= label < len(classes):
                bad("cls_out_of_range", f".cls is {label}, outside [0, {len(classes)})")
                label = None
        else:
            bad("cls_invalid", f".cls is {s.cls[:40]!r}, not a decimal label")
    meta = None
    if s.json is not None:
        try:
            meta = json.loads(s.json)
            wrong = [k for k, t in JSON_FIELDS.items() if not isinstance(meta.get(k), t) or meta.get(k) is True]
            if wrong:
                bad("json_invalid", f"json lacks or mistypes {', '.join(wrong)}")
                meta = None
        except (ValueError, AttributeError):
            bad("json_invalid", "json does not parse as an object")
            meta = None
    if meta is not None:
        if label is not None and meta["label"] != label:
            bad("label_mismatch", f".cls says {label} ({classes[label]['wnid']}) but json says {meta['label']}")
        if 0 <= meta["label"] < len(classes) and classes[meta["label"]]["wnid"] != meta["wnid"]:
            bad("wnid_mismatch", f"json label {meta['label']} is {classes[meta['label']]['wnid']} in the class "
                                 f"table but json wnid is {meta['wnid']}")
        m = TRAIN_KEY_RE.match(s.key)
        if split == "train" and m and m.group(1) != meta["wnid"]:
            bad("wnid_mismatch", f"train key names class {m.group(1)} but json wnid is {meta['wnid']}")
        if key_for(meta["filename"]) != s.key:
            bad("key_mismatch", f"json filename {meta['filename']!r} does not give key {s.key}")
    if "jpg" in counts:
        if s.jpg_head != b"\xff\xd8\xff":
            bad("not_jpeg", f".jpg does not start with a JPEG marker ({s.jpg_head!r})")
        if s.decode_error is not None:
            bad("undecodable", s.decode_error)
        elif s.decoded is not None:
            fmt, mode, w, h = s.decoded
            if fmt != "JPEG":
                bad("not_jpeg", f"decodes as {fmt}, not JPEG")
            if mode != "RGB":
                bad("not_rgb", f"decodes as mode {mode}, not 8-bit 3-channel RGB")
            if meta is not None and (w, h) != (meta["width"], meta["height"]):
                bad("size_mismatch", f"decodes to {w}x{h} but json says {meta['width']}x{meta['height']}")
    return out


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


def check_shard(entry: dict, obs: ShardObservation, split: str, classes: list[dict]) -> list[Problem]:
    """A listed shard against its manifest entry: present, size, hashes, tar structure, samples, count."""
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
    if obs.md5 is not None and obs.md5 != entry["md5"]:
        out.append(Problem("shard_md5", url, None, f"md5 {obs.md5}, manifest says {entry['md5']}"))
    out += [Problem(kind, url, key, detail) for kind, key, detail in obs.tar_problems]
    for s in obs.samples:
        out += check_sample(s, split, classes, url)
    if len(obs.samples) != entry["num_samples"]:
        out.append(Problem("shard_count", url, None,
                           f"{len(obs.samples)} samples, manifest says {entry['num_samples']}"))
    return out


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
    classes = m.get("classes") if isinstance(m.get("classes"), list) else []
    for i, c in enumerate(classes):
        if not (isinstance(c, dict) and c.get("index") == i and isinstance(c.get("wnid"), str)
                and isinstance(c.get("name"), str)):
            bad(f"classes[{i}] is not {{index: {i}, wnid, name}}")
            break
    else:
        wnids = [c["wnid"] for c in classes]
        if wnids != sorted(set(wnids)):
            bad("class WNIDs are not unique and sorted (label = index of the WNID in sorted order)")
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
                    and _is_hex(sh.get("md5"), 32)):
                bad(f"splits.{name}.shards[{i}] lacks url, num_samples, bytes, sha256 or md5")
                shards_ok = False
                continue
            if sh["url"].startswith("/") or ".." in sh["url"].split("/") or "://" in sh["url"]:
                bad(f"splits.{name}.shards[{i}].url {sh['url']!r} is not relative to DATA")
                shards_ok = False
            urls[sh["url"]] += 1
        if not shards_ok:
            continue
        usable.add(name)
        sums = {"shards": len(s["shards"]), "shard samples": sum(sh["num_samples"] for sh in s["shards"]),
                "class counts": sum(s["class_counts"].values()),
                "rejected records": _count_split(records["rejected"], name),
                "skipped records": _count_split(records["skipped"], name)}
        said = {"shards": s["num_shards"], "shard samples": s["num_samples"], "class counts": s["num_samples"],
                "rejected records": s["num_rejected"], "skipped records": s["num_skipped"]}
        for what in sums:
            if sums[what] != said[what]:
                bad(f"splits.{name}: {what} add up to {sums[what]}, not {said[what]}", "manifest_inconsistent")
        if s["images_in"] != s["num_samples"] + s["num_rejected"] + s["num_skipped"]:
            bad(f"splits.{name}: images_in {s['images_in']} != num_samples + num_rejected + num_skipped "
                f"({s['num_samples']} + {s['num_rejected']} + {s['num_skipped']})", "manifest_inconsistent")
        unknown = sorted(set(s["class_counts"]) - {c.get("wnid") for c in classes if isinstance(c, dict)})
        if unknown:
            bad(f"splits.{name}.class_counts names WNIDs not in the class table: {', '.join(unknown[:5])}",
                "manifest_inconsistent")
    for url, n in sorted(urls.items()):
        if n > 1:
            bad(f"shard {url} is listed {n} times", "manifest_inconsistent")
    totals = m.get("totals") if isinstance(m.get("totals"), dict) else {}
    if splits and set(usable) == set(splits):
        want = {"samples": sum(s["num_samples"] for s in splits.values()),
                "shards": sum(s["num_shards"] for s in splits.values()),
                "bytes": sum(sh["bytes"] for s in splits.values() for sh in s["shards"]),
                "images_in": sum(s["images_in"] for s in splits.values()),
                "rejected": len(records["rejected"]), "skipped": len(records["skipped"])}
        for k, v in want.items():
            if totals.get(k) != v:
                bad(f"totals.{k} is {totals.get(k)}, the splits add up to {v}", "manifest_inconsistent")
    return out, usable


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
    if info is None:
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
    out = []
    for wnid in sorted(set(manifest_counts) | set(observed), key=str):
        want, got = manifest_counts.get(wnid, 0), observed.get(wnid, 0)
        if want != got:
            out.append(Problem("class_count", None, None, f"{split} {wnid}: {got} samples, manifest says {want}"))
    return out


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
        per_class_rejects = Counter(m_.group(1) for r in rejects if (m_ := TRAIN_KEY_RE.match(r.get("key", ""))))
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


# ---------------------------------------------------------------------------------------------------
# The audit.

@dataclass
class ShardResult:
    """What a worker sends back: the shard's problems plus what the set-wide checks need."""

    url: str
    split: str
    problems: list[Problem]
    keys: list[str]
    content_keys: list[str]  # the samples that have a .jpg, in the order of `digests`
    digests: bytes
    class_counts: Counter
    complete: bool  # read to its end, no structural fault, count as listed
    bytes_read: int


def audit_shard(data: str, split: str, entry: dict, classes: list[dict], deep: bool) -> ShardResult:
    """Observe and check one listed shard (runs in a worker process)."""
    obs = observe_shard(storage.join(data, entry["url"]), deep=deep)
    problems = check_shard(entry, obs, split, classes)
    with_image = [s for s in obs.samples if s.digest]
    counts = Counter(w for s in obs.samples if (w := sample_wnid(s, classes)) is not None)
    complete = obs.exists and obs.complete and not obs.read_error and len(obs.samples) == entry["num_samples"]
    return ShardResult(entry["url"], split, problems, [s.key for s in obs.samples], [s.key for s in with_image],
                       b"".join(s.digest for s in with_image), counts, complete,
                       obs.size if obs.exists and obs.size is not None else 0)


def _read_json(url: str):
    try:
        with storage.open_url(url, "rb") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_manifest(data: str) -> dict:
    """DATA's manifest.json, or AuditError with a one-line reason."""
    where = storage.redact(data)
    if storage.can_list(data):  # plain HTTP cannot tell a folder from nothing: go straight to the manifest
        try:
            if not storage.isdir(data):
                raise AuditError(f"cannot read {where}: no such directory")
            storage.listdir(data)
        except OSError as e:
            raise AuditError(f"cannot read {where}: {e.strerror or storage.redact(e)}") from None
    path = storage.join(data, "manifest.json")
    try:
        with storage.open_url(path, "rb") as f:
            m = json.load(f)
    except FileNotFoundError:
        raise AuditError(f"no manifest.json in {where}: is it the --out of a finished prepare-shards run?") from None
    except OSError as e:
        raise AuditError(f"cannot read {storage.redact(path)}: {e.strerror or storage.redact(e)}") from None
    except ValueError as e:
        raise AuditError(f"{storage.redact(path)} is not valid JSON ({e}): it is damaged; rerun prepare-shards to "
                         "rewrite it") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise AuditError(f"{storage.redact(path)} is not an imagenet-shards manifest (format is not {FORMAT!r})")
    if m.get("format_version") != FORMAT_VERSION:
        raise AuditError(f"{storage.redact(path)} has format_version {m.get('format_version')}; this tool reads "
                         f"{FORMAT_VERSION}")
    return m


def load_expect(name: str) -> tuple[dict, list[str]]:
    """(facts, sorted WNIDs) of a known dataset for --expect."""
    if name != "imagenet-1k":
        raise AuditError(f"unknown --expect {name!r}: the known dataset is imagenet-1k")
    from imagenet_shards.pipeline.format.classes import imagenet_1k_classes, imagenet_1k_facts

    return imagenet_1k_facts(), [c.wnid for c in imagenet_1k_classes()]


def audit(data, *, deep: bool = False, splits=None, workers: int | None = None, expect: str | None = None,
          progress: bool = True) -> AuditReport:
    """Audit the shard set at `data` (a directory or URL holding manifest.json).

    Returns the report (problems with severity "error" mean the set is not intact; "warning"s,
    such as duplicate image content, do not). Raises AuditError when the audit cannot run.
    """
    t0 = time.monotonic()
    data = str(data)
    m = load_manifest(data)
    facts = load_expect(expect) if expect else None
    problems, usable = check_manifest(m)
    have = sorted(m["splits"]) if isinstance(m.get("splits"), dict) else []
    splits = list(have if splits is None else splits)
    unknown = [s for s in splits if s not in have]
    if unknown:
        raise AuditError(f"the manifest has no split {', '.join(unknown)} (it has {', '.join(have) or 'none'})")
    report = AuditReport(data=storage.redact(data), deep=deep, splits=splits)
    classes = m["classes"] if isinstance(m.get("classes"), list) else []

    sound = set(have) <= usable and not any(p.kind == "manifest_schema" for p in problems)
    if sound:
        info = _read_json(storage.join(data, "_info.json"))
        problems += check_side_files(m, info, {s: _read_json(storage.join(data, f"{s}.wids.json")) for s in have})
    jobs = [(split, entry) for split in splits if split in usable for entry in m["splits"][split]["shards"]]
    listed = {e["url"] for split in have if isinstance(m["splits"][split], dict)  # even from unsound splits
              for e in m["splits"][split].get("shards") or []
              if isinstance(e, dict) and isinstance(e.get("url"), str)}
    found = {}
    if storage.can_list(data):
        for folder in sorted({posixpath.dirname(e["url"]) for _, e in jobs} | set(splits)):
            if folder and folder not in IGNORED_DIRS and storage.isdir(storage.join(data, folder)):
                try:
                    found[folder] = storage.listdir(storage.join(data, folder))
                except OSError as e:
                    problems.append(Problem("folder_unreadable", folder, None,
                                            f"cannot list it: {e.strerror or storage.redact(e)}"))
        problems += check_extra_files(listed, found)
    else:
        report.notes.append(f"not checked for shards the manifest does not list: {storage.protocol(data)}:// "
                            "cannot list folders (audit a local copy or the bucket itself for that check)")

    results = _run_shards(data, jobs, classes, deep, workers, progress)
    for r in results:
        problems += r.problems
    problems += find_duplicate_keys([(r.url, r.keys) for r in results])
    for split in splits:
        mine = [r for r in results if r.split == split]
        if split in usable and all(r.complete for r in mine):  # else the shard problems already say why
            problems += check_class_counts(split, m["splits"][split]["class_counts"],
                                           sum((r.class_counts for r in mine), Counter()))
        report.counts[split] = {
            "shards": len(m["splits"][split].get("shards", [])) if split in usable else None,
            "shards_read": sum(1 for r in mine if r.bytes_read),
            "samples_manifest": m["splits"][split].get("num_samples"),
            "samples_read": sum(len(r.keys) for r in mine), "bytes_read": sum(r.bytes_read for r in mine),
            "classes_seen": len(set().union(*(r.class_counts for r in mine))) if mine else 0}
    report.duplicates = find_duplicate_content(
        {s: ([k for r in results if r.split == s for k in r.content_keys],
             b"".join(r.digests for r in results if r.split == s)) for s in splits})
    problems += duplicate_warnings(report.duplicates)
    if facts is not None and sound:
        problems += check_expect(m, facts[0], facts[1], splits, expect)
    report.problems = problems
    wall = time.monotonic() - t0
    total = sum(r.bytes_read for r in results)
    report.timing = {"wall_s": round(wall, 3), "bytes_read": total,
                     "mb_per_s": round(total / wall / 1e6, 1) if wall > 0 else None}
    return report


def _run_shards(data, jobs, classes, deep, workers, progress) -> list[ShardResult]:
    """Audit every (split, entry) job, in parallel when workers > 1; results in job order."""
    total = sum(e["bytes"] for _, e in jobs)
    results: list[ShardResult | None] = [None] * len(jobs)
    with tqdm(total=total, desc="audit", unit="B", unit_scale=True, unit_divisor=1024, disable=not progress,
              dynamic_ncols=True, smoothing=0.05) as bar:
        for i, result in run_jobs(audit_shard, [(data, split, entry, classes, deep) for split, entry in jobs],
                                  workers=workers):
            results[i] = result
            bar.update(jobs[i][1]["bytes"])
    return results


__all__ = ["AuditError", "AuditReport", "Problem", "audit", "check_manifest", "check_sample", "check_shard",
           "observe_shard", "load_manifest"]
