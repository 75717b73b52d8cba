"""Ctrl-C and SIGTERM for our commands: one line, the conventional exit code, quiet workers.

A long command is stopped by SIGINT (Ctrl-C: the terminal sends it to the whole process group) or
SIGTERM (kill, Slurm, Kubernetes, torchrun). Python's defaults are a KeyboardInterrupt traceback in
every process for SIGINT (prepare-shards printed 156 lines, 10 tracebacks) and, for SIGTERM, a
silent death that skips every `finally` (prepare-shards left its `.tmp` files). Here:

- the command's own process turns either signal into `Interrupted`, raised where the code is, so
  `finally` blocks and the atomic writer clean up on the way out; the CLI (`run_cli`) prints one
  line, ``interrupted; rerun the same command to resume``, and exits 128 + the signal (130, 143);
- worker processes stop at once, quietly: the main process decides, stops the rest and removes
  what they left. The pool of `parallel.run_jobs` resets both signals to their default action
  (`default_in_workers`: the worker dies). A forked child that inherited the handler (the loader's
  DataLoader workers) gets KeyboardInterrupt for either signal, which torch's worker loop takes as
  its cue to exit with status 0; dying by the signal instead would make the DataLoader in the
  main process raise "worker ... is killed by signal" while it shuts down;
- a second signal while the first is being handled ends the process at once (default action), so
  a cleanup that hangs can still be stopped with another Ctrl-C.

`on_signal` lets a tool decide otherwise for a signal (the trainer's `lifecycle` owns that for
training runs); the default raises `Interrupted` at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The one list of stop signals: every command's (above) and, for a training run, SIGUSR1 too (Slurm's
# `--signal=USR1@120` warning before the time limit), which the trainer's lifecycle turns into a
# checkpoint and a stop; other commands leave SIGUSR1 its default action.
RUN_SIGNALS = SIGNALS + tuple(s for s in (getattr(signal, "SIGUSR1", None),) if s is not None)
MESSAGE = "interrupted; rerun the same command to resume"


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, like KeyboardInterrupt, so that `except Exception`
    handlers let it through; `exit_code` is the shell's 128 + signal number."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Caught:
    """The first signal that arrived inside `signals_raise` (None: none did)."""

    signum: int | None = None


def default_in_workers() -> None:
    """A worker process's signal set-up (a pool initializer): SIGINT and SIGTERM end it at once,
    quietly, whatever it inherited; its parent decides what the command does."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def _die_by(signum: int) -> None:
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@contextlib.contextmanager
def signals_raise(on_signal: Callable[[int], None] | None = None, signals=SIGNALS) -> Iterator[Caught]:
    """Within the block, `signals` (SIGINT and SIGTERM) in this process call `on_signal(signum)`
    (default: raise `Interrupted`); yields a `Caught` that records the first one. Off the main
    thread, or in a forked child, signals keep their default action. The previous handlers come
    back at the end."""
    caught = Caught()
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:  # a forked child that inherited this handler (a DataLoader worker)
            raise KeyboardInterrupt
        if caught.signum is not None:  # a second signal while the first is handled: stop at once
            _die_by(signum)
            return
        caught.signum = signum
        (on_signal or _raise)(signum)

    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield caught
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _raise(signum: int) -> None:
    raise Interrupted(signum)


def run_cli(body: Callable[[], int], *, on_signal: Callable[[int], None] | None = None, signals=SIGNALS,
            quiet: bool = False, message: str = MESSAGE) -> int:
    """Run a command's body (returning its exit code) with `signals_raise`; if a signal arrived,
    whatever surfaced from the body (Interrupted, or an error a dying worker caused meanwhile),
    print the one line, `message` (unless `quiet`), and return 128 + the signal."""
    with signals_raise(on_signal, signals) as caught:
        try:
            return body()
        except BaseException:
            if caught.signum is None:
                raise
    if not quiet:
        print(message, file=sys.stderr, flush=True)
    return 128 + caught.signum


__all__ = ["MESSAGE", "RUN_SIGNALS", "SIGNALS", "Caught", "Interrupted", "default_in_workers", "run_cli", "signals_raise"]
