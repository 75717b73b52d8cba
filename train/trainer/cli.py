"""`train-imagenet`: train a torchvision classifier on a prepare-shards output (see docs/training.md).

Single process:  train-imagenet --data DATA --out RUN_DIR [options]
DDP:             torchrun --nproc_per_node=8 -m imagenet_shards.train --data DATA --out RUN_DIR [options]
A published recipe: train-imagenet --recipe ffcv-rn50-16 --data DATA --out RUN_DIR [flags override its values]
                 train-imagenet --recipe ffcv-rn50-16 --show [--world-size 8]   (the resolved recipe as JSON)
URLs: only --data takes a URL (s3://, gs://, http(s)://, ...). --out, --cache-dir, --weights and
--resume PATH are local paths; a URL there is refused (exit 2) rather than taken as a folder name.
Exit codes: 0 done, 2 the run could not start or continue (the message says why); 143, 138, 130
stopped by SIGTERM, SIGUSR1, SIGINT (128 + the signal): during training after writing a checkpoint,
before it at once; either way a line says how to resume (the same command with --resume auto).
See docs/training.md, "Preemption and requeue".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.console import OneLineParser
from imagenet_shards.train.loader import augment
from imagenet_shards.train.trainer.config import DEFAULT_WARMUP_EPOCHS
from imagenet_shards.train.trainer.schedule import SCHEDULES

# The loader's augmentation table is the one list of names (None there is "none" here); timm
# "rand-..." strings are admitted too.
AUG_CHOICES = augment.AugChoices(augment.AUG_NAMES)
# parser destinations that are not TrainConfig fields
CLI_ONLY = ("show", "world_size")


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
    """The train-imagenet argument parser (dests match TrainConfig's fields, except CLI_ONLY)."""
    p = OneLineParser(prog="train-imagenet", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data and run")
    g.add_argument("--data", help="prepare-shards output (holds manifest.json): a directory or a URL, "
                                  "s3://bucket/prefix, gs://..., https://host/path")
    g.add_argument("--out", metavar="RUN_DIR",
                   help="run directory: metrics.jsonl, checkpoints, profile (a local path, not a URL); required "
                        "unless --show")
    g.add_argument("--recipe", metavar="NAME",
                   help="a published recipe (docs/recipes.md): ffcv-rn50-{16,24,32,40,56,88}, "
                        "ffcv-rn18-{16,...,88}, tv-rn50-v1, tv-rn50-v2, rsb-a3-rn50; other flags override its "
                        "values (recorded as overrides)")
    g.add_argument("--show", action="store_true",
                   help="print the fully resolved recipe (or config) as JSON and exit, touching no data")
    g.add_argument("--world-size", type=_positive_int, metavar="W",
                   help="with --show: resolve for W GPUs (a run takes torchrun's WORLD_SIZE)")
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
    g.add_argument("--checkpoint-every", metavar="DURATION",
                   help="also write RUN_DIR/checkpoint-mid.pt mid-epoch every DURATION: 30m, 1.5h, 90s, 2000steps, "
                        "or both (30m,2000steps). Signals (SIGTERM, SIGUSR1, SIGINT) always write one; "
                        "--resume auto takes the newest")
    g.add_argument("--stop-check-every", type=_positive_int, default=8, metavar="STEPS",
                   help="under DDP, steps between the ranks' agreements on a pending stop (default 8: a stop "
                        "comes within 16 steps of the signal; each agreement is one async all-reduce of two "
                        "numbers on the CPU)")
    g.add_argument("--eval-only", action="store_true", help="evaluate --weights or --resume and exit")
    g.add_argument("--no-val", action="store_true",
                   help="train without evaluating (needed for a --data whose val split is missing or empty; "
                        "no checkpoint-best then)")
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
    g.add_argument("--lr", type=float, help="peak lr (default 0.1 x global batch / 256; with --recipe: the recipe's, "
                                            "scaled to this run's global batch)")
    g.add_argument("--optimizer", choices=("sgd", "lamb"), default="sgd",
                   help="sgd (fused on CUDA) or lamb (timm's LAMB: global grad-norm clip 1, trust ratio)")
    g.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    g.add_argument("--nesterov", action="store_true")
    g.add_argument("--wd", type=float, default=5e-5, help="weight decay (default 5e-5)")
    g.add_argument("--no-bn-wd", action="store_true", help="no weight decay on normalization layers")
    g.add_argument("--wd-exempt", choices=("none", "norm", "bn-name", "1d"),
                   help="parameters without weight decay: none, norm (normalization layers, = --no-bn-wd), "
                        "bn-name (names containing 'bn', FFCV), 1d (1-d parameters and biases, timm)")
    g.add_argument("--label-smoothing", type=float, default=0.1, help="default 0.1")
    g.add_argument("--loss", choices=("ce", "bce"), default="ce",
                   help="ce (cross-entropy) or bce (one sigmoid per class, ResNet Strikes Back)")
    g.add_argument("--bce-target-thresh", type=float, metavar="T",
                   help="bce: targets above T become 1, the rest 0 (RSB: 0.2)")
    g.add_argument("--accumulate", type=_positive_int, default=1, metavar="N",
                   help="one optimizer step per N loader batches (gradients summed): the global batch x N")
    g.add_argument("--schedule", choices=SCHEDULES, default="cosine",
                   help="cosine/linear/step: after warmup, per iteration; triangle: FFCV's (per iteration); "
                        "step-epochs, cosine-epochs: torchvision's (per epoch); timm-cosine: timm's (per epoch)")
    g.add_argument("--lr-peak-epoch", type=float, default=2.0, help="triangle: epoch of the peak (default 2)")
    g.add_argument("--lr-start-factor", type=float, default=0.0, metavar="F",
                   help="triangle, cosine-epochs, timm-cosine: the lr at the start, as a fraction of the peak")
    g.add_argument("--lr-end-factor", type=float, default=0.0, metavar="F",
                   help="triangle: the lr at the end; cosine-epochs, timm-cosine: the floor; fractions of the peak")
    g.add_argument("--lr-step-epochs", type=_positive_int, default=30, help="step-epochs: decay every N epochs")
    g.add_argument("--lr-gamma", type=float, default=0.1, help="step-epochs: the decay factor")
    g.add_argument("--warmup-epochs", type=float, default=None, metavar="W",
                   help=f"linear lr warmup from lr/steps to lr over W epochs (may be fractional; 0: none). "
                        f"Default {DEFAULT_WARMUP_EPOCHS:g}, or a quarter of --epochs when that is shorter: the "
                        f"default lr follows the linear scaling rule (0.8 at global batch 2048), which needs a warmup")
    g.add_argument("--ema", type=float, metavar="DECAY", help="keep and evaluate an EMA of the weights")
    g.add_argument("--ema-every", type=_positive_int, default=1, metavar="N",
                   help="update the EMA after every N-th optimizer step of an epoch (torchvision: 32)")
    g.add_argument("--ema-ramp", action=argparse.BooleanOptionalAction, default=True,
                   help="decay min(DECAY, (1+n)/(10+n)) over updates n (default on); off: constant (torchvision)")
    g.add_argument("--ema-copy-epochs", type=int, default=0, metavar="N",
                   help="copy the weights into the EMA instead of averaging in the first N epochs (torchvision)")
    g.add_argument("--zero-init-residual", action=argparse.BooleanOptionalAction, default=True,
                   help="ResNets: zero-initialise the last BN of each block (default on; torchvision's own is off)")
    g.add_argument("--blurpool", action=argparse.BooleanOptionalAction, default=False,
                   help="FFCV's BlurPool: a [1,2,1]x[1,2,1]/16 blur before every strided conv with >= 16 inputs")
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
    g.add_argument("--val-crop-ratio", type=float, metavar="R",
                   help="FFCV's val crop instead: the centred R x shorter side, resized to --val-crop (FFCV: 0.875)")
    g.add_argument("--tta", action=argparse.BooleanOptionalAction, default=False,
                   help="evaluate logits(x) + logits(flip(x)) (FFCV's test-time augmentation)")
    g.add_argument("--eval-every", type=int, default=1, metavar="N",
                   help="evaluate after every N-th epoch (0: only the last); the last epoch always")
    g.add_argument("--eval-real", action=argparse.BooleanOptionalAction, default=False,
                   help="also report ReaL top-1 (needs the original val keys and the ImageNet-1k label space)")
    g.add_argument("--aug", choices=AUG_CHOICES, default="none",
                   help="CPU-side policy applied by the loader workers: ra RandAugment, ta TrivialAugment, ta_wide "
                        "(bilinear, torchvision's reference), aa AutoAugment, jitter ColorJitter, or a timm "
                        "RandAugment string such as rand-m6-mstd0.5-inc1 (not with --gpu-decode)")
    g.add_argument("--ra-reps", type=_positive_int, default=1, metavar="R",
                   help="repeated augmentation: ~1/R of the samples an epoch, each R times (torchvision --ra-reps)")
    g.add_argument("--mixup", type=float, default=0.0, metavar="ALPHA")
    g.add_argument("--cutmix", type=float, default=0.0, metavar="ALPHA")
    g.add_argument("--random-erase", type=float, default=0.0, metavar="P")
    g.add_argument("--random-erase-fill", choices=("noise", "zero"), default="noise",
                   help="noise: N(0,1) per pixel (timm); zero: 0 after normalization (torchvision)")
    return p


def explicit_flags(argv: list[str]) -> dict:
    """The TrainConfig fields the command line sets explicitly (a parse with every default suppressed)."""
    quiet = build_parser()
    for action in quiet._actions:
        action.default = argparse.SUPPRESS
    return {k: v for k, v in vars(quiet.parse_args(argv)).items() if k not in CLI_ONLY}


def config_from_argv(argv: list[str] | None = None, *, parser: argparse.ArgumentParser | None = None):
    """(TrainConfig, world size, --show) from a command line. With --recipe: the recipe's values
    under the explicit flags, scaled to the world size (torchrun's WORLD_SIZE, or --world-size with
    --show). Raises UnknownRecipe or TrainError (one line each)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = parser or build_parser()
    args = parser.parse_args(argv)  # --help exits here, before torch is imported
    from imagenet_shards.train.trainer.config import TrainConfig, TrainError
    if args.out is None and not args.show:
        parser.error("the following arguments are required: --out")
    env_world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.world_size is not None and not args.show:
        raise TrainError("--world-size is for --show; a run's world size is torchrun's (--nproc_per_node x nodes)")
    world = args.world_size or env_world
    kwargs = {k: v for k, v in vars(args).items() if k not in CLI_ONLY}
    if args.recipe:
        from imagenet_shards.train.recipes import get_recipe
        from imagenet_shards.train.trainer.recipe import resolve
        defaults = {a.dest: a.default for a in parser._actions if a.dest in kwargs}
        kwargs = resolve(get_recipe(args.recipe), defaults=defaults, explicit=explicit_flags(argv), world_size=world)
    if kwargs.get("out") is None:
        kwargs["out"] = ""
    return TrainConfig(**kwargs), world, args.show


def main(argv: list[str] | None = None) -> int:
    """train-imagenet: parse, train, and turn a TrainError into one `error:` line and exit code 2,
    SIGTERM/SIGUSR1/SIGINT into one line and 143/138/130 (`lifecycle`: during training after a
    checkpoint, before it at once)."""
    from imagenet_shards.train.recipes import UnknownRecipe
    from imagenet_shards.train.trainer.recipe import describe
    from imagenet_shards.train.trainer.config import TrainError
    try:
        config, world, show = config_from_argv(argv)  # parses first: --help needs no more imports
    except (UnknownRecipe, TrainError) as e:
        print(f"error: {storage.redact(e)}", file=sys.stderr, flush=True)
        return 2
    if show:
        print(json.dumps(describe(config, world_size=world), indent=1))
        return 0
    from imagenet_shards.train.trainer.distributed import shutdown_distributed
    from imagenet_shards.train.trainer.lifecycle import RunSignals, Stopped
    from imagenet_shards.train.trainer.run import train
    from tqdm.contrib.logging import logging_redirect_tqdm

    def run() -> int:
        rank, world = os.environ.get("RANK", "0"), int(os.environ.get("WORLD_SIZE", "1"))
        try:
            # warnings our modules log (a bad sample skipped) go above the progress bars, not into them
            with logging_redirect_tqdm(loggers=[logging.getLogger("imagenet_shards")]):
                train(config)
        except TrainError as e:
            print(f"{f'[rank {rank}] ' if world > 1 else ''}error: {storage.redact(e)}", file=sys.stderr, flush=True)
            return 2
        except Stopped as e:  # one line per node (local rank 0), the signal's exit code on every rank
            if os.environ.get("LOCAL_RANK", "0") == "0":
                print(str(e), file=sys.stderr, flush=True)
            return e.code
        return 0

    try:
        return RunSignals().run(run, resuming=config.resume == "auto")
    finally:
        shutdown_distributed()


if __name__ == "__main__":
    sys.exit(main())
