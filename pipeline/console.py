"""What every console script shares: an argparse parser whose usage errors are one line, and the
one rule of `--workers`.

argparse answers a bad argument with its usage (5-20 lines) and then `prog: error: ...`; our
commands promise one line on stderr and exit 2 for anything that stops them (README, "Exit codes"),
so `OneLineParser` prints only `error: <argparse's message> (see PROG --help)`. Every command's
`build_parser()` makes one (pipeline's and train's: train may import from the pipeline package,
never the other way round); `--help` is unchanged.

`--workers N`, in every command that has it, is parsed by `worker_count`: N worker processes, N a
whole number >= 0; 0 means none, the work runs in the command's own process (as PyTorch's
`num_workers=0`; for prepare-shards and audit-shards 1 does too: one worker needs no pool); without
--workers, the command's default (all usable cores, or train-imagenet's per-rank share). A negative
number or anything else is a usage error: one line, exit 2. (0 once meant "all cores" in
prepare-shards and -1 one worker, silently.)
"""

from __future__ import annotations

import argparse
import re


class OneLineParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose errors are one line on stderr, exit 2, e.g.
    `error: argument --shard-samples: invalid int value: 'abc' (see prepare-shards --help)`."""

    def error(self, message: str):
        self.exit(2, f"error: {' '.join(message.split())} (see {self.prog} --help)\n")


WORKERS_RULE = "0: none, the work runs in this process"  # the rule's words, for each command's --help


def worker_count(text: str) -> int:
    """argparse `type=` of every --workers: a whole number >= 0 (0: no worker process, the work runs
    in this process); anything else raises ArgumentTypeError, which OneLineParser makes one line:
    `error: argument --workers: must be a whole number >= 0 (0: none, ...), got '-1' (see CMD --help)`."""
    if not re.fullmatch(r"[0-9]+", text.strip()):
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0 ({WORKERS_RULE}), got {text!r}")
    return int(text)
