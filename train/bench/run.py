"""bench-loader: images/s of the shard loader, and (--compare) of the loaders a user would otherwise pick.

Every contender decodes the same JPEG bytes into uint8 [B,3,res,res] batches with the same
RandomResizedCrop + horizontal flip, the same number of DataLoader worker processes and the same
batch size; the first ``--warmup`` batches (worker start-up, buffer fill) are not timed. Pin the
whole run to N cores with ``taskset -c ...`` to get per-core numbers.

The package: ``timing`` (a batch stream's wall clock and process-tree CPU time, the idle wait),
``measure`` (our loader as a stream), ``baselines`` (the loaders users would otherwise pick, in our
environment), ``peers`` + ``peer_*`` (DALI and FFCV as subprocesses in their own environments),
``compare`` (turn-taking rounds, the table's rows), ``report`` (machine, text), this CLI.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.console import WORKERS_RULE, OneLineParser, worker_count
from imagenet_shards.train.bench.compare import compare, form_label
from imagenet_shards.train.bench.measure import measure_loader
from imagenet_shards.train.bench.peers import PEERS_ENV
from imagenet_shards.train.bench.report import machine_info, text_lines
from imagenet_shards.train.loader import decode as dec
from imagenet_shards.train.report.verdict import from_rates
from imagenet_shards.train.trainer.watch.host import usable_cores


def build_parser() -> argparse.ArgumentParser:
    """The ``bench-loader`` command line (every default is stated in its help)."""
    p = OneLineParser(prog="bench-loader", description=__doc__.split("\n\n")[0])
    p.add_argument("data", metavar="DATA", help="shard set directory or URL (holds manifest.json)")
    p.add_argument("--split", default="train",
                   help="split to read (default train: RandomResizedCrop + flip; any other split: centre crops)")
    p.add_argument("--workers", type=worker_count, default=1,
                   help=f"DataLoader worker processes (default 1; {WORKERS_RULE})")
    p.add_argument("--batches", type=int, default=50, help="timed batches per round (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed batches first (default 5; with --compare, rounds after the first skip at "
                        "least 4 x workers + 2: what a loader prefetched while another one ran)")
    p.add_argument("--batch-size", type=int, default=64, help="images per batch (default 64)")
    p.add_argument("--decoder", default="auto", choices=dec.DECODERS,
                   help=f"JPEG decoder of our loader (default auto: {dec.AUTO_DECODER} here)")
    p.add_argument("--res", type=int, default=224, help="output crop size in pixels (default 224)")
    p.add_argument("--dct-scaling", default="auto", choices=dec.DCT_SCALINGS,
                   help="our loader's JPEG crops: auto (1/2, 1/4, 1/8 DCT-domain decode where the crop stays at "
                        "least the output size) or off (always at full size; train-imagenet --dct-scaling); default auto")
    p.add_argument("--rounds", type=int, default=None,
                   help="timed rounds; the median round is reported, and the best beside it "
                        "(default 1, or 3 with --compare: the loaders take turns)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--compare", action="store_true",
                   help="also run ImageFolder, the seed's tarfile dataset, webdataset, DALI and FFCV on the same "
                        "images (train crops; with --split val, everyone's centre crops), and our loader with "
                        "the pil decoder when --decoder is another one; a row that cannot run says "
                        "'not run: <reason>'")
    p.add_argument("--peers", metavar="DIR", default=None,
                   help=f"with --compare: the folder shared/peers/setup.sh built, whose ffcv/ and dali/ environments "
                        f"run the FFCV and DALI rows (default: ${PEERS_ENV}; neither: those rows are not run)")
    p.add_argument("--also-set", metavar="DIR", action="append", default=None,
                   help="with --compare: another shard set of the same images (e.g. the pixel form that "
                        "prepare-shards derive DATA --pixels yuv420 --max-side 400 writes) as a row of its own, "
                        "'imagenet-shards (FORM, MAX_SIDE px)'; repeatable (default: none)")
    p.add_argument("--target-img-s", type=float, default=None, metavar="RATE",
                   help="the rate training needs (e.g. train-imagenet --synthetic-data's steady img/s for your model "
                        "and GPUs): prints whether this loader is the bottleneck and what would fix it "
                        "(default: no verdict)")
    return p


def main(argv=None) -> int:
    """Run ``bench-loader``; 0 on success, 2 when the arguments or the data are unusable."""
    args = build_parser().parse_args(argv)
    if args.rounds is None:
        args.rounds = 3 if args.compare else 1
    if args.workers < 0 or args.batches < 1 or args.warmup < 1 or args.batch_size < 1 or args.rounds < 1:
        print("error: --workers must be >= 0, and --batches, --warmup, --batch-size, --rounds >= 1", file=sys.stderr)
        return 2
    if args.target_img_s is not None and args.target_img_s <= 0:
        print("error: --target-img-s must be a positive rate (images per second)", file=sys.stderr)
        return 2
    if args.peers and not args.compare:
        print("error: --peers only matters with --compare", file=sys.stderr)
        return 2
    if args.also_set and not args.compare:
        print("error: --also-set only matters with --compare", file=sys.stderr)
        return 2
    if args.peers and storage.is_remote(args.peers):
        print(f"error: --peers takes a local path, not a URL ({storage.redact(args.peers)})", file=sys.stderr)
        return 2
    if args.workers == 0:
        torch.set_num_threads(1)  # per-core numbers: no intra-op threads in the main process either
    say = (lambda m: None) if args.json else (lambda m: print(f"[bench-loader] {m}", file=sys.stderr, flush=True))
    common = dict(workers=args.workers, batches=args.batches, batch_size=args.batch_size, decoder=args.decoder,
                  res=args.res, warmup=args.warmup, dct_scaling=args.dct_scaling)
    try:
        if args.compare:
            forms = {}
            for other in args.also_set or ():
                label = form_label(other)
                forms[label if label not in forms else f"{label}, {storage.redact(other)}"] = other
            rows = compare(args.data, rounds=args.rounds, peers=args.peers, progress=say, split=args.split, forms=forms,
                           **common)
            result = {k: rows[0][k] for k in ("images_per_s", "images_per_s_best", "images_per_s_per_worker",
                                              "images_per_cpu_s")}
            result.update(workers=args.workers, batch_size=args.batch_size, res=args.res, split=args.split,
                          decoder=dec.resolve_decoder(args.decoder), rounds=args.rounds, dct_scaling=args.dct_scaling,
                          images=args.rounds * args.batches * args.batch_size, compare=rows)
        else:
            result = measure_loader(args.data, split=args.split, rounds=args.rounds, **common)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        return 2
    result["machine"] = machine_info()
    if args.target_img_s:
        result["verdict"] = from_rates(result["images_per_s"], args.target_img_s, workers=args.workers or 1,
                                       cores=usable_cores(), decoder=result["decoder"]).as_dict()
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print("\n".join(text_lines(result, workers=args.workers, batch_size=args.batch_size, batches=args.batches,
                                   rounds=args.rounds)))
        if "verdict" in result:
            print(result["verdict"]["line"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
