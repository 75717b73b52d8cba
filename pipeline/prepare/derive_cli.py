"""`prepare-shards derive SRC --pixels yuv420 --max-side 400 --out DST`: the pixel form of a JPEG shard set
(prepare/derive.py; docs/prepare.md, "Pixel shards")."""

from __future__ import annotations

import argparse
import sys

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.console import WORKERS_RULE, OneLineParser, worker_count
from imagenet_shards.pipeline.format import pixels


def build_derive_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="prepare-shards derive",
        description="Derive the pixel form of a JPEG shard set prepare-shards wrote: one shard per source shard, "
                    "same names, keys, labels, splits and order, each image stored as decoded YUV 4:2:0 planes "
                    "(KEY.yuv420; docs/format.md, 'Pixel form') resized so its longer side is at most --max-side. "
                    "Resumable and byte-reproducible like prepare (rerun the same command; --part I/N on several "
                    "machines, then `prepare-shards finalize OUT`). Exit codes: 0 done, 2 could not run.")
    p.add_argument("src", metavar="SRC", help="folder or URL of the JPEG shard set (its manifest.json)")
    p.add_argument("--out", required=True, metavar="OUT", help="output folder or URL (s3://, gs://, ...)")
    p.add_argument("--pixels", default=pixels.FORM, choices=[pixels.FORM], help="the pixel form (default yuv420)")
    p.add_argument("--max-side", type=int, default=400, metavar="N",
                   help="longer side of the stored images at most N px; never upscales (default 400)")
    p.add_argument("--staging", metavar="DIR", help="local folder where shards are built before upload (URL --out)")
    p.add_argument("--workers", type=worker_count, default=None, metavar="N",
                   help=f"worker processes (default: all cores; {WORKERS_RULE})")
    p.add_argument("--part", metavar="I/N|auto", default=None, help="derive only part I of N (as prepare-shards)")
    p.add_argument("--no-verify", action="store_true", help="on resume, trust existing shards by size")
    storage.add_storage_option(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return p


def derive_main(argv: list[str], print_summary, fail) -> int:
    """`prepare-shards derive`: 0 done, 2 could not run (one line on stderr). `print_summary(summary, args)`
    and `fail(error)` are prepare-shards' own (cli.py), so the commands end alike."""
    from imagenet_shards.pipeline.prepare.derive import derive
    from imagenet_shards.pipeline.prepare.errors import PrepareError
    from imagenet_shards.pipeline.prepare.parts import parse_part

    args = build_derive_parser().parse_args(argv)
    from imagenet_shards.pipeline.prepare import encoders
    if encoders._yuv420 is None and not args.quiet:
        print("note: the _jpegtran extension (with its pixel encoder) is not built, so derive encodes with numpy: "
              "the same bytes, ~0.4-1.7 ms more per image; imagenet-shards-doctor says how to build it",
              file=sys.stderr)
    try:
        for url in (args.src, args.out):
            storage.apply_storage_options(url, args.storage_option)
        summary = derive(args.src, out=args.out, form=args.pixels, max_side=args.max_side, workers=args.workers,
                         part=parse_part(args.part), verify_existing=not args.no_verify, progress=not args.quiet,
                         staging=args.staging)
    except (PrepareError, OSError, ValueError) as e:
        return fail(e)
    return print_summary(summary, args)
