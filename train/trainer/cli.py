"""`train-imagenet`: train a torchvision classifier on a prepare-shards output (see docs/training.md).

Single process:  train-imagenet --data DATA --out RUN_DIR [options]
DDP:             torchrun --nproc_per_node=8 -m imagenet_shards.train --data DATA --out RUN_DIR [options]
URLs: only --data takes a URL (s3://, gs://, http(s)://, ...). --out, --cache-dir, --weights and
--resume PATH are local paths; a URL there is refused (exit 2) rather than taken as a folder name.
Exit codes: 0 done, 2 the run could not start or continue (the message says why).
"""

from __future__ import annotations

import argparse
import os
import sys

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.console import OneLineParser
from imagenet_shards.train.loader import decode
from imagenet_shards.train.trainer.config import DEFAULT_WARMUP_EPOCHS
from imagenet_shards.train.trainer.schedule import SCHEDULES

# The loader's augmentation table is the one list of names (None there is "none" here).
AUG_CHOICES = decode.AUG_NAMES  # the one list, owned by the decoder


def _ramp(text: str) -> tuple[int, int]:
    """'a,b' -> (a, b) for --ramp-epochs."""
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two epochs 'a,b', got {text!r}") from None
    if not 0 <= a <= b:
        raise argparse.ArgumentTypeError(f"expected 0 <= a <= b, got {text!r}")
    return a, b


