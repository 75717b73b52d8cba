"""audit-shards: prove a shard set is intact and its labels are right.

Exit codes: 0 intact (warnings allowed), 1 problems found (each listed), 2 the audit could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.audit.report import AuditError, AuditReport
from imagenet_shards.pipeline.audit.run import audit
from imagenet_shards.pipeline.console import WORKERS_RULE, OneLineParser, worker_count
from imagenet_shards.pipeline.interrupts import run_cli

MAX_LISTED = 200  # on stdout; --json always has every problem


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="audit-shards",
        description="Check a shard set against its manifest: every shard present with the right size and "
                    "sha256, well-formed tars, complete samples whose labels agree with the class table, "
                    "unique keys, the manifest's counts. Exit 0 intact, 1 problems, 2 could not run.")
    p.add_argument("data", metavar="DATA",
                   help="directory or URL (s3://bucket/prefix, gs://..., https://host/path) holding manifest.json")
    p.add_argument("--deep", action="store_true",
                   help="also decode every image fully (RGB, 8-bit, 3 channels, size as in its json)")
    p.add_argument("--splits", type=lambda s: [x for x in s.split(",") if x], default=None,
                   help="comma-separated splits to audit (default: all in the manifest)")
    p.add_argument("--workers", type=worker_count, default=None, metavar="N",
                   help=f"processes (default: one per CPU; {WORKERS_RULE})")
    p.add_argument("--json", dest="json_out", metavar="REPORT.json",
                   help="also write the full report (every problem with shard, key, kind, detail) here")
    p.add_argument("--expect", metavar="NAME",
                   help="compare with a known dataset: imagenet-1k (class table, totals and class counts), or a "
                        "label space (imagenet-22k, imagenet-12k, imagenet-21k-goog, imagenet-21k-miil, "
                        "imagenet-21k-miil-w21: the class table is the space's, so every .cls is its WNID's index); "
                        "default: the label space the manifest records, its class table only (imagenet-1k's counts "
                        "are checked only when named)")
    p.add_argument("--quiet", action="store_true", help="no progress bar; print only problems and the result")
    storage.add_storage_option(p)
    return p



def _line(p) -> str:
    where = " ".join(x for x in (p.shard, p.key) if x)
    return f"  {p.kind:<24} {where + ': ' if where else ''}{p.detail}"


def format_report(r: AuditReport, quiet: bool = False) -> str:
    """The human summary: what was checked, warnings, problems, a one-line result."""
    out = []
    if not quiet:
        out.append(f"audit-shards {r.data}" + (" (deep: every image decoded)" if r.deep else ""))
        width = max((len(s) for s in r.counts), default=0)
        for split, c in r.counts.items():
            listed = c["shards"] if c["shards"] is not None else "?"
            out.append(f"  {split + ':':<{width + 1}} {c['shards_read']}/{listed} shards read, "
                       f"{c['samples_read']}/{c['samples_manifest']} samples, {c['classes_seen']} classes, "
                       f"{storage.human_bytes(c['bytes_read'], binary=True)}")
        t = r.timing
        out.append(f"  read {storage.human_bytes(t['bytes_read'], binary=True)} in {t['wall_s']:.1f} s"
                   + (f" ({t['mb_per_s']:.0f} MB/s)" if t.get("mb_per_s") else ""))
        out += [f"  note: {n}" for n in r.notes]
        if r.warnings:
            out.append(f"warnings ({len(r.warnings)}):")
            out += [_line(p) for p in r.warnings]
    if r.errors:
        out.append(f"problems ({len(r.errors)}):")
        out += [_line(p) for p in r.errors[:MAX_LISTED]]
        if len(r.errors) > MAX_LISTED:
            out.append(f"  ... and {len(r.errors) - MAX_LISTED} more (write them all with --json REPORT.json)")
        kinds = Counter(p.kind for p in r.errors)
        shards = {p.shard for p in r.errors if p.shard}
        out.append(f"result: NOT INTACT: {len(r.errors)} problem{'s' * (len(r.errors) != 1)} "
                   f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})"
                   + (f" in {len(shards)} file{'s' * (len(shards) != 1)}" if shards else ""))
    else:
        samples = sum(c["samples_read"] for c in r.counts.values())
        shards = sum(c["shards_read"] for c in r.counts.values())
        out.append(f"result: intact: {len(r.counts)} split{'s' * (len(r.counts) != 1)}, {shards} shards, "
                   f"{samples} samples match the manifest"
                   + (", every image decodes" if r.deep else "")
                   + (f" ({len(r.warnings)} warning{'s' * (len(r.warnings) != 1)})" if r.warnings else ""))
    return "\n".join(out)


def main(argv=None) -> int:
    """Ctrl-C or SIGTERM: one line and exit 130/143; an audit writes nothing until it is done."""
    return run_cli(lambda: _main(argv), message="audit-shards: interrupted; nothing was written")


def _main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.json_out and storage.is_remote(args.json_out):  # refused before the audit, not after it
        print(f"audit-shards: error: --json takes a local path, not a URL ({storage.redact(args.json_out)}): "
              "write the report here, then copy it", file=sys.stderr)
        return 2
    args.json_out = args.json_out and storage.local_path(args.json_out)
    try:
        storage.apply_storage_options(args.data, args.storage_option)
        report = audit(args.data, deep=args.deep, splits=args.splits, workers=args.workers, expect=args.expect,
                       progress=not args.quiet)
    except (AuditError, OSError) as e:
        print(f"audit-shards: error: {storage.redact(e)}", file=sys.stderr)
        return 2
    if args.json_out:
        try:
            with open(args.json_out, "w", encoding="utf-8") as f:
                json.dump(report.to_dict(), f, indent=1, sort_keys=True)
                f.write("\n")
        except OSError as e:
            print(f"audit-shards: error: cannot write {args.json_out}: {e.strerror}", file=sys.stderr)
            return 2
    print(format_report(report, quiet=args.quiet))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
