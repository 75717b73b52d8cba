"""audit-shards as a library: compare what a shard set holds with what its manifest says.

Two halves, as everywhere in this project:
- observe (`observe`, in worker processes, one shard at a time): stream the shard once through
  sha256 (and md5 with --deep) in constant memory, parse the tar from the same bytes, and note each
  sample's members, label, json and a digest of its image -> ShardObservation;
- check (pure functions): (manifest, observations, class table, facts) -> [Problem]: per sample
  and shard (`checks`), the manifest and its side files (`manifest_checks`), duplicates
  (`duplicates`), --expect (`expect`).
`audit()` runs both over every shard (on `pipeline.parallel.run_jobs`) and adds the set-wide checks.
The CLI (`cli`) only prints the report and picks the exit code. All reads of DATA go through
imagenet_shards.pipeline.storage, so DATA may be a local path or a URL.
"""

from __future__ import annotations

import bisect
import json
import posixpath
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tqdm import tqdm

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.audit.checks import check_shard, sample_wnid
from imagenet_shards.pipeline.audit.duplicates import (KeyColumn, duplicate_warnings, find_duplicate_content,
                                                       find_duplicate_keys, key_hashes, pack_keys)
from imagenet_shards.pipeline.audit.expect import check_expect, load_expect, recorded_expect
from imagenet_shards.pipeline.audit.holdout import check_holdout
from imagenet_shards.pipeline.audit.manifest_checks import (check_class_counts, check_extra_files,
                                                            check_format_counts, check_label_space, check_manifest,
                                                            check_side_files)
from imagenet_shards.pipeline.audit.observe import observe_shard
from imagenet_shards.pipeline.audit.report import AuditError, AuditReport, Problem
from imagenet_shards.pipeline.format.manifest import (JPEG_FORM, ManifestError, manifest_form, read_manifest,
                                                      samples_in_tar, shard_url)
from imagenet_shards.pipeline.parallel import run_jobs

IGNORED_DIRS = ("_prepare",)  # prepare-shards' job state, not part of the shard set


@dataclass
class ShardResult:
    """What a worker sends back: the shard's problems plus what the set-wide checks need, packed
    (~40 B a sample: the full ImageNet's 14.2 M fit; `duplicates`)."""

    url: str
    split: str
    problems: list[Problem]
    packed_keys: bytes  # every sample's key, in shard order (duplicates.pack_keys)
    num_keys: int
    hashes: bytes | None  # 8 bytes a key (duplicates.key_hashes); moved into one array by `audit`
    image_rows: bytes  # uint32 positions of the samples that have an image, in the order of `digests`
    digests: bytes | None  # 16 bytes an image; moved into one array by `audit`
    class_counts: Counter | None  # folded into its split's by `audit` as it arrives (fold_class_counts)
    complete: bool  # read to its end, no structural fault, count as listed
    bytes_read: int
    formats: Counter  # image format (`image_format_name`) -> samples, excluded ones left out

    @property
    def keys(self) -> KeyColumn:
        return KeyColumn([self.packed_keys], [self.num_keys])

    @property
    def num_images(self) -> int:
        return len(self.image_rows) // 4


class _ImageKeys(Sequence):
    """The keys of the samples with an image, over a split's shard results, in digest order."""

    def __init__(self, results: list[ShardResult]):
        self._results, self._ends = results, np.cumsum([r.num_images for r in results]).tolist()

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, j: int) -> str:
        s = bisect.bisect_right(self._ends, j)
        r = self._results[s]
        return r.keys[int(np.frombuffer(r.image_rows, dtype=np.uint32)[j - (self._ends[s - 1] if s else 0)])]


def _gather(results: list[ShardResult], name: str, width: int) -> np.ndarray:
    """The results' `name` bytes (uint64 words, `width` a sample) as one array, each result's own
    bytes let go as they are copied: the set-wide arrays never exist twice."""
    n = sum(len(getattr(r, name)) for r in results) // (8 * width)
    out = np.empty((n, width), dtype="<u8")
    at = 0
    for r in results:
        a = np.frombuffer(getattr(r, name), dtype="<u8").reshape(-1, width)
        out[at:at + len(a)] = a
        at += len(a)
        setattr(r, name, None)
    return out if width > 1 else out.reshape(-1)


