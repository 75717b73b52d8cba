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
from imagenet_shards.train.recipes import UnknownRecipe
from imagenet_shards.train.trainer import flags
from imagenet_shards.train.trainer.config import TrainConfig, TrainError


def build_parser() -> argparse.ArgumentParser:
    """The train-imagenet argument parser (trainer/flags.py makes it from TrainConfig's fields); a parse
    returns only the flags given."""
    return flags.build_parser(prog="train-imagenet", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)


def config_from_argv(argv: list[str] | None = None, *, parser: argparse.ArgumentParser | None = None):
    """(TrainConfig, world size, --show) from a command line. With --recipe: the recipe's values
    under the explicit flags, scaled to the world size (torchrun's WORLD_SIZE, or --world-size with
    --show). Raises UnknownRecipe or TrainError (one line each)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = parser or build_parser()
    explicit = vars(parser.parse_args(argv))  # the flags given, only; --help exits here
    show, world_size = explicit.pop("show", False), explicit.pop("world_size", None)
    if "out" not in explicit and not show:
        parser.error("the following arguments are required: --out")
    env_world = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size is not None and not show:
        raise TrainError("--world-size is for --show; a run's world size is torchrun's (--nproc_per_node x nodes)")
    world = world_size or env_world
    defaults = flags.defaults()
    kwargs = {**defaults, **explicit}
    if "recipe" in explicit:
        from imagenet_shards.train.recipes import get_recipe
        from imagenet_shards.train.trainer.recipe import resolve
        kwargs = resolve(get_recipe(explicit["recipe"]), defaults=defaults, explicit=explicit, world_size=world)
    if kwargs.get("out") is None:
        kwargs["out"] = ""
    return TrainConfig(**kwargs), world, show


def main(argv: list[str] | None = None) -> int:
    """train-imagenet: parse, train, and turn a TrainError into one `error:` line and exit code 2,
    SIGTERM/SIGUSR1/SIGINT into one line and 143/138/130 (`lifecycle`: during training after a
    checkpoint, before it at once)."""
    from imagenet_shards.train.trainer.recipe import describe
    try:
        config, world, show = config_from_argv(argv)  # parses first: --help needs no more imports
    except (UnknownRecipe, TrainError) as e:
        print(f"error: {storage.redact(e)}", file=sys.stderr, flush=True)
        return 2
    from imagenet_shards.train.trainer.recipe import ramp_warning
    warning = ramp_warning(config)
    if warning and (show or os.environ.get("RANK", "0") == "0"):
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    if show:  # with --data, for the shard set's own train count (its manifest); else ImageNet-1k's
        try:
            manifest, num_train = None, None
            if config.data:
                from imagenet_shards.train.trainer.build import read_dataset
                manifest, _, num_train = read_dataset(config)
        except TrainError as e:
            print(f"error: {storage.redact(e)}", file=sys.stderr, flush=True)
            return 2
        if (config.recipe_scaling or {}).get("note"):
            print(f"note: {config.recipe_scaling['note']}", file=sys.stderr)
        from imagenet_shards.train.trainer.recipe import shards_note
        data_note = shards_note(config, manifest)
        if data_note:
            print(data_note, file=sys.stderr)
        print(json.dumps(describe(config, world_size=world, num_train=num_train), indent=1))
        return 0
    from imagenet_shards.train.trainer.distributed import shutdown_distributed
    from imagenet_shards.train.trainer.state.lifecycle import RunSignals, Stopped
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
