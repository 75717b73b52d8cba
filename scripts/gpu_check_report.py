"""What the GPU check measures from outside a run, and its one table (used by scripts/gpu_check.py).

- `ProcSampler`: a run's main-process CPU use (utime + stime from /proc/PID/stat), its peak RSS, its
  loader workers' memory (PSS, so shared pages are not counted once per worker) and /dev/shm use,
  sampled every 0.25 s while it runs: per rank, so the figures scale to 8 ranks.
- `steady`: img/s and data-wait from a run's train_interval records after warm-up, not whole-epoch
  figures that include the workers' start-up and first refill.
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


def _kib(text: str | None, field: str) -> int:
    for line in (text or "").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _shm_used() -> int | None:
    try:
        st = os.statvfs(SHM)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class ProcSampler:
    """Samples process `pid` (the run's main process) and its child processes until `stop()`."""

    def __init__(self, pid: int, interval: float = 0.25):
        self.pid, self.interval = pid, interval
        self.tick = os.sysconf("SC_CLK_TCK")
        self.shm_base = _shm_used()
        self.start = time.perf_counter()
        self.first_cpu = self.last_cpu = None
        self.rss = self.workers_pss = self.shm = 0
        self.workers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _cpu(self) -> float | None:
        stat = _read(f"/proc/{self.pid}/stat")
        if stat is None:
            return None
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / self.tick

    def _children(self) -> list[int]:
        kids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = _read(f"/proc/{entry}/stat")
                if stat and int(stat[stat.rindex(")") + 2:].split()[1]) == self.pid:
                    kids.append(int(entry))
        return kids

    def _sample(self) -> None:
        cpu = self._cpu()
        if cpu is None:
            return
        self.first_cpu = cpu if self.first_cpu is None else self.first_cpu
        self.last_cpu = cpu
        self.rss = max(self.rss, _kib(_read(f"/proc/{self.pid}/status"), "VmRSS") * 1024)
        kids = self._children()
        self.workers = max(self.workers, len(kids))
        self.workers_pss = max(self.workers_pss, sum(
            _kib(_read(f"/proc/{k}/smaps_rollup"), "Pss") * 1024 for k in kids))
        used = _shm_used()
        if used is not None and self.shm_base is not None:
            self.shm = max(self.shm, used - self.shm_base)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        """Stop sampling; the figures over the run's life (CPU: cores' worth, 1.0 = one core busy)."""
        self._stop.set()
        self._thread.join()
        wall = time.perf_counter() - self.start
        cpu = None if self.first_cpu is None else (self.last_cpu - self.first_cpu) / max(wall, 1e-9)
        gib = 2**30
        return {"main_cpu_fraction": cpu, "main_peak_rss_gib": round(self.rss / gib, 3),
                "workers": self.workers, "workers_peak_pss_gib": round(self.workers_pss / gib, 3),
                "shm_peak_gib": round(self.shm / gib, 3)}


def steady(records: list[dict], batch: int) -> dict:
    """img/s and data-wait fraction over the train_interval records that start after warm-up (the
    first min(10, steps/4) steps, as the trainer's steady_img_per_s)."""
    intervals = [r for r in records if r.get("kind") == "train_interval"]
    if not intervals:
        return {"img_per_s": None, "data_wait_fraction": None, "intervals": 0}
    skip = min(10, intervals[-1]["step"] // 4)
    prev, images, span, wait, used = 0, 0.0, 0.0, 0.0, 0
    for r in intervals:
        steps, start = r["step"] - prev, prev
        prev = r["step"]
        if start < skip or not r.get("img_per_s"):
            continue
        n = steps * batch
        seconds = n / r["img_per_s"]
        images, span, wait, used = images + n, span + seconds, wait + r["data_wait_fraction"] * seconds, used + 1
    if not used:
        return {"img_per_s": None, "data_wait_fraction": None, "intervals": 0}
    return {"img_per_s": images / span, "data_wait_fraction": wait / span, "intervals": used}


# ----------------------------------------------------------------------------- the table

def _f(value, spec: str = ".0f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def _run_row(name: str, s: dict, ceiling: float | None) -> tuple:
    if s.get("status") != "ok":
        return name, s.get("status", "-"), ""
    img = s["steady"]["img_per_s"] or s["epoch"]["steady_img_per_s"]
    p, e = s["proc"], s["epoch"]
    parts = [f"data-wait {_pct(s['steady']['data_wait_fraction'])}",
             f"main CPU {_pct(e.get('main_cpu_fraction'))} (whole run {_pct(p['main_cpu_fraction'])})",
             f"RSS main {_f(p['main_peak_rss_gib'], '.2f')} GiB + {p['workers']} workers PSS "
             f"{_f(p['workers_peak_pss_gib'], '.2f')} GiB", f"/dev/shm {_f(p['shm_peak_gib'], '.2f')} GiB",
             f"pinned {_f(e.get('pinned_peak_gib'), '.2f')} GiB", f"GPU {_f(e.get('gpu_mem_gib'), '.1f')} GiB"]
    if ceiling and img:
        parts.insert(0, f"efficiency {img / ceiling:.3f}")
    return name, f"{_f(img)} img/s", ", ".join(parts)


def table(result: dict) -> str:
    """The check as one markdown table (measurement | value | detail)."""
    st = result["steps"]
    env, data = st.get("env", {}), st.get("data", {})
    ceiling = (st.get("ceiling", {}).get("steady") or {}).get("img_per_s")
    rows = [("device", result["device"], f"{result['mode']}, {env.get('cores', '-')} cores, /dev/shm "
                                         f"{env.get('shm_total_gib', '-')} GiB"),
            ("software", env.get("torch") or "-", f"{env.get('torchvision', '-')}, {env.get('pillow', '-')}, "
                                                   f"decoder {env.get('decoder', '-')} (turbo: libjpeg-turbo "
                                                   f"{env.get('turbo_libjpeg') or '-'}, {env.get('turbo_build', '-')}), "
                                                   f"Python {env.get('python', '-')}"),
            ("data", f"{data.get('images', '-')} JPEGs", f"{_f(data.get('mean_kb'), '.0f')} KB mean, "
                                                         f"{_pct(data.get('progressive_fraction'))} progressive, "
                                                         f"{data.get('status', '-')}")]
    for name, key in (("ceiling (synthetic, eager)", "ceiling"), ("ceiling, --compile", "ceiling_compile"),
                      ("ceiling at the end", "ceiling_end")):
        s = st.get(key, {})
        if s.get("status") != "ok":
            rows.append((name, s.get("status", "-"), ""))
            continue
        img = s["steady"]["img_per_s"] or s["epoch"]["steady_img_per_s"]
        detail = f"first step {_f(s['epoch']['first_step_seconds'], '.1f')} s"
        if key == "ceiling_compile" and st.get("ceiling", {}).get("status") == "ok":
            eager = st["ceiling"]["epoch"]["first_step_seconds"] or 0
            detail += f" (compile ~{_f((s['epoch']['first_step_seconds'] or 0) - eager, '.0f')} s)"
        if key == "ceiling_end" and ceiling and img:
            detail += f", drift {100 * (img / ceiling - 1):+.1f} % vs the first"
        rows.append((name, f"{_f(img)} img/s", detail))
    for n, s in st.get("real", {}).get("runs", {}).items():
        rows.append(_run_row(f"real loader, {n} workers", s, ceiling))
    b = st.get("bench_loader", {})
    per = b.get("images_per_s_per_worker")
    need = f", the ceiling needs ~{ceiling / per:.1f} workers" if per and ceiling else ""
    rows.append(("bench-loader per worker", f"{_f(per)} img/s" if per else b.get("status", "-"),
                 f"{b.get('workers', '-')} workers, {b.get('decoder', '-')}{need}"))
    pr = st.get("profile", {})
    sy = pr.get("syncs") or {}
    rows.append(("host syncs (--profile)", f"{_f(sy.get('host_syncs_per_step'), '.2f')} /step" if sy else
                 pr.get("status", "-"), f"DtoH copies {_f(sy.get('dtoh_copies_per_step'), '.2f')} /step, H2D copies "
                 f"{sy.get('htod_copies', '-')} overlapping kernels {_pct(sy.get('htod_overlap_fraction'))}"))
    g = st.get("gpu_decode_loader", {})
    t, pb = g.get("timing") or {}, g.get("probe") or {}
    rows.append(("--gpu-decode loader", f"{_f(t.get('img_per_s'))} img/s" if t else g.get("status", "-"),
                 f"per batch: wait {_f(t.get('wait_ms_per_batch'), '.1f')} ms, decode "
                 f"{_f(t.get('decode_ms_per_batch'), '.1f')} ms, crop {_f(t.get('crop_ms_per_batch'), '.1f')} ms; "
                 f"baseline (hardware path) {t.get('hardware_decodes', '-')}, other (host path) {t.get('host_decodes', '-')}"))
    if pb:
        d, u = pb["drained"], pb["not_drained"]
        rows.append(("corruption probe", "ok" if pb["ok"] else "FAILED",
                     f"drained: {d['corrupted_decodes']}/{d['iterations']} corrupted, {d['wrong_pending_sums']} wrong "
                     f"sums; not drained: {u['corrupted_decodes']}/{u['iterations']}, {u['wrong_pending_sums']}; "
                     f"mean |GPU - CPU decoder| {d['mean_abs_diff_vs_cpu_max']:.2f} (tolerance "
                     f"{pb['tolerance_mean_abs_diff']})"))
    gt = st.get("gpu_decode_train", {})
    if gt.get("status") == "ok" and gt.get("exit") == 2:
        rows.append(("--gpu-decode training", "refused on the CPU (expected)", gt.get("error") or ""))
    else:
        rows.append(_run_row("--gpu-decode training", gt, ceiling))
    f16 = st.get("fp16", {})
    if f16.get("status") == "ok":
        e = f16["epoch"]
        rows.append(("fp16 + GradScaler (fused SGD)", f"{_f(f16['steady']['img_per_s'])} img/s",
                     f"final scale {_f(e.get('amp_scale'), '.0f')}, skipped steps {e.get('amp_skipped_steps')}"))
    else:
        rows.append(("fp16 + GradScaler (fused SGD)", f16.get("status", "-"), ""))
    lines = ["| measurement | value | detail |", "|---|---:|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    lines.append(f"\n{result['mode']} check: {result['elapsed_s']} s of a {result['budget_s']:.0f} s budget")
    return "\n".join(lines) + "\n"
