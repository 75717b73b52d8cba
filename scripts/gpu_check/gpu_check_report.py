"""The GPU check's verdicts and its one table, from the figures its steps recorded (used by
scripts/gpu_check/gpu_check.py; what the figures are and how they are measured: gpu_check_measure.py).

- `verdicts`: one line per question of the check, its figure beside its goal, and why when it is "no".
- `table`: the check as markdown: the verdicts, then one row per measurement.
"""

from __future__ import annotations

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


def _setup_rows(result: dict) -> list[tuple]:
    """What ran where: the device, the software, the data."""
    st = result["steps"]
    env, data = st.get("env", {}), st.get("data", {})
    return [("device", result["device"], f"{result['mode']}, {env.get('cores', '-')} cores, /dev/shm "
                                         f"{env.get('shm_total_gib', '-')} GiB, NVML {env.get('nvml', '-')}"),
            ("software", env.get("torch") or env.get("status", "-"),
             f"{env.get('torchvision') or 'torchvision -'}, {env.get('pillow', '-')}, Python {env.get('python', '-')}; "
             f"decoder {env.get('decoder', '-')} (libjpeg-turbo {env.get('turbo_libjpeg') or '-'}, "
             f"{env.get('extensions', '-')})"),
            ("data", f"{data.get('images', '-')} JPEGs", f"{_f(data.get('mean_kb'), '.0f')} KB mean, "
                                                         f"{_pct(data.get('progressive_fraction'))} progressive, "
                                                         f"shards: {data.get('format', '-')}; {data.get('status', '-')}")]


def _ceiling_rows(st: dict) -> list[tuple]:
    """The synthetic ceiling at the start and at the end (its drift)."""
    rows = []
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
    return rows


def _forced_cut_row(cut: dict) -> tuple:
    """The smoke's run killed mid-epoch 2: its row, and what of its process group outlived the kill."""
    name, value, detail = _run_row("run killed mid-epoch 2 (forced cut)", cut)
    if has_figures(cut):
        detail += (f"; process group: {cut.get('group_at_kill', '-')} at the kill, "
                   f"{len(cut.get('left_behind') or [])} left after it")
    return name, value, detail


def _bench_row(b: dict) -> tuple:
    return ("bench-loader per worker", f"{_f(b.get('images_per_s_per_worker'))} img/s" if b.get("status") == "ok"
            else b.get("status", "not run"), f"{b.get('workers', '-')} workers, {b.get('decoder', '-')}; "
            f"the ceiling needs ~{_f((b.get('derived') or {}).get('workers_for_ceiling'), '.1f')} workers")


def _sync_rows(st: dict) -> list[tuple]:
    """The --profile runs (bf16, fp16 + GradScaler): host syncs and D2H copies per steady step."""
    rows = []
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
    return rows


def _gpu_decode_rows(g: dict) -> list[tuple]:
    """The --gpu-decode loader probe: its timing, the JPEG engine, and the stream-safety probe."""
    if g.get("status") != "ok":
        return [_status_row("--gpu-decode loader", g)]
    t, nv, gr = g["timing"], g.get("nvml") or {}, g.get("grid") or {}
    pb = g["probe"]
    return [("--gpu-decode loader", f"{_f(t['img_per_s'])} img/s",
             f"batches {t['timed_from']}-{t['batches']}: per batch wait {_f(t['wait_ms_per_batch'], '.1f')} ms, "
             f"decode {_f(t['decode_ms_per_batch'], '.1f')} ms, crop {_f(t['crop_ms_per_batch'], '.1f')} ms; "
             f"JPEG engine (NVML) {nv.get('summary', '-')}; grid {_f(gr.get('grid_ms'), '.1f')} ms vs no grid "
             f"{_f(gr.get('no_grid_ms'), '.1f')} ms per batch"),
            ("stream-safety probe", "ok" if pb["ok"] else "FAILED",
             "; ".join(f"{m}: {pb[m]['corrupted_decodes']}/{pb[m]['iterations']} corrupted, "
                       f"{pb[m]['wrong_pending_sums']} wrong sums" for m in pb["modes"])
             + f"; mean |GPU - CPU decoder| {pb['mean_abs_diff_vs_cpu_max']:.2f} (tolerance {pb['tolerance']})")]


def _augment_row(a: dict) -> tuple:
    """The compiled run with MixUp/CutMix/erasing/EMA against the compiled ceiling."""
    name = "--compile, mixup/cutmix/erase/EMA, real data"
    if not has_figures(a):
        return _status_row(name, a)
    d, w = a.get("derived") or {}, a.get("window") or {}
    return (name, f"{_f(w.get('img_per_s'))} img/s{_cut(a)}",
            f"window: epoch 2 from step {w.get('skip_steps')}, {w.get('steps')} steps; efficiency "
            f"{_f(d.get('efficiency'), '.3f')} vs the compiled ceiling (goal >= {EFFICIENCY_GOAL}); "
            f"first step {_f(a['epoch'].get('first_step_seconds'), '.1f')} s (compile), compiled ceiling "
            f"{_f(d.get('ceiling_img_per_s'))} img/s ({_f(d.get('compile_speedup'), '.2f')}x the eager one), "
            f"data-wait {_pct(a['window'].get('data_wait_fraction'))}, EMA val top-1 {_f(a['epoch'].get('ema_val_top1'), '.3f')}")


def table(result: dict) -> str:
    """The check as markdown, from the steps so far: the verdicts (question | verdict | figure and
    goal), then the measurements (measurement | value | detail)."""
    st = result["steps"]
    rows = [*_setup_rows(result), *_ceiling_rows(st), _run_row("real loader", st.get("real", {}))]
    if result.get("mode") == "cpu-smoke":
        rows.append(_forced_cut_row(st.get("forced_cut", {})))
    rows += [_bench_row(st.get("bench_loader", {})), *_sync_rows(st), *_gpu_decode_rows(st.get("gpu_decode_loader", {})),
             _run_row("--gpu-decode training", st.get("gpu_decode_train", {}))]
    dd = st.get("ddp", {})
    rows.append(("2-rank DDP, one GPU (gloo)", dd.get("verdict", dd.get("status", "not run")) if dd.get("status") == "ok"
                 else dd.get("status", "not run"), dd.get("detail", "")))
    rows += [_run_row(name, st.get(key, {})) for name, key in (("recipe ffcv-rn50-16", "recipe_rn50"),
                                                                ("recipe ffcv-rn18-16", "recipe_rn18"))]
    rows.append(_augment_row(st.get("augment_compile", {})))
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
