"""`python -m train` / `torchrun -m train`: the train-imagenet command."""

import sys

from train.cli import main

if __name__ == "__main__":
    sys.exit(main())
