"""`prepare-shards`: ILSVRC2012 archives -> validated, shuffled, labeled WebDataset shards + manifests.

    prepare-shards --train ILSVRC2012_img_train.tar --val ILSVRC2012_img_val.tar \\
                   --devkit ILSVRC2012_devkit_t12.tar.gz --out /data/imagenet-shards
    prepare-shards ... --out s3://bucket/imagenet-shards   # any fsspec URL: staged locally, uploaded
    prepare-shards finalize OUT      # only after multi-machine --part runs

Exit codes: 0 done (rejected images are listed in the manifest, not an error), 2 could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from imagenet_shards.pipeline import storage

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="prepare-shards", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n")[0],
        epilog="Sources: --train takes the original tar of per-class tars, a directory of nXXXXXXXX.tar, or an "
               "ImageFolder tree; --val takes ILSVRC2012_img_val.tar or a flat directory (labels from --devkit or "
               "--val-labels) or an ImageFolder tree. Nothing is extracted. Labels = index of the WNID in sorted "
               "order (torchvision/timm). Rerunning the same command resumes; see docs/prepare.md.")
    src = p.add_argument_group("sources")
    src.add_argument("--train", metavar="SRC", help="train source")
    src.add_argument("--val", metavar="SRC", help="val source")
    src.add_argument("--devkit", metavar="TGZ", help="ILSVRC2012_devkit_t12.tar.gz (or its extracted folder): val labels")
    src.add_argument("--val-labels", metavar="CSV", help="Kaggle LOC_val_solution.csv: val labels")
    p.add_argument("--out", required=True, metavar="OUT",
                   help="output directory, or a URL (s3://bucket/prefix, gs://..., any fsspec URL)")
    p.add_argument("--staging", metavar="DIR",
                   help="for a URL --out: local folder where shards are built before upload "
                        "(default: a temp folder; needs about workers x shard size)")
    storage.add_storage_option(p)
    img = p.add_argument_group("images")
    img.add_argument("--resize", default="longer:500",
                     help="longer:N | shorter:N | none; never upscales (default longer:500)")
    img.add_argument("--quality", type=int, default=90, help="JPEG quality of re-encoded images (default 90)")
    img.add_argument("--max-pixels", type=int, default=89_478_485,
                     help="reject images with more pixels (decompression-bomb guard; default PIL's 89478485)")
    img.add_argument("--exif-transpose", action="store_true",
                     help="apply EXIF orientation (default: keep pixels as torchvision/PIL loading sees them)")
    sh = p.add_argument_group("shards")
    sz = sh.add_mutually_exclusive_group()
    sz.add_argument("--shard-samples", type=int, default=None, help="samples per shard (default 1000)")
    sz.add_argument("--shard-bytes", type=storage.positive_size, default=None,
                    help="target shard size, e.g. 256MB (cut by source sizes)")
    sh.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    sh.add_argument("--splits", default="train,val", help="which splits to build (default train,val)")
    run = p.add_argument_group("running")
    run.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    run.add_argument("--part", metavar="I/N", default=None,
                     help="build only part I of N (multi-machine); default from RANK/WORLD_SIZE or a Slurm array")
    run.add_argument("--overwrite", action="store_true", help="replace shards from a run with another config")
    run.add_argument("--no-verify", action="store_true",
                     help="on resume, trust existing shards by size (skip re-hashing them); for a URL --out, "
                          "also check uploads by size only (for stores whose ETags are not md5s, e.g. SSE-KMS)")
    run.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return p


def build_finalize_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="prepare-shards finalize",
                                description="Assemble manifest.json, _info.json and the wids indexes once all "
                                            "--part runs are done (says which are missing otherwise).")
    p.add_argument("out", metavar="OUT")
    storage.add_storage_option(p)
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return p



def format_summary(s: dict) -> str:
    lines = []
    if s.get("complete"):
        lines.append(f"prepare-shards: {s['samples']:,} samples in {s['shards']} shards "
                     f"({storage.human_bytes(s['bytes'])}) -> {s['out']}")
        for split, v in s["splits"].items():
            lines.append(f"  {split:5s}: {v['images_in']:,} in = {v['samples']:,} samples + {v['rejected']} rejected"
                         f" + {v['skipped']} skipped (non-images)")
        if s["rejected_by_reason"]:
            lines.append("  rejected/skipped by reason: " + ", ".join(
                f"{k} {v}" for k, v in sorted(s["rejected_by_reason"].items())))
        if s["fixed_by_kind"]:
            lines.append("  fixed: " + ", ".join(f"{k} {v}" for k, v in sorted(s["fixed_by_kind"].items())))
    else:
        lines.append(f"prepare-shards: part {s['part']} done; {s['shards_missing']} shards of other parts are "
                     f"still missing (parts {', '.join(map(str, s['parts_missing']))}); "
                     f"run `prepare-shards finalize {s['out']}` when all parts are done")
    if "shards_built" in s:
        lines.append(f"  this run: built {s['shards_built']} shards, reused {s['shards_reused']} verified ones, "
                     f"{s['images_processed']:,} images at {s['images_per_s']:,.0f} img/s, wall {s['wall_s']:.1f} s")
    return "\n".join(lines)


def _remove_if_no_shards(out: str) -> None:
    """Leave no partial output behind a run that failed before building any shard."""
    path = storage.local_path(out)
    if path is None:  # a URL: remove the job state we may have written, never the prefix itself
        try:
            try:
                done = storage.listdir(storage.join(out, "_prepare/records"))
            except FileNotFoundError:
                done = []
            if not done:
                storage.remove(storage.join(out, "_prepare"), recursive=True)
        except OSError:
            pass  # cannot reach the store: there is nothing we could have written either
        return
    records = os.path.join(path, "_prepare", "records")
    if os.path.isdir(path) and not (os.path.isdir(records) and os.listdir(records)):
        shutil.rmtree(path, ignore_errors=True)


def _out_exists(out: str) -> bool:
    path = storage.local_path(out)
    if path is not None:
        return os.path.exists(path)
    return storage.exists(storage.join(out, "_prepare/state.json"))


def main(argv=None) -> int:
    from imagenet_shards.pipeline.prepare.run import Config, PrepareError, finalize, parse_part, prepare, _summarize

    redact = storage.redact
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["finalize"]:
        args = build_finalize_parser().parse_args(argv[1:])
        try:
            storage.apply_storage_options(args.out, args.storage_option)
            summary = {"out": redact(args.out), **_summarize(finalize(args.out))}
        except (PrepareError, OSError) as e:
            print(f"error: {redact(e)}", file=sys.stderr)
            return 2
        print(json.dumps(summary, sort_keys=True) if args.json else format_summary(summary))
        return 0
    args = build_parser().parse_args(argv)
    splits = tuple(s for s in ("train", "val") if s in args.splits.split(","))
    unknown = set(args.splits.split(",")) - {"train", "val"}
    if unknown:
        print(f"error: --splits takes train and/or val, got {args.splits}", file=sys.stderr)
        return 2
    config = Config(resize=args.resize, quality=args.quality, seed=args.seed, max_pixels=args.max_pixels,
                    exif_transpose=args.exif_transpose, splits=splits, shard_bytes=args.shard_bytes,
                    shard_samples=None if args.shard_bytes else (args.shard_samples or 1000))
    created = False
    try:
        storage.apply_storage_options(args.out, args.storage_option)
        created = not _out_exists(args.out)
        summary = prepare(out=args.out, train=args.train, val=args.val, devkit=args.devkit,
                          val_labels=args.val_labels, config=config, workers=args.workers,
                          part=parse_part(args.part), overwrite=args.overwrite,
                          verify_existing=not args.no_verify, progress=not args.quiet, staging=args.staging)
    except (PrepareError, OSError) as e:
        if created:
            _remove_if_no_shards(args.out)
        print(f"error: {redact(e)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    elif not args.quiet:
        print(format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
