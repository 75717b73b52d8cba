"""One owner of a run's lifecycle: signals, periodic checkpoints and the decision to stop meet here.

The training loop asks one cheap question after each step, `after_step(step)`: None (go on), or
a `Decision` to write a mid-epoch checkpoint and maybe stop. Everything else lives here:

* **Signals.** SIGTERM (Kubernetes, spot reclaim, `scancel`), SIGUSR1 (Slurm's `--signal=USR1@120`)
  and SIGINT (Ctrl-C). Inside training (`deferred()`) a signal only sets a flag: the current step
  finishes, the ranks agree on one step to stop at, a checkpoint is written and the run ends with
  `Stopped` (exit code 128 + the signal's number, one line saying how to resume). Further signals
  are only noted, so nothing, a checkpoint being written included, is cut short by them (torchrun
  forwards the SIGINT a terminal already sent every process: two arrive for one Ctrl-C). The
  DataLoader workers ignore all three (`loader.workers.quiet_worker`): only this process decides.
* **Outside training** (start-up, `--eval-only`) `RunSignals`, the command's own policy, applies:
  the run stops at once (`pipeline.interrupts.Interrupted` raised where the code is, so every
  `finally` runs on the way out), one line says how to resume, exit 128 + the signal.
* **Agreement without a per-step sync.** Every `agree_every` steps (global step count, the same on
  every rank) each rank contributes (its signal's number or 0, checkpoint due?) to one max-reduce of
  two int64 on a gloo group of its own (CPU, never the GPU stream), issued asynchronously and read at
  the next check: the ranks all see the same sums at the same step, so they stop or save at the
  same step, within 2 x `agree_every` steps of the signal. No wait is on the critical path: by the
  time it is read the reduce has long finished. docs/training.md has the measured cost.
* **A deadline** (`--stop-deadline`, default 15 s: well inside Slurm's KillWait and a pod's grace
  period, 30 s each): a stop must not wait for ever on a loader worker that delivers nothing (a
  SIGSTOPped worker, a hung store). Past the deadline, while the loop waits for a batch,
  `watch.stall.StallWatch` (a thread) sets `overdue` and sends the stop signal again to the main
  thread; the handler then raises `StopOverdue` out of that wait (and only there: `waiting()`), the
  loop writes the mid-epoch checkpoint of the last completed step and the loader's workers are
  killed. The exit code is the signal's, as for any stop.
* **Periodic checkpoints** (`--checkpoint-every 30m`, `2000steps` or both): a step count is the same
  on every rank, so it needs no agreement; a duration is rank 0's clock, spread by the agreement.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from imagenet_shards.pipeline.interrupts import MESSAGE, RUN_SIGNALS, Interrupted, run_cli
from imagenet_shards.train.trainer.distributed import DistInfo
from imagenet_shards.train.trainer.state.checkpoint import LATEST
from imagenet_shards.train.trainer.watch.stall import DEFAULT_STOP_DEADLINE

DEFAULT_AGREE_EVERY = 8
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def exit_code(name: str) -> int:
    """The shell's convention for a run ended by signal `name`: 128 + its number (TERM 143, INT 130,
    USR1 138 on Linux)."""
    return 128 + int(getattr(signal, name))


def parse_every(text: str) -> tuple[int | None, float | None]:
    """`--checkpoint-every` → (steps, seconds): `30m`, `1.5h`, `90s`, `2000steps`, or both joined by
    a comma (whichever comes first). ValueError naming the accepted forms."""
    steps = seconds = None
    for part in str(text).replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+(?:\.\d+)?)(steps?|s|sec|m|min|h)", part)
        if not m or float(m.group(1)) <= 0:
            raise ValueError(f"--checkpoint-every {text!r}: expected a duration (30m, 1.5h, 90s), a step count "
                             f"(2000steps) or both (30m,2000steps)")
        value, unit = float(m.group(1)), m.group(2)
        if unit.startswith("step"):
            if not value.is_integer():
                raise ValueError(f"--checkpoint-every {text!r}: a step count is a whole number")
            steps = int(value)
        else:
            seconds = value * _UNITS[unit]
    return steps, seconds


class Stopped(Exception):
    """The run stopped on a signal after writing a checkpoint; the message says how to resume."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class StopOverdue(BaseException):
    """The stop deadline passed while the training loop waited for a batch: raised in the main thread,
    out of that wait (a BaseException, so the loader's `except Exception` lets it through)."""


