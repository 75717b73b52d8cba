"""`prepare-shards`: ILSVRC2012 archives -> validated, shuffled, labeled WebDataset shards + manifests.

    prepare-shards --train ILSVRC2012_img_train.tar --val ILSVRC2012_img_val.tar \\
                   --devkit ILSVRC2012_devkit_t12.tar.gz --out /data/imagenet-shards
    prepare-shards ... --out s3://bucket/imagenet-shards   # any fsspec URL: staged locally, uploaded
    prepare-shards finalize OUT      # assemble the manifest after multi-machine --part runs
    prepare-shards adopt SRC [--out DIR]   # take over an existing WebDataset ImageNet shard set
    prepare-shards derive SRC --pixels yuv420 --max-side 400 --out DST   # the pixel form of a shard set
    prepare-shards ... --pixels yuv420 --max-side 400 --out DST   # the pixel form, straight from the sources

Exit codes: 0 done (rejected images are listed in the manifest, not an error), 2 could not run.
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import sys
import textwrap

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.console import WORKERS_RULE, OneLineParser, worker_count
from imagenet_shards.pipeline.interrupts import run_cli

_EPILOG = "\n\n".join(textwrap.fill(paragraph, 100) for paragraph in (
    "Sources: --train takes the original tar of per-class tars, a directory of nXXXXXXXX.tar, or an ImageFolder "
    "tree; --val takes ILSVRC2012_img_val.tar or a flat directory (labels from --devkit or --val-labels) or an "
    "ImageFolder tree. Both also take the Hugging Face ILSVRC/imagenet-1k files, .tar.gz or parquet, repeated or "
    "as a quoted glob (--train 'data/train-*.parquet'); their labels travel with the images (no --devkit). "
    "--test takes the unlabeled test images (and adds the test split); their .cls is -1. --train also takes the full "
    "ImageNet releases, fall11_whole.tar and winter21_whole.tar.gz (read once, in order). Nothing is extracted. "
    "Labels = index of the WNID in the label space (--label-space; sorted WNIDs, as torchvision/timm). "
    "Rerunning the same command resumes; see docs/prepare.md.",
    "Several machines: run the same command with --part I/N on each (or --part auto in a Slurm array, a Kubernetes "
    "Indexed Job or under torchrun: docs/prepare.md has the sbatch script); the last part to finish writes the manifest. `prepare-shards finalize OUT` assembles "
    "manifest.json, _info.json and the wids indexes once every part is done, e.g. when the last part ran "
    "elsewhere or was interrupted (see `prepare-shards finalize --help`).",
    "Exit codes: 0 done (rejected images are listed in the manifest, not an error), 2 could not run."))


def build_parser() -> argparse.ArgumentParser:
    # Long (~90 lines) because it is the flat list of prepare-shards' flags in --help order, one
    # add_argument each; the logic lives in config.py and run.py.
    p = OneLineParser(
        prog="prepare-shards", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="\n\n".join(__doc__.split("\n\n")[:2]),
        epilog=_EPILOG)
    src = p.add_argument_group("sources")
    src.add_argument("--train", metavar="SRC", action="append", help="train source (repeatable; a quoted glob is expanded)")
    src.add_argument("--val", metavar="SRC", action="append", help="val source (repeatable; a quoted glob is expanded)")
    src.add_argument("--test", metavar="SRC", action="append",
                     help="test source, unlabeled; adds the test split unless --splits says otherwise (repeatable; "
                          "a quoted glob is expanded)")
    src.add_argument("--devkit", metavar="TGZ", help="ILSVRC2012_devkit_t12.tar.gz (or its extracted folder): val labels")
    src.add_argument("--val-labels", metavar="CSV", help="Kaggle LOC_val_solution.csv: val labels")
    p.add_argument("--out", required=True, metavar="OUT",
                   help="output directory, or a URL (s3://bucket/prefix, gs://..., any fsspec URL you can write "
                        "to; http(s):// is read-only and refused)")
    p.add_argument("--staging", metavar="DIR",
                   help="local folder for scratch files (a URL is refused): for a URL --out, where shards are built "
                        "before upload (default: a temp folder; needs about workers x shard size); for sources read "
                        "in order (.tar.gz, parquet), where their images are spilled before the shards are built "
                        "(default: OUT/_prepare; one pass: about the size of the shards; docs/prepare.md)")
    storage.add_storage_option(p)
    img = p.add_argument_group("images")
    img.add_argument("--resize", default="longer:500",
                     help="longer:N | shorter:N | none; never upscales (default longer:500; with --pixels, "
                          "--max-side instead)")
    img.add_argument("--quality", type=int, default=90, help="JPEG quality of re-encoded images (default 90)")
    img.add_argument("--pixels", choices=("yuv420",), default=None,
                     help="store each image decoded, as YUV 4:2:0 planes (KEY.yuv420; docs/format.md, 'Pixel form'), "
                          "in the same one decode that validates it: the set `prepare-shards derive` makes from a "
                          "JPEG set, straight from the sources (default: JPEGs)")
    img.add_argument("--max-side", type=int, default=None, metavar="N",
                     help="with --pixels: longer side at most N pixels, never upscaled (default 400)")
    img.add_argument("--max-pixels", type=int, default=89_478_485,
                     help="reject images with more pixels (decompression-bomb guard; default PIL's 89478485)")
    img.add_argument("--exif-transpose", action="store_true",
                     help="apply EXIF orientation (default: keep pixels as torchvision/PIL loading sees them)")
    img.add_argument("--no-restart-markers", dest="restart_markers", action="store_false",
                     help="store pass-through JPEGs byte for byte and re-encode without restart markers "
                          "(default: restart markers on a grid of ~32 px cells in every stored JPEG, pass-through "
                          "ones rewritten losslessly, so the loader decodes only the cells around a crop)")
    sh = p.add_argument_group("shards")
    sz = sh.add_mutually_exclusive_group()
    sz.add_argument("--shard-samples", type=int, default=None, help="samples per shard (default 1000)")
    sz.add_argument("--shard-bytes", type=storage.positive_size, default=None,
                    help="target shard size, e.g. 256MB (cut by source sizes)")
    sh.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    sh.add_argument("--splits", default=None,
                    help="which splits to build: train, val, test (default train,val; train,val,test with --test); "
                         "each must end with at least one sample")
    sh.add_argument("--allow-partial-val", action="store_true",
                    help="build val from a source that holds other images than the devkit's ground truth lists "
                         "(default: an error; recorded in the manifest)")
    sub = p.add_argument_group("subsets (reproducible with --seed; recorded in the manifest; docs/prepare.md)")
    sub.add_argument("--classes", metavar="N|FILE",
                     help="keep N classes drawn with --seed, or those of FILE (one WNID a line, # comments); "
                          "applies to train and val; labels become the index among the kept WNIDs, sorted")
    pick = sub.add_mutually_exclusive_group()
    pick.add_argument("--per-class", type=int, metavar="N", help="keep N train images per class, drawn with --seed")
    pick.add_argument("--fraction", type=float, metavar="F",
                      help="keep a fraction F of each train class (rounded, at least 1), drawn with --seed")
    pick.add_argument("--train-list", metavar="FILE",
                      help="keep the train images FILE names, one a line (n01440764_10026.JPEG or "
                           "n01440764/n01440764_10026.JPEG, e.g. the 1%% / 10%% semi-supervised lists)")
    lab = p.add_argument_group("labels (docs/prepare.md, manifests/label-spaces)")
    lab.add_argument("--label-space", metavar="NAME|FILE",
                     help="the class list .cls indexes: imagenet-1k, imagenet-22k, imagenet-12k, imagenet-21k-goog, "
                          "imagenet-21k-miil, imagenet-21k-miil-w21, present (the sources' WNIDs, sorted), or a FILE "
                          "of WNIDs, one a line, in label order; images of other classes are left out and counted "
                          "(excluded_by_label_space). Default: the sources' sorted WNIDs for the ILSVRC2012 archives "
                          "(= imagenet-1k), imagenet-22k for a full release (fall11, winter21; a WNID outside it "
                          "is an error, see --skip-unknown-wnids)")
    lab.add_argument("--skip-unknown-wnids", action="store_true",
                     help="for a full release (fall11, winter21) without --label-space: leave out the images of "
                          "WNIDs outside imagenet-22k, each listed in the manifest as skipped (unknown_wnid) "
                          "(default: such a WNID is an error naming it)")
    lab.add_argument("--holdout-per-class", type=int, metavar="K",
                     help="write a val split of K train images per class (classes with more than K), drawn with "
                          "--seed and recorded; nested for growing K; no image in both (timm's 12k: 40)")
    run = p.add_argument_group("running")
    run.add_argument("--workers", type=worker_count, default=None, metavar="N",
                     help=f"worker processes (default: all cores; {WORKERS_RULE})")
    run.add_argument("--part", metavar="I/N|auto", default=None,
                     help="build only part I of N (multi-machine); auto: from the Slurm array "
                          "(SLURM_ARRAY_TASK_ID/COUNT), torchrun (RANK/WORLD_SIZE), or a Kubernetes Indexed Job "
                          "(JOB_COMPLETION_INDEX, with auto/N: N = the Job's completions); default: from a Slurm "
                          "array or RANK/WORLD_SIZE when present")
    run.add_argument("--overwrite", action="store_true", help="replace shards from a run with another config")
    run.add_argument("--no-verify", action="store_true",
                     help="on resume, trust existing shards by size (skip re-hashing them); for a URL --out, "
                          "also check uploads by size only (for stores whose ETags are not md5s, e.g. SSE-KMS)")
    run.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return p


def build_finalize_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="prepare-shards finalize",
                      description="Assemble manifest.json, _info.json and the wids indexes once all "
                                  "--part runs are done (says which are missing otherwise).")
    p.add_argument("out", metavar="OUT")
    storage.add_storage_option(p)
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return p


def build_adopt_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="prepare-shards adopt",
        description="Adopt an existing WebDataset ImageNet-1k shard set (e.g. timm's imagenet-1k-wds: _info.json + "
                    "imagenet1k-{train,validation}-NNNN.tar of .jpg/.cls/.json samples) without rewriting it: read "
                    "every shard once, hash it, check every sample and that the labels are sorted-WNID indexes "
                    "(proved by the WNID in each sample's .json, file name or key), then write manifest.json, the "
                    "wids indexes and (if absent) _info.json, so audit-shards, the loader and train-imagenet read "
                    "it. A set that is not intact or whose labels break the convention is refused with one line "
                    "(exit 2) and nothing is written. See docs/prepare.md.")
    p.add_argument("src", metavar="SRC", help="folder or URL (s3://, gs://, https:// with _info.json) of the shards")
    p.add_argument("--out", metavar="DIR", help="write the manifest here instead of beside the shards (needed when SRC "
                                                "is remote or read-only); its shard urls then point at SRC")
    p.add_argument("--trust-labels", action="store_true",
                   help="adopt samples whose label no WNID proves (e.g. val keys without a .json), taking their .cls "
                        "as sorted-WNID indexes on trust (recorded in the manifest)")
    p.add_argument("--deep", action="store_true",
                   help="fully decode every image (default: read each image's header only)")
    p.add_argument("--exclude-bad", action="store_true",
                   help="leave out samples whose image nothing decodes (each recorded in the manifest with its "
                        "reason; audit-shards and the loader pass over them) instead of refusing the set")
    p.add_argument("--workers", type=worker_count, default=None, metavar="N",
                   help=f"worker processes (default: all cores; {WORKERS_RULE})")
    storage.add_storage_option(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument("--json", action="store_true", help="print the summary (or the problems found) as one JSON object")
    return p


def adopt_main(argv: list[str]) -> int:
    """`prepare-shards adopt`: 0 adopted, 2 refused or could not run (one line on stderr)."""
    from imagenet_shards.pipeline.prepare.adopt import AdoptError, adopt, summary_text

    args = build_adopt_parser().parse_args(argv)
    try:
        for url in (args.src, args.out):
            if url:
                storage.apply_storage_options(url, args.storage_option)
        summary = adopt(args.src, out=args.out, trust_labels=args.trust_labels, deep=args.deep,
                        exclude_bad=args.exclude_bad, workers=args.workers, progress=not args.quiet)
    except (AdoptError, OSError, ValueError) as e:
        if args.json:
            print(json.dumps({"adopted": False, "error": one_line(e), "problems": [
                dict(zip(("kind", "shard", "key", "detail"), p)) for p in getattr(e, "problems", [])]}, sort_keys=True))
        return _fail(e)
    return _print_summary(summary, args, summary_text)


def _print_summary(summary: dict, args, as_text) -> int:
    """The end of a successful command: the summary as one JSON object, as text, or (--quiet) nothing."""
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    elif not args.quiet:
        print(as_text(summary))
    return 0


def format_summary(s: dict) -> str:
    """The human-readable summary of a prepare or finalize run."""
    lines = []
    if s.get("complete"):
        lines.append(f"{s.get('command', 'prepare-shards')}: {s['samples']:,} samples in {s['shards']} shards "
                     f"({storage.human_bytes(s['bytes'])}) -> {s['out']}")
        if "label_space" in s:  # .cls = the index in this table (a full release: its published space by default)
            lines.append(f"  labels: {s['label_space']['name']} ({s['label_space']['num_classes']:,} classes)")
        for split, v in s["splits"].items():
            lines.append(f"  {split:5s}: {v['images_in']:,} in = {v['samples']:,} samples + {v['rejected']} rejected"
                         f" + {v['skipped']} skipped (non-images)"
                         + (f" + {v['excluded_by_subset']:,} left out by the subset" if "excluded_by_subset" in v else "")
                         + (f" + {v['excluded_by_label_space']:,} outside the label space"
                            if "excluded_by_label_space" in v else "")
                         + (f" + {v['held_out']:,} held out as val" if "held_out" in v else "")
                         + (" (held out from train)" if "held_out_from" in v else ""))
            if v.get("short_classes"):  # drawn images that were rejected are not replaced by others
                lines.append(f"  {split}: " + short_classes_text(v["short_classes"]))
        if n := s["rejected_by_reason"].get("unknown_wnid"):
            lines.append(f"  skipped also: {n:,} image{'s' * (n != 1)} of WNIDs outside the label space "
                         "(--skip-unknown-wnids), each listed in the manifest")
        if s["rejected_by_reason"]:
            lines.append("  rejected/skipped by reason: " + ", ".join(
                f"{k} {v}" for k, v in sorted(s["rejected_by_reason"].items())))
        if s["fixed_by_kind"]:
            lines.append("  fixed: " + ", ".join(f"{k} {v}" for k, v in sorted(s["fixed_by_kind"].items())))
    else:
        lines.append(f"{s.get('command', 'prepare-shards')}: part {s['part']} done; {s['shards_missing']} shards of other parts are "
                     f"still missing (parts {', '.join(map(str, s['parts_missing']))}); "
                     f"run `prepare-shards finalize {s['out']}` when all parts are done")
    if "shards_built" in s:
        lines.append(f"  this run: built {s['shards_built']} shards, reused {s['shards_reused']} verified ones, "
                     f"{s['images_processed']:,} images at {s['images_per_s']:,.0f} img/s, wall {s['wall_s']:.1f} s")
    return "\n".join(lines)


def short_classes_text(short: dict, most: int = 5) -> str:
    """The classes a draw left short, as the summary names them: `n01440764 8 of 9 (truncated 1)`."""
    items = sorted(short.items())
    named = ", ".join(f"{w} {c['samples']} of {c['drawn']} ({', '.join(f'{r} {n}' for r, n in c['reasons'].items())})"
                      for w, c in items[:most])
    more = f" and {len(items) - most} more (manifest: short_classes)" if len(items) > most else ""
    return f"{len(items)} class{'es' * (len(items) != 1)} short of what was drawn: {named}{more}"


def one_line(error) -> str:
    """An error message on one line, credentials redacted: library messages (tarfile's, for one) can
    span several lines, and every error this command prints is one line."""
    return " ".join(storage.redact(error).split())


def _fail(error) -> int:
    print(f"error: {one_line(error)}", file=sys.stderr)
    return 2


def expand_sources(values: list[str] | None):
    """One --train/--val/--test value as given, or several files: repeated flags, and quoted globs
    expanded (sorted) where no file has that literal name. ValueError if a glob matches nothing."""
    if not values:
        return None
    out = []
    for value in values:
        if glob.has_magic(value) and not os.path.exists(value) and "://" not in value:
            found = sorted(glob.glob(value))
            if not found:
                raise ValueError(f"no file matches {value!r}")
            out += found
        else:
            out.append(value)
    return out[0] if len(out) == 1 else out


def splits_option(args) -> tuple[str, ...]:
    """The splits to build: --splits, else train and val, and test when --test names its source (giving
    a source asks for its split). A source whose split an explicit --splits leaves out is not read:
    said in one line on stderr."""
    if args.splits is None:
        return ("train", "val", "test") if args.test else ("train", "val")
    splits = tuple(s.strip() for s in args.splits.split(",") if s.strip())
    unread = [f"--{name}" for name in ("train", "val", "test") if getattr(args, name) and name not in splits]
    if unread and not args.quiet:
        print(f"note: {', '.join(unread)} not read: --splits {args.splits} leaves "
              f"{'that split' if len(unread) == 1 else 'those splits'} out", file=sys.stderr)
    return splits


def given_options(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The dests of the flags `argv` gives (abbreviated or not), whatever their values: the parse again
    with every default suppressed."""
    quiet = copy.deepcopy(parser)
    for action in quiet._actions:
        action.default = argparse.SUPPRESS
    return set(vars(quiet.parse_args(argv)))


def image_options(args, given: set[str]) -> dict:
    """Config's resize, quality, restart_markers and pixels from the flags (`given`: given_options); ValueError
    (one line) for a flag of the JPEG form given with --pixels, or --max-side without it."""
    if args.pixels is None:
        if args.max_side is not None:
            raise ValueError("--max-side bounds the stored planes of --pixels; for JPEGs use --resize longer:N")
        return {"resize": args.resize, "quality": args.quality, "restart_markers": args.restart_markers}
    jpeg_only = [f for f, dest in (("--resize", "resize"), ("--quality", "quality"),
                                   ("--no-restart-markers", "restart_markers")) if dest in given]
    if jpeg_only:
        raise ValueError(f"{' and '.join(jpeg_only)} set how JPEGs are stored: --pixels {args.pixels} stores none "
                         "(its size is --max-side N, default 400); drop them")
    max_side = 400 if args.max_side is None else args.max_side
    if max_side < 1:
        raise ValueError(f"--max-side must be a positive number of pixels, got {max_side}")
    return {"resize": f"longer:{max_side}", "pixels": args.pixels}


def main(argv=None) -> int:
    """prepare-shards: 0 done, 2 could not run (one line), 130/143 interrupted by SIGINT/SIGTERM
    (one line; the rerun resumes)."""
    return run_cli(lambda: _main(argv))


def _main(argv=None) -> int:
    # imported here so that --help answers without loading the imaging stack
    from imagenet_shards.pipeline.prepare.config import Config
    from imagenet_shards.pipeline.prepare.run import PrepareError, finalize, parse_part, prepare, summarize
    from imagenet_shards.pipeline.prepare.subset import classes_option, read_train_list
    from imagenet_shards.pipeline.format.label_spaces import label_space_option

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["adopt"]:
        return adopt_main(argv[1:])
    if argv[:1] == ["derive"]:
        from imagenet_shards.pipeline.prepare.derive_cli import derive_main
        return derive_main(argv[1:], lambda s, a: _print_summary(s, a, format_summary), _fail)
    if argv[:1] == ["finalize"]:
        args = build_finalize_parser().parse_args(argv[1:])
        try:
            storage.apply_storage_options(args.out, args.storage_option)
            summary = {"out": storage.redact(args.out), **summarize(finalize(args.out))}
        except (PrepareError, OSError, ValueError) as e:
            return _fail(e)
        print(json.dumps(summary, sort_keys=True) if args.json else format_summary(summary))
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = Config(**image_options(args, given_options(parser, argv)), seed=args.seed, max_pixels=args.max_pixels,
                        exif_transpose=args.exif_transpose,
                        splits=splits_option(args),
                        shard_bytes=args.shard_bytes,
                        shard_samples=None if args.shard_bytes else
                        (1000 if args.shard_samples is None else args.shard_samples),
                        classes=None if args.classes is None else classes_option(args.classes),
                        per_class=args.per_class, fraction=args.fraction, allow_partial_val=args.allow_partial_val,
                        train_list=None if args.train_list is None else read_train_list(args.train_list),
                        label_space=None if args.label_space is None else label_space_option(args.label_space),
                        holdout_per_class=args.holdout_per_class, skip_unknown_wnids=args.skip_unknown_wnids)
        storage.apply_storage_options(args.out, args.storage_option)
        if config.pixels is None and config.restart_markers and not args.quiet:
            from imagenet_shards.pipeline.prepare import images
            if images._jpegtran is None:
                print("note: the _jpegtran extension is not built, so pass-through JPEGs are stored byte for byte, "
                      "without restart markers (the loader reads them, only slower); reinstall with the "
                      "libjpeg headers present (apt-get install libjpeg-dev) to get them", file=sys.stderr)
        summary = prepare(out=args.out, train=expand_sources(args.train), val=expand_sources(args.val),
                          test=expand_sources(args.test), devkit=args.devkit,
                          val_labels=args.val_labels, config=config, workers=args.workers,
                          part=parse_part(args.part), overwrite=args.overwrite,
                          verify_existing=not args.no_verify, progress=not args.quiet, staging=args.staging)
    except (PrepareError, OSError, ValueError) as e:  # ValueError: ConfigError, a bad --storage-option
        return _fail(e)
    return _print_summary(summary, args, format_summary)


if __name__ == "__main__":
    sys.exit(main())