def _positive_int(text: str) -> int:
    """A positive integer flag value."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The train-imagenet argument parser (dests match TrainConfig's fields)."""
    p = OneLineParser(prog="train-imagenet", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data and run")
    g.add_argument("--data", help="prepare-shards output (holds manifest.json): a directory or a URL, "
                                  "s3://bucket/prefix, gs://..., https://host/path")
    g.add_argument("--out", required=True, metavar="RUN_DIR",
                   help="run directory: metrics.jsonl, checkpoints, profile (a local path, not a URL)")
    g.add_argument("--workers", type=int, default=None,
                   help="loader worker processes per rank (default: the node's usable cores / ranks on the "
                        "node, less 1 for the training thread and, on CUDA, 1 for the pin-memory thread; "
                        "printed at start)")
    g.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    g.add_argument("--dist-backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="process-group backend under torchrun (default: NCCL on CUDA, gloo on the CPU); gloo on "
                        "CUDA lets several ranks share one GPU (slow: for tests)")
    g.add_argument("--seed", type=int, default=0, help="seeds the data order, augmentation and init")
    g.add_argument("--resume", metavar="auto|PATH",
                   help="continue from a checkpoint (a local path); auto = RUN_DIR/checkpoint-latest.pt if it exists")
    g.add_argument("--stop-after-epochs", type=_positive_int, metavar="N",
                   help="stop after N epochs in this invocation (the schedule still spans --epochs); "
                        "continue later with --resume auto")
    g.add_argument("--eval-only", action="store_true", help="evaluate --weights or --resume and exit")
    g.add_argument("--weights", metavar="FILE",
                   help="initial weights: a state dict or one of our checkpoints (a local path)")
    g.add_argument("--synthetic-data", action="store_true",
                   help="train on device-resident random batches: the model-only img/s ceiling "
                        "(writes RUN_DIR/synthetic.json, no checkpoints)")
    g.add_argument("--measure-ceiling", type=int, default=0, metavar="STEPS",
                   help="after training, run STEPS synthetic steps and print loader efficiency")
    g.add_argument("--gpu-decode", action="store_true", help="decode JPEGs on the GPU (nvJPEG); needs CUDA")
    g.add_argument("--profile", type=int, default=0, metavar="STEPS",
                   help="torch.profiler trace of STEPS steps of the first epoch -> RUN_DIR/profile/")
    g.add_argument("--limit-batches", type=_positive_int, metavar="N",
                   help="at most N train steps per epoch (quick checks; schedules use N)")
    g.add_argument("--log-interval", type=_positive_int, default=50, metavar="STEPS",
                   help="steps between metrics.jsonl train records (default 50)")
    g.add_argument("--cache-dir", metavar="DIR",
                   help="keep local copies of remote shards in this local folder (LRU; multi-epoch training "
                        "from a bucket)")
    g.add_argument("--cache-size", type=storage.positive_size, metavar="SIZE",
                   help="cap of --cache-dir, e.g. 200GB (default: 90%% of that disk)")
    storage.add_storage_option(g)

    g = p.add_argument_group("model and optimizer")
    g.add_argument("--arch", default="resnet50", help="torchvision model name (default resnet50)")
    g.add_argument("--epochs", type=_positive_int, default=16, help="default 16")
    g.add_argument("--batch-size", type=_positive_int, default=256, help="per process (default 256)")
    g.add_argument("--lr", type=float, help="peak lr (default 0.1 x global batch / 256)")
    g.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    g.add_argument("--nesterov", action="store_true")
    g.add_argument("--wd", type=float, default=5e-5, help="weight decay (default 5e-5)")
    g.add_argument("--no-bn-wd", action="store_true", help="no weight decay on normalization layers")
    g.add_argument("--label-smoothing", type=float, default=0.1, help="default 0.1")
    g.add_argument("--schedule", choices=SCHEDULES, default="cosine", help="after warmup (per iteration)")
    g.add_argument("--warmup-epochs", type=float, default=None, metavar="W",
                   help=f"linear lr warmup from lr/steps to lr over W epochs (may be fractional; 0: none). "
                        f"Default {DEFAULT_WARMUP_EPOCHS:g}, or a quarter of --epochs when that is shorter: the "
                        f"default lr follows the linear scaling rule (0.8 at global batch 2048), which needs a warmup")
    g.add_argument("--ema", type=float, metavar="DECAY", help="keep and evaluate an EMA of the weights")
    g.add_argument("--sync-bn", action="store_true", help="SyncBatchNorm under DDP")
    g.add_argument("--amp", choices=("bf16", "fp16", "none"), default="bf16",
                   help="bf16 autocast, fp16 autocast + GradScaler, or fp32 (default bf16)")
    g.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None,
                   help="channels_last memory format (default: on with CUDA, off on the CPU)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (dynamic=False: one graph per train resolution)")

    g = p.add_argument_group("resolution and augmentation")
    g.add_argument("--res", type=_positive_int, default=176, help="train resolution (start of the ramp; default 176)")
    g.add_argument("--end-res", type=_positive_int, help="progressive resizing: final train resolution")
    g.add_argument("--ramp-epochs", type=_ramp, metavar="A,B",
                   help="ramp from --res at epoch A to --end-res at epoch B (default 70%%,85%% of --epochs)")
    g.add_argument("--val-res", type=_positive_int, default=256, help="val resize, shorter side (default 256)")
    g.add_argument("--val-crop", type=_positive_int, default=224, help="val center crop (default 224)")
    g.add_argument("--aug", choices=AUG_CHOICES, default="none",
                   help="CPU-side policy applied by the loader workers: ra RandAugment, ta TrivialAugment, "
                        "aa AutoAugment, jitter ColorJitter (not with --gpu-decode)")
    g.add_argument("--mixup", type=float, default=0.0, metavar="ALPHA")
    g.add_argument("--cutmix", type=float, default=0.0, metavar="ALPHA")
    g.add_argument("--random-erase", type=float, default=0.0, metavar="P")
    return p


def main(argv: list[str] | None = None) -> int:
    """train-imagenet: parse, train, and turn a TrainError into one `error:` line and exit code 2."""
    args = build_parser().parse_args(argv)
    from imagenet_shards.train.trainer.distributed import shutdown_distributed
    from imagenet_shards.train.trainer.config import TrainConfig, TrainError
    from imagenet_shards.train.trainer.run import train
    try:
        train(TrainConfig(**vars(args)))
    except TrainError as e:
        rank, world = os.environ.get("RANK", "0"), int(os.environ.get("WORLD_SIZE", "1"))
        print(f"{f'[rank {rank}] ' if world > 1 else ''}error: {storage.redact(e)}", file=sys.stderr, flush=True)
        return 2
    finally:
        shutdown_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