@dataclass(frozen=True)
class Decision:
    save: bool   # write a mid-epoch checkpoint after this step
    stop: bool   # then end the run


class Lifecycle:
    """Signals, periodic checkpoints and stop decisions of one run (a context manager: on exit it
    waits for an agreement still in flight). `deferred()` is where signals are its own."""

    def __init__(self, info: DistInfo, *, every_steps: int | None = None, every_seconds: float | None = None,
                 agree_every: int = DEFAULT_AGREE_EVERY, clock=time.monotonic, announce=None,
                 stop_deadline: float | None = DEFAULT_STOP_DEADLINE):
        self.info = info
        self.every_steps, self.every_seconds = every_steps, every_seconds
        self.agree_every = max(1, agree_every)
        self.clock = clock
        self.announce = announce if announce is not None else info.local_rank == 0
        self.signal: str | None = None   # the first signal received
        self.extra = 0                   # signals after it (only noted)
        self.stop_deadline = stop_deadline
        self.signal_at: float | None = None  # when the first signal came (this process's clock)
        self.overdue = False             # the deadline passed: the next signal in a wait raises StopOverdue
        self.overdue_reason: str | None = None  # who held the stop up (the stalled worker, its shard)
        self.waiting = lambda: False     # is the main thread in the train loader's wait? (StallWatch sets it)
        self._last_save = clock()
        self._work = None
        self._flags = torch.zeros(2, dtype=torch.int64)
        self._group = dist.new_group(backend="gloo") if info.distributed else None

    # ------------------------------------------------------------------ signals

    def __enter__(self) -> "Lifecycle":
        return self

    def __exit__(self, *exc) -> None:
        if self._work is not None:
            with contextlib.suppress(Exception):
                self._work.wait()
            self._work = None

    def _handle(self, signum, frame) -> None:
        if self.overdue and self.waiting():
            # the stalled workers are killed next: the DataLoader's SIGCHLD handler would raise for each
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            raise StopOverdue
        if self.signal is not None:
            self.extra += 1
            return
        self.signal, self.signal_at = signal.Signals(signum).name, self.clock()
        if self.announce:
            within = 1 if not self.info.distributed else 2 * self.agree_every
            late = (f"; a loader that holds it up past {self.stop_deadline:g} s: the last completed step's checkpoint"
                    if self.stop_deadline else "")
            tqdm.write(f"{self.signal} received: finishing the current step, then stopping within {within} step(s) "
                       f"with a checkpoint{late} (further signals are ignored; SIGKILL abandons it)", file=sys.stderr)

    def past_deadline(self) -> bool:
        """A stop was asked for more than `stop_deadline` seconds ago."""
        return (self.signal_at is not None and bool(self.stop_deadline)
                and self.clock() - self.signal_at >= self.stop_deadline)

    def nudge(self, reason: str | None) -> None:
        """From the watch thread, past the deadline: mark the stop overdue and signal the main thread
        again, so that a wait for a batch raises `StopOverdue` (the handler checks it still waits)."""
        self.overdue, self.overdue_reason = True, reason
        signal.pthread_kill(threading.main_thread().ident, getattr(signal, self.signal))

    @contextlib.contextmanager
    def deferred(self):
        """Inside (training, its evaluations and checkpoints): a signal only sets the stop flag that
        `after_step` and `at_epoch_end` read. Outside, signals do what the command's own policy says
        (stop at once)."""
        previous = {signum: signal.signal(signum, self._handle) for signum in RUN_SIGNALS}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    @property
    def code(self) -> int:
        return exit_code(self.signal) if self.signal else 0

    # ------------------------------------------------------------------ the one question per step

    def after_step(self, step: int) -> Decision | None:
        """After global step `step` (1-based count of steps done): save and/or stop now?"""
        save = bool(self.every_steps) and step % self.every_steps == 0
        if not self.info.distributed:
            save = save or self._time_due()
            return Decision(True, True) if self.signal else (Decision(True, False) if save else None)
        if step % self.agree_every:
            return Decision(True, False) if save else None
        stop = False
        if self._work is not None:  # issued agree_every steps ago: long done, so wait() returns at once
            self._work.wait()
            signum, save_n = self._flags.tolist()
            stop, save = self._agreed(signum), save or save_n > 0
            self._work = None
        if not stop:
            self._issue(due=not save and self._time_due())
        if stop or save:
            return Decision(True, stop)
        return None

    def at_epoch_end(self) -> bool:
        """Stop after this epoch (its checkpoint written)? One blocking agreement (an epoch end has
        collectives anyway), so a signal during the last steps or the evaluation is not missed."""
        if not self.info.distributed:
            return self.signal is not None
        if self._work is not None:
            self._work.wait()
            self._work = None
        flags = torch.tensor([self._signum(), 0], dtype=torch.int64)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self._group)
        return self._agreed(int(flags[0]))

    def saved(self) -> None:
        """A checkpoint was written: the time-based period starts again."""
        self._last_save = self.clock()

    def _time_due(self) -> bool:
        return bool(self.every_seconds) and self.info.is_main and self.clock() - self._last_save >= self.every_seconds

    def _signum(self) -> int:
        return int(getattr(signal, self.signal)) if self.signal else 0

    def _agreed(self, signum: int) -> bool:
        """Whether the agreement says stop; a rank that got no signal itself takes the one agreed on
        (the highest number any rank got), so every rank exits with the same code."""
        if signum and self.signal is None:
            self.signal, self.signal_at = signal.Signals(signum).name, self.clock()
        return signum > 0

    def _issue(self, *, due: bool) -> None:
        self._flags = torch.tensor([self._signum(), int(due)], dtype=torch.int64)
        self._work = dist.all_reduce(self._flags, op=dist.ReduceOp.MAX, group=self._group, async_op=True)