def audit_shard(data: str, split: str, entry: dict, classes: list[dict], deep: bool,
                adopted: dict | None = None, form: str = JPEG_FORM) -> ShardResult:
    """Observe and check one listed shard (runs in a worker process)."""
    obs = observe_shard(shard_url(data, entry["url"]), deep=deep)
    problems = check_shard(entry, obs, split, classes, adopted, form)
    excluded = set(entry.get("excluded") or ())
    kept = [s for s in obs.samples if s.key not in excluded]  # excluded samples count toward nothing
    with_image = [s for s in kept if s.digest]
    counts = Counter(w for s in kept if (w := sample_wnid(s, classes)) is not None)
    complete = obs.exists and obs.complete and not obs.read_error and len(obs.samples) == samples_in_tar(entry)
    keys = [s.key for s in obs.samples]
    rows = np.array([i for i, s in enumerate(obs.samples) if s.key not in excluded and s.digest],
                    dtype=np.uint32).tobytes()
    return ShardResult(entry["url"], split, problems, pack_keys(keys), len(keys), key_hashes(keys), rows,
                       b"".join(s.digest for s in with_image), counts, complete,
                       obs.size if obs.exists and obs.size is not None else 0,
                       Counter(s.image_format for s in with_image))


def _read_json(url: str):
    try:
        with storage.open_url(url, "rb") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_manifest(data: str) -> dict:
    """DATA's manifest.json (read and validated by `format.manifest.read_manifest`), or AuditError with
    a one-line reason. Where DATA can be listed, it must be a readable directory."""
    where = storage.redact(data)
    if storage.can_list(data):  # plain HTTP cannot tell a folder from nothing: go straight to the manifest
        try:
            if not storage.isdir(data):
                raise AuditError(f"cannot read {where}: no such directory")
            storage.listdir(data)
        except OSError as e:
            raise AuditError(f"cannot read {where}: {e.strerror or storage.redact(e)}") from None
    try:
        return read_manifest(data)
    except ManifestError as e:
        raise AuditError(str(e)) from None


def audit(data, *, deep: bool = False, splits=None, workers: int | None = None, expect: str | None = None,
          progress: bool = True) -> AuditReport:
    """Audit the shard set at `data` (a directory or URL holding manifest.json).

    Returns the report (problems with severity "error" mean the set is not intact; "warning"s,
    such as duplicate image content, do not). Raises AuditError when the audit cannot run.
    `expect` None: the label space the manifest records, if a known one (its class table only).
    """
    t0 = time.monotonic()
    data = str(data)
    m = load_manifest(data)
    default_expect = recorded_expect(m) if expect is None else None
    facts = load_expect(expect) if expect else load_expect(default_expect, counts=False) if default_expect else None
    expect = expect or default_expect
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
        problems += check_label_space(m)
        info = _read_json(storage.join(data, "_info.json"))
        problems += check_side_files(m, info, {s: _read_json(storage.join(data, f"{s}.wids.json")) for s in have})
    jobs = [(split, entry) for split in splits if split in usable for entry in m["splits"][split]["shards"]]
    listed = {e["url"] for split in have if isinstance(m["splits"][split], dict)  # even from unsound splits
              for e in m["splits"][split].get("shards") or []
              if isinstance(e, dict) and isinstance(e.get("url"), str)}
    found = {}
    if storage.can_list(data):
        for folder in sorted({posixpath.dirname(e["url"]) for _, e in jobs} | set(splits)):
            if folder and folder not in IGNORED_DIRS and not folder.startswith("/") and "://" not in folder \
                    and storage.isdir(storage.join(data, folder)):  # an adopted set's own folders are not ours
                try:
                    found[folder] = storage.listdir(storage.join(data, folder))
                except OSError as e:
                    problems.append(Problem("folder_unreadable", folder, None,
                                            f"cannot list it: {e.strerror or storage.redact(e)}"))
        problems += check_extra_files(listed, found)
    else:
        report.notes.append(f"not checked for shards the manifest does not list: {storage.protocol(data)}:// "
                            "cannot list folders (audit a local copy or the bucket itself for that check)")

    class_counts: dict[str, Counter] = {}
    results = _run_shards(data, jobs, classes, deep, workers, progress, m.get("adopted"), class_counts,
                          manifest_form(m))
    for r in results:
        problems += r.problems
    problems += set_wide_key_checks(m, results, splits, sound)
    for split in splits:
        mine = [r for r in results if r.split == split]
        if split in usable and all(r.complete for r in mine):  # else the shard problems already say why
            problems += check_class_counts(split, m["splits"][split]["class_counts"],
                                           class_counts.get(split, Counter()))
            formats = ((m.get("adopted") or {}).get("formats") or {}).get(split)
            if formats is not None:  # an adopted set's images, recounted by format
                problems += check_format_counts(split, formats, sum((r.formats for r in mine), Counter()))
        report.counts[split] = {
            "shards": len(m["splits"][split].get("shards", [])) if split in usable else None,
            "shards_read": sum(1 for r in mine if r.bytes_read),
            "samples_manifest": m["splits"][split].get("num_samples"),
            "samples_read": sum(r.num_keys for r in mine), "bytes_read": sum(r.bytes_read for r in mine),
            "classes_seen": len(class_counts.get(split, ()))}
    report.duplicates = set_wide_content(results, splits)
    problems += duplicate_warnings(report.duplicates)
    if facts is not None and sound:
        problems += check_expect(m, facts[0], facts[1], splits, expect)
    report.problems = problems
    wall = time.monotonic() - t0
    total = sum(r.bytes_read for r in results)
    report.timing = {"wall_s": round(wall, 3), "bytes_read": total,
                     "mb_per_s": round(total / wall / 1e6, 1) if wall > 0 else None}
    return report


