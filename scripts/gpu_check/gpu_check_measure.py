"""What the GPU check measures from outside a run (used by scripts/gpu_check/gpu_check.py; the verdicts and
the table that read these figures are in gpu_check_report.py).

- `ProcSampler`: a run's main-process CPU use (utime + stime from /proc/PID/stat), its loader workers'
  CPU (the same, summed over its child processes), peak RSS, the workers' memory (PSS, so shared pages
  are not counted once per worker) and /dev/shm use, sampled every 0.25 s while it runs, kept as a
  series so the CPU of any time window can be read back (`cores_between`): per rank, so the figures
  scale to 8 ranks.
- `window`: img/s and data-wait of a run from its train_interval records over a measurement window.
  For a run on real shards that is its second epoch, from the step at which every loader worker has
  delivered its first batch: at the start of the first epoch the workers fill workers x
  prefetch_factor batches while the first (slow: autotuning) step runs, and the trainer then eats that
  store at the model's speed until it is gone, which takes store / (1 - efficiency) steps (a 60-batch
  store at a true 0.74 lasts 230 steps): a window in the first epoch, even after workers x prefetch
  + 10 steps, reads high. An epoch starts with the store empty (the workers begin its plan when the
  trainer asks for it), so the second epoch shows the rate the loader sustains.
- `profile_steady`: the --profile per-step counts over the steady steps only (no warm-up, no log line).
"""

from __future__ import annotations

import os
import threading
import time

SHM = "/dev/shm"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _kib(text: str | None, field: str) -> int | None:
    for line in (text or "").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def _shm_used() -> int | None:
    try:
        st = os.statvfs(SHM)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class ProcSampler:
    """Samples process `pid` (the run's main process) and its child processes until `stop()`. What
    /proc does not show (no task/*/children and no listing of /proc to find them by parent; no
    smaps_rollup, as under gVisor) is reported as unavailable, never as 0."""

    def __init__(self, pid: int, interval: float = 0.25, proc: str = "/proc"):
        self.pid, self.interval, self.root = pid, interval, proc
        self.tick = os.sysconf("SC_CLK_TCK")
        self.shm_base = _shm_used()
        self.start = time.perf_counter()
        self.series: list[tuple[float, float, float]] = []  # (unix time, main CPU s, children's CPU s)
        self.rss = self.workers_pss = self.shm = 0
        self.workers = 0
        self.seen_children = self.seen_pss = False  # could /proc show them at all?
        self.kids_seen = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _stat(self, pid: int) -> list[str] | None:
        stat = _read(f"{self.root}/{pid}/stat")
        return None if stat is None else stat[stat.rindex(")") + 2:].split()

    def _cpu(self, fields: list[str]) -> float:
        return (int(fields[11]) + int(fields[12])) / self.tick

    def _children(self) -> list[tuple[int, list[str]]] | None:
        """The direct children and their stat fields; None when /proc cannot say."""
        lists = []
        try:  # each thread's children list (Linux 3.5+): no scan of every process on the machine
            lists = [_read(f"{self.root}/{self.pid}/task/{t}/children") for t in os.listdir(f"{self.root}/{self.pid}/task")]
        except OSError:
            pass
        if lists and all(x is not None for x in lists):
            pids = {int(p) for x in lists for p in x.split()}
        else:  # no children files (an older kernel, gVisor): find them by their parent
            try:
                pids = {int(e) for e in os.listdir(self.root) if e.isdigit()}
            except OSError:
                return None
            if self.pid not in pids:
                return None  # a /proc listing without our own process cannot show its children
        kids = []
        for pid in sorted(pids):
            fields = self._stat(pid)
            if fields and int(fields[1]) == self.pid:
                kids.append((pid, fields))
        return kids

    def _sample(self) -> None:
        fields = self._stat(self.pid)
        if fields is None:
            return
        kids = self._children()
        self.seen_children |= kids is not None
        kids = kids or []
        self.series.append((time.time(), self._cpu(fields), sum(self._cpu(f) for _, f in kids)))
        self.rss = max(self.rss, (_kib(_read(f"{self.root}/{self.pid}/status"), "VmRSS") or 0) * 1024)
        self.workers = max(self.workers, len(kids))
        pss = [_kib(_read(f"{self.root}/{k}/smaps_rollup"), "Pss") for k, _ in kids]
        if kids:
            self.kids_seen = True
            self.seen_pss |= any(v is not None for v in pss)
        self.workers_pss = max(self.workers_pss, sum(v or 0 for v in pss) * 1024)
        used = _shm_used()
        if used is not None and self.shm_base is not None:
            self.shm = max(self.shm, used - self.shm_base)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        """Stop sampling; the figures over the run's life (CPU: cores' worth, 1.0 = one core busy).
        A figure /proc could not give is None, with the reason under `unavailable`."""
        self._stop.set()
        self._thread.join()
        gib = 2**30
        unavailable = {}
        if self.series and not self.seen_children:
            unavailable["workers"] = "no /proc/PID/task/*/children and no /proc listing to find them by parent"
        if self.kids_seen and not self.seen_pss:
            unavailable["workers_pss"] = "no /proc/PID/smaps_rollup (gVisor has none)"
        return {"main_cpu_fraction": cores_between(self.series, 1), "main_peak_rss_gib": round(self.rss / gib, 3),
                "workers": None if "workers" in unavailable else self.workers,
                "workers_peak_pss_gib": None if unavailable else round(self.workers_pss / gib, 3),
                "shm_peak_gib": round(self.shm / gib, 3), "unavailable": unavailable,
                "series": [tuple(round(v, 3) for v in s) for s in self.series]}


