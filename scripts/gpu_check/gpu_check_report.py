"""What the GPU check measures from outside a run, and its one table (used by scripts/gpu_check/gpu_check.py).

- `ProcSampler`: a run's main-process CPU use (utime + stime from /proc/PID/stat), its loader workers'
  CPU (the same, summed over its child processes), peak RSS, the workers' memory (PSS, so shared pages
  are not counted once per worker) and /dev/shm use, sampled every 0.25 s while it runs, kept as a
  series so the CPU of any time window can be read back: per rank, so the figures scale to 8 ranks.
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


# ----------------------------------------------------------------------------- the verdicts

EFFICIENCY_GOAL = 0.95  # the loader's goal: >= 0.95 of the model-only ceiling (docs/training.md, "GPU check")
SATURATED = 0.9         # a process (or the workers together) this close to its cores' worth is CPU-bound


def _verdict(question: str, verdict: str, figure: str, goal: str, why: str = "") -> dict:
    return {"question": question, "verdict": verdict, "figure": figure, "goal": goal, "why": why}


def _unsettled(question: str, s: dict, goal: str, what: str = "") -> dict:
    """No answer: why (the step's status, or `what` its figures lack)."""
    return _verdict(question, "not settled", "-", goal, s.get("status", "not run") if not has_figures(s) else what)


def why_below(s: dict, workers: int | None) -> str:
    """Why a run's efficiency is under the goal, from its own figures (the first cause that applies)."""
    w, d, p = s.get("window") or {}, s.get("derived") or {}, s.get("proc") or {}
    loader, main, wait = d.get("loader_cores"), d.get("main_cores"), w.get("data_wait_fraction")
    n = workers or p.get("workers")
    if loader is not None and n and loader >= SATURATED * n:
        return (f"the {n} loader workers are CPU-bound ({loader:.1f} cores): more cores per GPU, or a cheaper "
                f"decode (the grid, --gpu-decode)")
    if main is not None and main >= SATURATED:
        return f"the main process is CPU-bound ({main:.2f} cores): host work per step (collation, pinning, H2D)"
    if wait is not None and wait >= 1 - EFFICIENCY_GOAL:
        return f"the trainer waits for data {100 * wait:.0f} % of the window with the workers not CPU-bound: I/O or start-up"
    return "little data-wait and no CPU-bound process: the loader's host work slows the step itself (syncs, pinning)"


def _efficiency(question: str, s: dict, workers: int | None) -> dict:
    goal = f">= {EFFICIENCY_GOAL} of the ceiling"
    e = (s.get("derived") or {}).get("efficiency")
    if not has_figures(s) or e is None:
        return _unsettled(question, s, goal, "no efficiency (no window or no ceiling)" if has_figures(s) else "")
    figure = f"efficiency {e:.3f}{_cut(s)}"
    return _verdict(question, "yes" if e >= EFFICIENCY_GOAL else "no", figure, goal,
                    "" if e >= EFFICIENCY_GOAL else why_below(s, workers))


def _syncs(question: str, s: dict) -> dict:
    goal = "0 host syncs and 0 D2H copies per steady step"
    p = s.get("profile_steady") or {}
    syncs, d2h = p.get("host_syncs_per_step"), p.get("dtoh_copies_per_step")
    if not has_figures(s) or syncs is None:
        return _unsettled(question, s, goal)
    ok = syncs == 0 and d2h == 0
    return _verdict(question, "yes" if ok else "no", f"{syncs:.2f} syncs, {d2h:.2f} D2H copies /step", goal,
                    "" if ok else f".item() reads {_f(p.get('item_calls_per_step'), '.2f')} /step: the trace "
                                  f"(runs.tar.gz) names the ops")


def verdicts(result: dict) -> list[dict]:
    """One line per question of the check, each with its figure beside its goal (the JSON's `verdicts`)."""
    st = result["steps"]
    workers = ((st.get("real") or {}).get("start") or {}).get("workers")
    out = [_efficiency("Does the CPU loader keep up at the default workers? (real)", st.get("real", {}), workers)]
    for name, key in (("ffcv-rn50-16", "recipe_rn50"), ("ffcv-rn18-16", "recipe_rn18"),
                      ("--compile + MixUp/CutMix/erasing/EMA, vs the compiled ceiling", "augment_compile")):
        out.append(_efficiency(f"Does the loader keep up? ({name})", st.get(key, {}), workers))
    out.append(_syncs("Is the bf16 step free of host syncs?", st.get("profile", {})))
    out.append(_syncs("Is the fp16 + GradScaler step free of host syncs?", st.get("fp16", {})))
    cpu, gpu = st.get("real", {}), st.get("gpu_decode_train", {})
    a, b = (cpu.get("window") or {}).get("img_per_s"), (gpu.get("window") or {}).get("img_per_s")
    question, goal = "Does --gpu-decode train faster than the CPU loader?", "--gpu-decode img/s > real's"
    if has_figures(cpu) and has_figures(gpu) and a and b:
        out.append(_verdict(question, "yes" if b > a else "no", f"{b:.0f} vs {a:.0f} img/s ({b / a:.2f}x)"
                            f"{_cut(gpu) or _cut(cpu)}", goal))
    else:
        out.append(_unsettled(question, gpu if not has_figures(gpu) else cpu, goal))
    g = st.get("gpu_decode_loader", {})
    nv = g.get("nvml") or {}
    question, goal = "Does nvJPEG use the GPU's hardware JPEG engine?", "yes: NVML shows the engine busy while decoding"
    if has_figures(g) and nv.get("used") is not None:
        out.append(_verdict(question, "yes" if nv["used"] else "no", nv.get("summary", "-"), goal))
    else:
        out.append(_unsettled(question, g, goal, f"NVML {nv.get('available', '-')}" if has_figures(g) else ""))
    pb = g.get("probe") or {}
    question, goal = "Is --gpu-decode stream-safe? (the probe, mode loader)", "0 corrupted decodes, 0 wrong sums"
    if has_figures(g) and "ok" in pb:
        lo = pb.get("loader") or {}
        out.append(_verdict(question, "yes" if pb["ok"] else "no", f"{lo.get('corrupted_decodes')}/"
                            f"{lo.get('iterations')} corrupted, {lo.get('wrong_pending_sums')} wrong sums", goal))
    else:
        out.append(_unsettled(question, g, goal))
    dd = st.get("ddp", {})
    question, goal = "Does 2-rank DDP on one GPU train correctly?", "identical weights, equal steps, every val sample once"
    if has_figures(dd) and "verdict" in dd:
        out.append(_verdict(question, "yes" if dd["verdict"] == "ok" else "no", dd.get("detail", "-"), goal))
    else:
        out.append(_unsettled(question, dd, goal))
    return out


# ----------------------------------------------------------------------------- the table

def _f(value, spec: str = ".0f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def _status_row(name: str, s: dict) -> tuple:
    return name, s.get("status", "not run"), ""


def has_figures(s: dict) -> bool:
    """A step that ran to its end, or was cut at its cap and keeps what its records give."""
    return str(s.get("status", "")).startswith(("ok", "cut"))


def _cut(s: dict) -> str:
    return " (cut)" if str(s.get("status", "")).startswith("cut") else ""


def _run_row(name: str, s: dict) -> tuple:
    """A training run's row: its window figures (all in the step's JSON as derived)."""
    if not has_figures(s):
        return _status_row(name, s)
    w, d = s.get("window") or {}, s.get("derived") or {}
    p = s.get("proc") or {}
    unknown = p.get("unavailable") or {}
    loader = "unavailable" if "workers" in unknown else f"{_f(d.get('loader_cores'), '.1f')} cores"
    parts = [f"efficiency {_f(d.get('efficiency'), '.3f')} vs {_f(d.get('ceiling_img_per_s'))} img/s (goal >= {EFFICIENCY_GOAL})"
             if d.get("efficiency") is not None else "efficiency - (no ceiling)",
             f"data-wait {_pct(w.get('data_wait_fraction'))}",
             f"main CPU {_f(d.get('main_cores'), '.2f')} cores, loader {loader}",
             f"window: epoch {'+'.join(str(e + 1) for e in w.get('epochs', []))} from step {w.get('skip_steps')}, "
             f"{w.get('steps')} steps" + (", from a cut run" if _cut(s) else ""),
             f"decoder {s.get('decoder', '-')}, shards {s.get('shards', '-')}"]
    workers = "unavailable" if "workers" in unknown else p.get("workers", "-")
    pss = "unavailable" if unknown else f"{_f(p.get('workers_peak_pss_gib'), '.2f')} GiB"
    parts.append(f"RSS {_f(p.get('main_peak_rss_gib'), '.2f')} GiB + {workers} workers PSS {pss}, "
                 f"/dev/shm {_f(p.get('shm_peak_gib'), '.2f')} GiB")
    return name, f"{_f(w.get('img_per_s'))} img/s{_cut(s)}", "; ".join(parts)


def table(result: dict) -> str:
    """The check as markdown, from the steps so far: the verdicts (question | verdict | figure and
    goal), then the measurements (measurement | value | detail)."""
    st = result["steps"]
    env, data = st.get("env", {}), st.get("data", {})
    rows = [("device", result["device"], f"{result['mode']}, {env.get('cores', '-')} cores, /dev/shm "
                                         f"{env.get('shm_total_gib', '-')} GiB, NVML {env.get('nvml', '-')}"),
            ("software", env.get("torch") or env.get("status", "-"),
             f"{env.get('torchvision') or 'torchvision -'}, {env.get('pillow', '-')}, Python {env.get('python', '-')}; "
             f"decoder {env.get('decoder', '-')} (libjpeg-turbo {env.get('turbo_libjpeg') or '-'}, "
             f"{env.get('extensions', '-')})"),
            ("data", f"{data.get('images', '-')} JPEGs", f"{_f(data.get('mean_kb'), '.0f')} KB mean, "
                                                         f"{_pct(data.get('progressive_fraction'))} progressive, "
                                                         f"shards: {data.get('format', '-')}; {data.get('status', '-')}")]
    for name, key in (("ceiling (synthetic, eager)", "ceiling"), ("ceiling at the end", "ceiling_end")):
        s = st.get(key, {})
        if not has_figures(s):
            rows.append(_status_row(name, s))
            continue
        w, d = s["window"], s.get("derived") or {}
        detail = f"steps {w['skip_steps'] + 1}-{w['skip_steps'] + w['steps']}, first step {_f(s['epoch'].get('first_step_seconds'), '.1f')} s"
        if d.get("drift") is not None:
            detail += f", drift {100 * d['drift']:+.1f} % vs the first"
        rows.append((name, f"{_f(w['img_per_s'])} img/s", detail))
    rows.append(_run_row("real loader", st.get("real", {})))
    if result.get("mode") == "cpu-smoke":
        cut = st.get("forced_cut", {})
        name, value, detail = _run_row("run killed mid-epoch 2 (forced cut)", cut)
        if has_figures(cut):
            detail += (f"; process group: {cut.get('group_at_kill', '-')} at the kill, "
                       f"{len(cut.get('left_behind') or [])} left after it")
        rows.append((name, value, detail))
    b = st.get("bench_loader", {})
    rows.append(("bench-loader per worker", f"{_f(b.get('images_per_s_per_worker'))} img/s" if b.get("status") == "ok"
                 else b.get("status", "not run"), f"{b.get('workers', '-')} workers, {b.get('decoder', '-')}; "
                 f"the ceiling needs ~{_f((b.get('derived') or {}).get('workers_for_ceiling'), '.1f')} workers"))
    for name, key in (("host syncs, bf16 (--profile)", "profile"), ("host syncs, fp16 + GradScaler", "fp16")):
        s = st.get(key, {})
        if not has_figures(s):
            rows.append(_status_row(name, s))
            continue
        p, e = s["profile_steady"], s.get("epoch") or {}
        extra = f", final scale {_f(e.get('amp_scale'), '.0f')}, skipped {e.get('amp_skipped_steps')}" if key == "fp16" else ""
        rows.append((name, f"{_f(p['host_syncs_per_step'], '.2f')} /step",
                     f"over {len(p['steps'])} steady steps: item() {_f(p['item_calls_per_step'], '.2f')}, D2H copies "
                     f"{_f(p['dtoh_copies_per_step'], '.2f')}, other threads' syncs {_f(p['other_thread_syncs_per_step'], '.2f')} "
                     f"/step; H2D overlap {_pct(s['syncs'].get('htod_overlap_fraction'))}; step {_f(p['step_ms_median'], '.1f')} ms{extra}"))
    g = st.get("gpu_decode_loader", {})
    if g.get("status") == "ok":
        t, nv, gr = g["timing"], g.get("nvml") or {}, g.get("grid") or {}
        rows.append(("--gpu-decode loader", f"{_f(t['img_per_s'])} img/s",
                     f"batches {t['timed_from']}-{t['batches']}: per batch wait {_f(t['wait_ms_per_batch'], '.1f')} ms, "
                     f"decode {_f(t['decode_ms_per_batch'], '.1f')} ms, crop {_f(t['crop_ms_per_batch'], '.1f')} ms; "
                     f"JPEG engine (NVML) {nv.get('summary', '-')}; grid {_f(gr.get('grid_ms'), '.1f')} ms vs no grid "
                     f"{_f(gr.get('no_grid_ms'), '.1f')} ms per batch"))
        pb = g["probe"]
        rows.append(("stream-safety probe", "ok" if pb["ok"] else "FAILED",
                     "; ".join(f"{m}: {pb[m]['corrupted_decodes']}/{pb[m]['iterations']} corrupted, "
                               f"{pb[m]['wrong_pending_sums']} wrong sums" for m in pb["modes"])
                     + f"; mean |GPU - CPU decoder| {pb['mean_abs_diff_vs_cpu_max']:.2f} (tolerance {pb['tolerance']})"))
    else:
        rows.append(_status_row("--gpu-decode loader", g))
    rows.append(_run_row("--gpu-decode training", st.get("gpu_decode_train", {})))
    dd = st.get("ddp", {})
    rows.append(("2-rank DDP, one GPU (gloo)", dd.get("verdict", dd.get("status", "not run")) if dd.get("status") == "ok"
                 else dd.get("status", "not run"), dd.get("detail", "")))
    for name, key in (("recipe ffcv-rn50-16", "recipe_rn50"), ("recipe ffcv-rn18-16", "recipe_rn18")):
        rows.append(_run_row(name, st.get(key, {})))
    a = st.get("augment_compile", {})
    if has_figures(a):
        d, w = a.get("derived") or {}, a.get("window") or {}
        rows.append(("--compile, mixup/cutmix/erase/EMA, real data", f"{_f(w.get('img_per_s'))} img/s{_cut(a)}",
                     f"window: epoch 2 from step {w.get('skip_steps')}, {w.get('steps')} steps; efficiency "
                     f"{_f(d.get('efficiency'), '.3f')} vs the compiled ceiling (goal >= {EFFICIENCY_GOAL}); "
                     f"first step {_f(a['epoch'].get('first_step_seconds'), '.1f')} s (compile), compiled ceiling "
                     f"{_f(d.get('ceiling_img_per_s'))} img/s ({_f(d.get('compile_speedup'), '.2f')}x the eager one), "
                     f"data-wait {_pct(a['window'].get('data_wait_fraction'))}, EMA val top-1 {_f(a['epoch'].get('ema_val_top1'), '.3f')}"))
    else:
        rows.append(_status_row("--compile, mixup/cutmix/erase/EMA, real data", a))
    sb = (st.get("ddp") or {}).get("syncbn_compile") or {}
    rows.append(("SyncBatchNorm + --compile", sb.get("verdict", "not run"), sb.get("detail", "")))
    if result.get("extension_failure"):
        rows.insert(2, ("extension failure", "FAILED", result["extension_failure"]))
    lines = ["| question | verdict | figure (goal) |", "|---|---|---|"]
    lines += [f"| {v['question']} | {v['verdict']}{': ' + v['why'] if v['why'] else ''} | {v['figure']} ({v['goal']}) |"
              .replace("\n", " ") for v in verdicts(result)]
    lines += ["", "| measurement | value | detail |", "|---|---:|---|"]
    lines += [f"| {a} | {b} | {str(c).replace('|', '/')} |" for a, b, c in rows]
    lines.append(f"\n{result['mode']} check: {result['elapsed_s']} s of a {result['budget_s']:.0f} s budget"
                 f"{'' if result.get('finished') else ' (still running, or cut short)'}")
    return "\n".join(lines) + "\n"