# ---------------------------------------------------------------------- outside training: stop now

NOT_RESUMING = "interrupted; rerun the same command with --resume auto to continue from the last checkpoint"


class RunSignals:
    """The signal policy of one `train-imagenet` process outside training; `run(body)` runs the
    command under it (`Lifecycle.deferred` takes the signals over while training)."""

    signals = RUN_SIGNALS

    def on_signal(self, signum: int) -> None:
        """What a signal does here: stop now."""
        # The DataLoader's SIGCHLD handler in this process would report "worker ... is killed by
        # signal" while the loader shuts down its workers on the way out. We are stopping.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        raise Interrupted(signum)

    def run(self, body, *, resuming: bool) -> int:
        """`body()`'s exit code, or 128 + signal after one line (printed by one process per node);
        `resuming`: the command has --resume auto, so running it again continues the run."""
        quiet = os.environ.get("LOCAL_RANK", "0") != "0"
        return run_cli(body, on_signal=self.on_signal, signals=self.signals, quiet=quiet,
                       message=MESSAGE if resuming else NOT_RESUMING)


def stop_line(signal_name: str, *, epoch: int, epoch_step: int, steps_per_epoch: int, step: int,
              cost: dict | None, mid_supported: bool, out: Path, overdue: str | None = None) -> str:
    """The one line a run stopped by a signal prints: where it stopped, what was saved, how to go on.
    `overdue`: the stop deadline passed waiting for the loader (who held it up, what was killed)."""
    where = (f"at epoch {epoch + 1}, step {epoch_step} of {steps_per_epoch} (global step {step})" if epoch_step
             else f"after epoch {epoch} (global step {step})")
    if overdue:
        where += f", past the stop deadline ({overdue})"
    if cost is None and overdue and not mid_supported:
        saved = ("no checkpoint: the other ranks wait for this one in a collective; --resume auto continues from "
                 "the last checkpoint written")
    elif cost is not None:
        saved = f"checkpoint {cost['path']} written ({cost['bytes'] / 2**20:.1f} MiB, {cost['seconds']:.1f} s)"
    elif epoch_step and not mid_supported:
        saved = (f"no mid-epoch checkpoint with this loader (--gpu-decode or --synthetic-data): --resume auto "
                 f"restarts epoch {epoch + 1} from {out / LATEST}")
    else:
        saved = f"checkpoint {out / LATEST} is the epoch's"
    return f"stopped by {signal_name} {where}: {saved}; to continue, run the same command with --resume auto"


__all__ = ["Decision", "Lifecycle", "RunSignals", "StopOverdue", "Stopped", "exit_code",
           "parse_every", "stop_line"]
