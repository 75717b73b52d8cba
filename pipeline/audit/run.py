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

import json
import posixpath
import time
from collections import Counter
from dataclasses import dataclass

from tqdm import tqdm

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.audit.checks import check_shard, sample_wnid
from imagenet_shards.pipeline.audit.duplicates import duplicate_warnings, find_duplicate_content, find_duplicate_keys
from imagenet_shards.pipeline.audit.expect import check_expect, load_expect
from imagenet_shards.pipeline.audit.manifest_checks import (check_class_counts, check_extra_files,
                                                            check_format_counts, check_manifest, check_side_files)
from imagenet_shards.pipeline.audit.observe import observe_shard
from imagenet_shards.pipeline.audit.report import AuditError, AuditReport, Problem
from imagenet_shards.pipeline.format.manifest import ManifestError, read_manifest, samples_in_tar, shard_url
from imagenet_shards.pipeline.parallel import run_jobs

IGNORED_DIRS = ("_prepare",)  # prepare-shards' job state, not part of the shard set


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
    formats: Counter  # image format (`image_format_name`) -> samples, excluded ones left out


def audit_shard(data: str, split: str, entry: dict, classes: list[dict], deep: bool,
                adopted: dict | None = None) -> ShardResult:
    """Observe and check one listed shard (runs in a worker process)."""
    obs = observe_shard(shard_url(data, entry["url"]), deep=deep)
    problems = check_shard(entry, obs, split, classes, adopted)
    excluded = set(entry.get("excluded") or ())
    kept = [s for s in obs.samples if s.key not in excluded]  # excluded samples count toward nothing
    with_image = [s for s in kept if s.digest]
    counts = Counter(w for s in kept if (w := sample_wnid(s, classes)) is not None)
    complete = obs.exists and obs.complete and not obs.read_error and len(obs.samples) == samples_in_tar(entry)
    return ShardResult(entry["url"], split, problems, [s.key for s in obs.samples], [s.key for s in with_image],
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

    results = _run_shards(data, jobs, classes, deep, workers, progress, m.get("adopted"))
    for r in results:
        problems += r.problems
    problems += find_duplicate_keys([(r.url, r.keys) for r in results])
    for split in splits:
        mine = [r for r in results if r.split == split]
        if split in usable and all(r.complete for r in mine):  # else the shard problems already say why
            problems += check_class_counts(split, m["splits"][split]["class_counts"],
                                           sum((r.class_counts for r in mine), Counter()))
            formats = ((m.get("adopted") or {}).get("formats") or {}).get(split)
            if formats is not None:  # an adopted set's images, recounted by format
                problems += check_format_counts(split, formats, sum((r.formats for r in mine), Counter()))
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


def _run_shards(data, jobs, classes, deep, workers, progress, adopted=None) -> list[ShardResult]:
    """Audit every (split, entry) job, in parallel when workers > 1; results in job order."""
    total = sum(e["bytes"] for _, e in jobs)
    results: list[ShardResult | None] = [None] * len(jobs)
    with tqdm(total=total, desc="audit", unit="B", unit_scale=True, unit_divisor=1024, disable=not progress,
              dynamic_ncols=True, smoothing=0.05) as bar:
        for i, result in run_jobs(audit_shard, [(data, split, entry, classes, deep, adopted) for split, entry in jobs],
                                  workers=workers):
            results[i] = result
            bar.update(jobs[i][1]["bytes"])
    return results


__all__ = ["AuditError", "AuditReport", "Problem", "audit", "load_manifest"]
