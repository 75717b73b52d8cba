"""What happens to a training run on a signal: the one place that decides.

Today SIGINT (Ctrl-C) and SIGTERM (kill, Slurm, Kubernetes, torchrun) stop the run at once:
`RunSignals.on_signal` raises `pipeline.interrupts.Interrupted` wherever the run is, so every
`finally` runs on the way out (the loader's workers are shut down, metrics.jsonl and TensorBoard
closed, a checkpoint half-written is discarded by the atomic writer and the previous one kept);
`train-imagenet` then prints one line, ``interrupted; rerun the same command to resume`` (or,
when the command has no ``--resume auto``, how to add it), and exits 130 (SIGINT) or 143
(SIGTERM). The DataLoader workers, which get the same signal, exit quietly
(`pipeline.interrupts`): only this process decides. ``--resume auto`` continues from the last
epoch-end checkpoint. Exit codes are listed in docs/training.md.

To make a signal mean something else (a checkpoint before stopping, a checkpoint and carry on),
change `on_signal` to record the request on this object instead of raising, add the signal to
`signals`, and let the epoch loop ask this object once per step (one attribute read: nothing else
in the loop needs to know about signals).
"""

from __future__ import annotations

import os
import signal
from typing import Callable

from imagenet_shards.pipeline.interrupts import MESSAGE, SIGNALS, Interrupted, run_cli

NOT_RESUMING = "interrupted; rerun the same command with --resume auto to continue from the last checkpoint"


class RunSignals:
    """The signal policy of one `train-imagenet` process; `run(body)` runs the command under it."""

    signals = SIGNALS

    def on_signal(self, signum: int) -> None:
        """What a signal does: today, stop now."""
        # The group's signal reaches the DataLoader workers too, and torch's own SIGTERM handler in
        # them dies by it unless the parent sent it; the DataLoader's SIGCHLD handler in this process
        # would then report "worker ... is killed by signal" while it shuts down. We are stopping.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        raise Interrupted(signum)

    def run(self, body: Callable[[], int], *, resuming: bool) -> int:
        """`body()`'s exit code, or 128 + signal after one line (printed by one process per node);
        `resuming`: the command has --resume auto, so running it again continues the run."""
        quiet = os.environ.get("LOCAL_RANK", "0") != "0"
        return run_cli(body, on_signal=self.on_signal, signals=self.signals, quiet=quiet,
                       message=MESSAGE if resuming else NOT_RESUMING)


__all__ = ["RunSignals"]
