"""The train-imagenet console script: the signal policy first, then the imports.

Importing torch and the trainer takes seconds (more on a busy node); a SIGTERM (scancel, a pod
deleted), SIGUSR1 or Ctrl-C in them used to end the process by the signal's default action: exit
-15 and no line, or a KeyboardInterrupt traceback. Here the one line comes first: until the run's
own policy takes over (cli.main's RunSignals, then the training lifecycle), such a signal prints
`stopped by SIGTERM while starting up ...` and exits 128 + the signal. Nothing has been written
then, so there is nothing to clean up (hence os._exit, which no import in progress can catch).
"""

from __future__ import annotations

import os
import signal
import sys

from imagenet_shards.pipeline.interrupts import RUN_SIGNALS  # the one signal list; a light import (no torch)


def _stopped_while_starting(signum, frame) -> None:
    name = signal.Signals(signum).name
    sys.stderr.write(f"stopped by {name} while starting up, before anything was written; run the same command "
                     f"again to start (or continue with --resume auto)\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def build_parser():
    """cli.build_parser (every console script's module has one: the parser tests read it)."""
    from imagenet_shards.train.trainer.cli import build_parser as cli_parser

    return cli_parser()


def main(argv: list[str] | None = None) -> int:
    for signum in RUN_SIGNALS:
        signal.signal(signum, _stopped_while_starting)
    from imagenet_shards.train.trainer.cli import main as cli_main

    return cli_main(argv)
