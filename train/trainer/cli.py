"""`train-imagenet`: train a torchvision classifier on a prepare-shards output (see docs/training.md).

Single process:  train-imagenet --data DATA --out RUN_DIR [options]
DDP:             torchrun --nproc_per_node=8 -m train --data DATA --out RUN_DIR [options]
Exit codes: 0 done, 2 the run could not start or continue (the message says why).
"""

from __future__ import annotations

import argparse
import os
import sys

from imagenet_shards.pipeline import storage
from imagenet_shards.train.trainer.schedule import SCHEDULES


def _ramp(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two epochs 'a,b', got {text!r}") from None
    if not 0 <= a <= b:
        raise argparse.ArgumentTypeError(f"expected 0 <= a <= b, got {text!r}")
    return a, b


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="train-imagenet", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data and run")
    g.add_argument("--data", help="prepare-shards output (holds manifest.json): a directory or a URL, "
                                  "s3://bucket/prefix, gs://..., https://host/path")
    g.add_argument("--out", required=True, help="run directory: metrics.jsonl, checkpoints, profile")
    g.add_argument("--workers", type=int, default=8, help="loader worker processes per rank (default 8)")
    g.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    g.add_argument("--seed", type=int, default=0, help="seeds the data order, augmentation and init")
    g.add_argument("--resume", metavar="auto|PATH",
                   help="continue from a checkpoint; auto = RUN_DIR/checkpoint-latest.pt if it exists")
    g.add_argument("--stop-after-epochs", type=_positive_int, metavar="N",
                   help="stop after N epochs in this invocation (the schedule still spans --epochs); "
                        "continue later with --resume auto")
    g.add_argument("--eval-only", action="store_true", help="evaluate --weights or --resume and exit")
    g.add_argument("--weights", metavar="FILE", help="initial weights: a state dict or one of our checkpoints")
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
                   help="keep local copies of remote shards here (LRU; multi-epoch training from a bucket)")
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
    g.add_argument("--warmup-epochs", type=float, default=0.0, help="linear lr warmup (may be fractional)")
    g.add_argument("--ema", type=float, metavar="DECAY", help="keep and evaluate an EMA of the weights")
    g.add_argument("--sync-bn", action="store_true", help="SyncBatchNorm under DDP")
    g.add_argument("--amp", choices=("bf16", "fp16", "none"), default="bf16",
                   help="bf16 autocast, fp16 autocast + GradScaler, or fp32 (default bf16)")
    g.add_argument("--channels-last", action="store_true")
    g.add_argument("--compile", action="store_true", help="torch.compile the model")

    g = p.add_argument_group("resolution and augmentation")
    g.add_argument("--res", type=_positive_int, default=176, help="train resolution (start of the ramp; default 176)")
    g.add_argument("--end-res", type=_positive_int, help="progressive resizing: final train resolution")
    g.add_argument("--ramp-epochs", type=_ramp, metavar="A,B",
                   help="ramp from --res at epoch A to --end-res at epoch B (default 70%%,85%% of --epochs)")
    g.add_argument("--val-res", type=_positive_int, default=256, help="val resize, shorter side (default 256)")
    g.add_argument("--val-crop", type=_positive_int, default=224, help="val center crop (default 224)")
    g.add_argument("--aug", choices=("ra", "ta", "aa", "none"), default="none",
                   help="CPU-side policy: RandAugment, TrivialAugment, AutoAugment")
    g.add_argument("--mixup", type=float, default=0.0, metavar="ALPHA")
    g.add_argument("--cutmix", type=float, default=0.0, metavar="ALPHA")
    g.add_argument("--random-erase", type=float, default=0.0, metavar="P")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from imagenet_shards.train.trainer.distributed import shutdown_distributed
    from imagenet_shards.train.trainer.run import TrainConfig, TrainError, train
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
