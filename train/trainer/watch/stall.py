"""A loader that delivers nothing: named in a warning, and never allowed to hold a stop past its deadline.

The training loop blocks in the DataLoader's ``next()`` while a worker is stuck (SIGSTOPped, a store
that hangs), and the signal handler only sets a flag, so without this a SIGTERM said "finishing the
current step" and then nothing until SIGKILL. `StallWatch` is a thread beside the loop (it only
reads; the loop never waits for it). Every `tick` seconds it looks at each loader's wait
(``loader.activity.Wait``):

* a wait longer than `warn_after` seconds gets one warning per wait, naming the worker the batch is
  due from, its pid and the shard (redacted URL) and sample it read last (``activity.stalled``);
* once a stop is asked for and its deadline (``Lifecycle.stop_deadline``) has passed while the loop
  waits for a train batch, it calls ``Lifecycle.nudge`` (every second until the wait ends): the
  handler raises ``StopOverdue`` out of the wait, the loop saves the last completed step and
  ``runner.Run`` kills the loader's workers. Under DDP (`min_wait`) only a wait that itself lasted
  that long is abandoned: such a rank can write no checkpoint (the others wait for it in a
  collective), so a healthy loader's short wait near a slow agreed stop must not cost the one the
  agreement would write a few steps later.
"""

from __future__ import annotations

import sys
import threading
import time

from tqdm import tqdm

from imagenet_shards.train.loader import activity

DEFAULT_WARN_AFTER = 30.0  # seconds without a batch before a warning: a remote shard's first bytes take a few
DEFAULT_STOP_DEADLINE = 15.0  # seconds from the signal: Slurm's KillWait and a pod's grace period are 30 s


def stall_line(name: str, waited: float, who: activity.Stalled | None) -> str:
    """The warning for a wait of `waited` seconds on the `name` loader."""
    whom = who.describe() if who is not None else "no worker to name (in-process loading, or not known)"
    return f"warning: the {name} loader has delivered no batch for {waited:.0f} s: {whom}"


class StallWatch:
    """The watch thread over `loaders` ({"train": ..., "val": ...}; those without a `wait` are passed
    over) for one run's epochs (a context manager); `write` prints a line (default: stderr, past
    the progress bar). `lines` keeps what it said."""

    def __init__(self, life, loaders: dict, *, warn_after: float | None = DEFAULT_WARN_AFTER, tick: float = 0.25,
                 write=None, prefix: str = "", min_wait: float = 0.0):
        self.life = life
        self.loaders = {k: v for k, v in loaders.items() if v is not None and getattr(v, "wait", None) is not None}
        self.warn_after, self.tick, self.prefix, self.min_wait = warn_after, tick, prefix, min_wait
        self.write = write if write is not None else (lambda line: tqdm.write(line, file=sys.stderr))
        self.lines: list[str] = []
        self._warned: dict = {}   # loader name -> the wait (its start) warned about
        self._nudged = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)

    def __enter__(self) -> "StallWatch":
        train = self.loaders.get("train")
        if train is not None:
            self.life.waiting = lambda: train.wait.since is not None
        if self.loaders:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.life.waiting = lambda: False

    def _run(self) -> None:
        while not self._stop.wait(self.tick):
            self.check()

    def _say(self, line: str) -> None:
        self.lines.append(line)
        self.write(self.prefix + line)

    def check(self, now: float | None = None) -> None:
        """One look: warn about long waits, nudge a stop past its deadline."""
        now = time.monotonic() if now is None else now
        for name, loader in self.loaders.items():
            since = loader.wait.since
            if since is None or not self.warn_after or now - since < self.warn_after or self._warned.get(name) == since:
                continue
            self._warned[name] = since
            self._say(stall_line(name, now - since, activity.stalled(loader, now)))
        train = self.loaders.get("train")
        since = train.wait.since if train is not None else None
        if since is None or now - since < self.min_wait or not self.life.past_deadline() or now - self._nudged < 1.0:
            return
        self._nudged = now
        who = activity.stalled(train, now)
        reason = (f"--stop-deadline {self.life.stop_deadline:g} s, no batch for {now - since:.0f} s"
                  + (f": {who.describe()}" if who else ""))
        self.life.nudge(reason)


__all__ = ["DEFAULT_STOP_DEADLINE", "DEFAULT_WARN_AFTER", "StallWatch", "stall_line"]
