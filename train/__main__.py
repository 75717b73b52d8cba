"""`python -m imagenet_shards.train` / `torchrun -m imagenet_shards.train`: the train-imagenet command."""

import sys

from imagenet_shards.train.trainer.cli import main

if __name__ == "__main__":
    sys.exit(main())