def cores_between(series: list, column: int, t0: float | None = None, t1: float | None = None) -> float | None:
    """Cores' worth of CPU (column 1: the main process, 2: its children) between unix times t0 and t1
    (default: the whole series). The CPU counters are read at t0 and t1 by linear interpolation
    between the samples either side, so a window shorter than the sampling interval (a fast box's
    smoke run) still gets its figure; None when the series does not span the window."""
    if len(series) < 2:
        return None
    t0 = series[0][0] if t0 is None else t0
    t1 = series[-1][0] if t1 is None else t1
    if t1 <= t0 or t0 < series[0][0] or t1 > series[-1][0]:
        return None

    def at(t: float) -> float:
        for a, b in zip(series, series[1:]):
            if a[0] <= t <= b[0]:
                return a[column] if b[0] == a[0] else a[column] + (b[column] - a[column]) * (t - a[0]) / (b[0] - a[0])
        raise AssertionError("inside the series by the check above")

    return (at(t1) - at(t0)) / (t1 - t0)


def window(records: list[dict], batch: int, *, world: int = 1, epochs=(1,), skip: int = 0,
           rounds_of: int | None = None) -> dict:
    """img/s and data-wait over the train_interval records of `epochs` (0-based) whose interval
    starts `skip` or more steps into its epoch (`batch` per rank, `world` ranks: the records' img/s
    counts all of them); with `rounds_of` (the worker count) the window also ends on a whole round
    of the workers: an epoch's last, partial round takes a round's time for fewer batches, which
    reads low in a short epoch (log every `rounds_of` steps so that a record falls there). Returns
    the window (epochs, steps, images, seconds, unix start and end) with the figures; img/s None when
    no interval qualifies."""
    out = {"epochs": list(epochs), "skip_steps": skip, "rounds_of": rounds_of, "steps": 0, "images": 0,
           "seconds": 0.0, "intervals": 0, "img_per_s": None, "data_wait_fraction": None, "t0": None, "t1": None}
    ends: dict = {}  # epoch -> its last global step
    for r in records:
        if r.get("kind") in ("train_interval", "epoch") and "epoch" in r and "step" in r:
            ends[r["epoch"]] = max(ends.get(r["epoch"], 0), r["step"])
    wait = 0.0
    for e in epochs:
        first = max([v for k, v in ends.items() if k < e], default=0)  # global step before the epoch's first
        last = ends.get(e, first)
        if rounds_of:
            last = first + skip + rounds_of * ((last - first - skip) // rounds_of)
        prev = first
        for r in (r for r in records if r.get("kind") == "train_interval" and r.get("epoch") == e):
            steps, start, prev = r["step"] - prev, prev, r["step"]
            if start - first < skip or r["step"] > last or not r.get("img_per_s") or steps <= 0:
                continue
            images = steps * batch * world
            seconds = images / r["img_per_s"]
            out["steps"] += steps
            out["images"] += images
            out["seconds"] += seconds
            out["intervals"] += 1
            wait += r["data_wait_fraction"] * seconds
            if out["t0"] is None:
                out["t0"] = r["time"] - seconds
            out["t1"] = r["time"]
    if out["seconds"] > 0:
        out["img_per_s"] = out["images"] / out["seconds"]
        out["data_wait_fraction"] = wait / out["seconds"]
    return out


def engine_sync_steps(total: int, log_interval: int) -> set[int]:
    """The ProfilerStep numbers in which the training loop (engine.train_one_epoch) syncs by design:
    after step 1 (first-step time), before step warm-up + 1 (the steady clock starts), and at each log
    line (every log_interval steps and the last). ProfilerStep#N holds the end of step N and the
    body of step N + 1."""
    warmup = min(10, total // 4)
    return {1, warmup, total} | {k for k in range(1, total + 1) if k % log_interval == 0}


def profile_steady(per_step: list[dict], *, total: int, log_interval: int) -> dict:
    """Host syncs, host reads and D2H copies per step over the steady profiled steps: after the
    engine's warm-up and without its own sync points (engine_sync_steps)."""
    warmup = min(10, total // 4)
    skip = engine_sync_steps(total, log_interval)
    steady = [s for s in per_step if s["step"] > warmup and s["step"] not in skip]
    n = len(steady)
    out = {"steps": [s["step"] for s in steady], "profiled_steps": len(per_step)}
    for key in ("host_syncs", "item_calls", "dtoh_copies", "other_thread_syncs"):
        out[f"{key}_per_step"] = sum(s[key] for s in steady) / n if n else None
    out["step_ms_median"] = sorted(s["ms"] for s in steady)[n // 2] if n else None
    return out