def set_wide_key_checks(m: dict, results: list[ShardResult], splits: list[str], sound: bool) -> list[Problem]:
    """Keys unique across the set and, with a held-out split, val disjoint from train: from the
    results' packed keys and hashes (made one array here, ~8 B a sample: the full ImageNet's 14.2 M
    fit the audit's budget; docs/benchmarks.md "Full ImageNet scale")."""
    hashes = _gather(results, "hashes", 1)
    out = find_duplicate_keys([(r.url, r.keys) for r in results], hashes)
    spans, at = {}, 0
    for r in results:  # jobs are grouped by split: each split's keys are one run of `hashes`
        start = spans.get(r.split, (at,))[0]
        at += r.num_keys
        spans[r.split] = (start, at)
    if sound:
        out += check_holdout(m, {s: (KeyColumn([r.packed_keys for r in results if r.split == s],
                                               [r.num_keys for r in results if r.split == s]),
                                     hashes[slice(*spans.get(s, (0, 0)))]) for s in splits})
    return out


def set_wide_content(results: list[ShardResult], splits: list[str]) -> dict:
    """Byte-identical images within and across splits (find_duplicate_content), from the results' digests."""
    return find_duplicate_content({s: (_ImageKeys(mine), _gather(mine, "digests", 2)) for s in splits
                                   for mine in [[r for r in results if r.split == s]]})


def _run_shards(data, jobs, classes, deep, workers, progress, adopted=None, counts=None,
                form=JPEG_FORM) -> list[ShardResult]:
    """Audit every (split, entry) job, in parallel when workers > 1; results in job order, their
    class counts folded into `counts` (split -> Counter) as they come."""
    counts = {} if counts is None else counts
    total = sum(e["bytes"] for _, e in jobs)
    results: list[ShardResult | None] = [None] * len(jobs)
    with tqdm(total=total, desc="audit", unit="B", unit_scale=True, unit_divisor=1024, disable=not progress,
              dynamic_ncols=True, smoothing=0.05) as bar:
        for i, result in run_jobs(audit_shard, [(data, split, entry, classes, deep, adopted, form) for split, entry in jobs],
                                  workers=workers):
            results[i] = result
            fold_class_counts(result, counts)
            bar.update(jobs[i][1]["bytes"])
    return results


def fold_class_counts(result: ShardResult, counts: dict[str, Counter]) -> None:
    """Add a shard's class counts to its split's and let the shard's go: a shuffled shard of 1,000
    samples names ~1,000 of the full ImageNet's classes, ~100 B a sample if every result kept its own."""
    counts.setdefault(result.split, Counter()).update(result.class_counts)
    result.class_counts = None


__all__ = ["AuditError", "AuditReport", "Problem", "audit", "load_manifest"]
