"""What every console script shares: an argparse parser whose usage errors are one line.

argparse answers a bad argument with its usage (5-20 lines) and then `prog: error: ...`; our
commands promise one line on stderr and exit 2 for anything that stops them (README, "Exit codes"),
so `OneLineParser` prints only `error: <argparse's message> (see PROG --help)`. Every command's
`build_parser()` makes one (pipeline's and train's: train may import from the pipeline package,
never the other way round); `--help` is unchanged.
"""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose errors are one line on stderr, exit 2, e.g.
    `error: argument --shard-samples: invalid int value: 'abc' (see prepare-shards --help)`."""

    def error(self, message: str):
        self.exit(2, f"error: {' '.join(message.split())} (see {self.prog} --help)\n")
