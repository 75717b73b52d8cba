"""scripts/gpu_check/gpu_check.sh --cpu-smoke: every step of the GPU check that can run on the CPU, tiny, so the
first run on a GPU machine does not die on a path, a flag or a missing key; the JSON after every step
(a real kill mid-check); and the check's own arithmetic (the measurement window against a queue
model of a loader that is slower than the model, the per-step profile counts)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts" / "gpu_check"))
import gpu_check  # noqa: E402
import gpu_check_measure as measure  # noqa: E402
import gpu_check_report as report  # noqa: E402
import gpu_check_run  # noqa: E402
import gpu_check_steps  # noqa: E402

RUN_KEYS = {"status", "seconds", "exit", "error", "proc", "window", "derived", "epoch"}
WINDOW_KEYS = {"epochs", "skip_steps", "steps", "images", "seconds", "img_per_s", "data_wait_fraction", "t0", "t1"}


def _smoke(tmp_path, *extra, **popen):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out")}
    return ["scripts/gpu_check/gpu_check.sh", "--cpu-smoke", str(tmp_path / "work"), *extra], dict(cwd=REPO, env=env, **popen)


@pytest.mark.timeout(600)
def test_cpu_smoke_runs_every_step(tmp_path):
    cmd, kw = _smoke(tmp_path)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=580, **kw)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["device"].startswith("cpu") and result["mode"] == "cpu-smoke" and result["finished"] is True
    steps = result["steps"]
    assert set(steps) == set(gpu_check.STEPS) and result["caps_s"] == gpu_check.CAPS
    cpu_only_not_run = {"gpu_decode_train"}
    recipes = {"recipe_rn50", "recipe_rn18"}
    for name, s in steps.items():
        if name in cpu_only_not_run:
            assert s["status"].startswith("not run on the CPU"), name
        elif name == "forced_cut":
            assert s["status"].startswith("cut: killed on purpose mid-run"), s["status"]
        elif name in recipes and not gpu_check_steps.recipe_available():
            assert s["status"] == "not run: --recipe not available in this tree", name
        else:
            assert s["status"] == "ok", (name, s["status"])
    for name in ("ceiling", "real", "profile", "fp16", "ceiling_end", "augment_compile", *(
            recipes if gpu_check_steps.recipe_available() else ())):
        assert RUN_KEYS <= set(steps[name]) and WINDOW_KEYS <= set(steps[name]["window"]), name
    cut = steps["forced_cut"]  # killed mid-epoch 2: the figures its records give, marked cut, nothing left
    assert cut["window"]["cut"] is True and cut["window"]["steps"] >= 2 and cut["window"]["img_per_s"] > 0
    assert cut["exit"] is None and cut["group_at_kill"] >= 2 and cut["left_behind"] == []  # the run and its worker
    for name in ("ceiling", "real", "profile", "fp16", "ceiling_end", "augment_compile", "forced_cut", *(
            recipes if gpu_check_steps.recipe_available() else ())):
        run = steps[name]
        assert run["left_behind"] == [] and run["run_info"]["start_method"] == "fork", name  # production's
        assert run["proc"]["unavailable"] == {} and run["proc"]["workers"] is not None, name
    for name in ("ceiling", "profile", "fp16", "ceiling_end"):  # --no-val: val answers nothing there
        assert steps[name]["epoch"]["val_top1"] is None, name
    assert steps["real"]["epoch"]["val_top1"] is not None
    skip = min(10, gpu_check.SMOKE.ceiling_batches // 4)  # the ceiling logs once a round of the 1 worker, as real does
    assert steps["ceiling"]["window"]["intervals"] == gpu_check.SMOKE.ceiling_batches - skip
    compiled = steps["augment_compile"]  # measured like real: epoch 2, after the workers' first round
    assert compiled["window"]["epochs"] == [1] and compiled["window"]["skip_steps"] == 1
    assert compiled["derived"]["efficiency"] is not None
    questions = [v["question"] for v in result["verdicts"]]
    assert len(questions) == 10 and all(v["goal"] for v in result["verdicts"])
    real = steps["real"]
    w, d = real["window"], real["derived"]
    assert w["epochs"] == [1] and w["skip_steps"] == 1 and w["steps"] > 0 and w["img_per_s"] > 0  # epoch 2, after 1 worker
    # every figure the table shows is in the JSON
    assert d["efficiency"] == pytest.approx(w["img_per_s"] / steps["ceiling"]["window"]["img_per_s"])
    assert d["main_cores"] is not None and d["loader_cores"] is not None
    assert real["decoder"].startswith("turbo") and real["shards"].startswith("restart grid on")
    assert steps["ceiling_end"]["derived"]["drift"] is not None
    assert steps["bench_loader"]["images_per_s_per_worker"] > 0 and steps["bench_loader"]["derived"]["workers_for_ceiling"]
    for name in ("profile", "fp16"):  # syncs per steady step: no warm-up, no log line
        p = steps[name]["profile_steady"]
        assert p["steps"] and min(p["steps"]) > min(10, gpu_check.SMOKE.profile_batches // 4)
        assert p["host_syncs_per_step"] == 0 and p["dtoh_copies_per_step"] == 0  # no CUDA here
    assert steps["profile"]["profile_steady"]["item_calls_per_step"] == 0  # bf16: the step reads nothing back
    assert steps["fp16"]["epoch"]["amp_scale"] > 0
    g = steps["gpu_decode_loader"]
    assert g["probe"]["ok"] is True and g["timing"]["hardware_path_by_header"] > 0 and g["timing"]["timed_from"] == 4
    assert g["grid"]["status"] == "ok" and g["grid"]["batch"] > 0 and g["nvml"]["available"].startswith("no")
    ddp = steps["ddp"]
    assert ddp["verdict"] == "ok" and all(ddp["checks"].values())
    sb = ddp["syncbn_compile"]
    assert sb["alone"]["graph_breaks"] == 0 and sb["alone"]["syncbn_layers"] == 2  # no group: plain batch_norm
    assert "expected input tensor to be on GPU" in sb["grouped"]["error"]  # the sync path needs CUDA: the GPU call
    a = steps["augment_compile"]
    assert a["epoch"]["ema_val_top1"] is not None and a["derived"]["ceiling_img_per_s"] > 0
    env = steps["env"]
    assert env["decoder"] == "turbo" and env["jpegtran_from"] and env["extensions"]
    table = (out / "gpu_check.md").read_text()
    assert table == (tmp_path / "work" / "gpu_check.md").read_text() and table in proc.stdout
    assert "stream-safety probe | ok" in table and "2-rank DDP, one GPU (gloo) | ok" in table
    assert "| Does the CPU loader keep up at the default workers? (real) | " in table and "(goal >= 0.95)" in table
    assert "| Is --gpu-decode stream-safe? (the probe, mode loader) | yes |" in table
    assert (out / "runs.tar.gz").stat().st_size > 0 and len(list(out.iterdir())) <= 8  # the device returns 8 files


def test_a_kill_mid_check_leaves_every_finished_step_in_the_json(tmp_path):
    """SIGKILL to the whole check while it works: the JSON (and table) from the last step boundary
    are there and whole; the step it was in says "running"; finished is False; a run under way (the
    ceiling's, when the kill falls there) is gone with its workers within seconds."""
    cmd, kw = _smoke(tmp_path, "--steps", "env,data,ceiling", start_new_session=True, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    proc = subprocess.Popen(cmd, **kw)
    path, running = tmp_path / "out" / "gpu_check.json", None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if path.exists():
                steps = json.loads(path.read_text())["steps"]
                running = next((n for n, s in steps.items() if s["status"] == "running"), None)
                if running == "ceiling" and (tmp_path / "work" / "runs" / "ceiling" / "run-info.json").exists():
                    break  # the kill falls in a run, its process group alive
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert running == "ceiling", "the check ended before it could be killed"
    import gpu_check_child as child  # a run in its own process group ends itself once the check is gone
    groups = [json.loads(p.read_text())["pgid"] for p in (tmp_path / "work" / "runs").glob("*/run-info.json")]
    assert groups
    deadline = time.monotonic() + 10
    while any(child.group_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [g for g in groups if child.group_alive(g)]
    result = json.loads(path.read_text())
    assert result["finished"] is False and result["steps"]["env"]["status"] == "ok"
    assert result["steps"][running]["status"] == "running" and "started_s" in result["steps"][running]
    assert "cut short" in (tmp_path / "out" / "gpu_check.md").read_text()


def test_unknown_steps_and_missing_modules_are_named_at_once(monkeypatch, capsys):
    assert gpu_check.main(["--cpu-smoke", "--steps", "env,warp_drive"]) == 2
    assert "unknown step(s) warp_drive" in capsys.readouterr().err
    monkeypatch.setattr(gpu_check, "REQUIRED_MODULES", ("torch", "no_such_module_for_the_check"))
    assert gpu_check.main(["--cpu-smoke"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no_such_module_for_the_check" in err and len(err.splitlines()) == 1


def test_required_modules_are_what_the_check_imports():
    """Nothing the check runs imports webdataset or braceexpand; what it requires, it imports."""
    code = ("import sys; sys.path.insert(0, 'scripts/gpu_check'); import gpu_check, gpu_check_probe, gpu_check_child; "
            "import imagenet_shards.train.trainer.cli, imagenet_shards.train.trainer.run, "
            "imagenet_shards.train.bench.run, imagenet_shards.pipeline.prepare.cli, "
            "imagenet_shards.train.loader.gpu_decode; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    loaded = set(subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.split())
    assert set(gpu_check.REQUIRED_MODULES) <= loaded
    assert not {"webdataset", "braceexpand"} & loaded


def _queue_model(efficiency: float, *, workers=15, prefetch=4, steps=78, epochs=2, first_step_s=5.0, log=5):
    """train_interval records (as engine.train_one_epoch writes them) of a run whose loader sustains
    `efficiency` of the model's rate: worker k % W makes batch k in W / efficiency model steps, at
    most `prefetch` batches per worker ahead of the trainer; the run's first step is slow
    (autotuning) and each epoch starts with the store empty (the workers begin on the trainer's ask)."""
    step_s, records, t, step = 0.1, [], 1000.0, 0
    make_s = workers * step_s / efficiency
    for epoch in range(epochs):
        begin, got = t, []
        free = [begin] * workers
        mark_t, mark_step, wait = t, step, 0.0
        for k in range(steps):
            start = max(free[k % workers], got[k - prefetch * workers] if k >= prefetch * workers else begin)
            free[k % workers] = ready = start + make_s
            got.append(max(t, ready))
            wait += got[k] - t
            t = got[k] + (first_step_s if epoch == 0 and k == 0 else step_s)
            step += 1
            if (k + 1) % log == 0 or k + 1 == steps:
                span = t - mark_t
                records.append({"kind": "train_interval", "epoch": epoch, "step": step, "time": t,
                                "img_per_s": (step - mark_step) * 256 / span, "data_wait_fraction": wait / span})
                mark_t, mark_step, wait = t, step, 0.0
        records.append({"kind": "epoch", "epoch": epoch, "step": step, "time": t})
    return records


def test_the_window_reads_a_slow_loader_right_where_the_first_epoch_reads_it_as_fast():
    """A queue model of a loader at 0.5, 0.74, 0.9 of the model's rate: the first epoch after warm-up
    reads high (0.74 reads 1.0: the store filled during the slow first step hides it); epoch 2 from
    the workers' second round to their last whole round reads true. A loader faster than the model
    reads 1.0."""
    model = 256 / 0.1
    for true in (0.5, 0.74, 0.9):
        records = _queue_model(true, log=15)
        first = measure.window(records, 256, epochs=(0,), skip=10)
        second = measure.window(records, 256, epochs=(1,), skip=15, rounds_of=15)
        assert first["img_per_s"] / model > min(0.99, true + 0.2)  # the store hides the slow loader
        assert second["img_per_s"] / model == pytest.approx(true, abs=0.01) and second["data_wait_fraction"] > 0.05
        assert second["epochs"] == [1] and second["skip_steps"] == 15 and second["steps"] == 60  # rounds 2-5 of 15
        tail = measure.window(records, 256, epochs=(1,), skip=15)  # with the epoch's last, partial round
        assert tail["steps"] == 63 and tail["img_per_s"] < second["img_per_s"]
    fast = measure.window(_queue_model(1.5, log=15), 256, epochs=(1,), skip=15, rounds_of=15)
    assert fast["img_per_s"] / model == pytest.approx(1.0, abs=0.01)


def test_cpu_over_a_window_shorter_than_the_sampling_interval_is_interpolated():
    # samples every 0.25 s; the main process busy 1 core, its children 2 (CI's fast box gave a
    # smoke window with fewer than two samples inside it: the figure was None)
    series = [(100.0 + 0.25 * i, 0.25 * i, 0.5 * i) for i in range(5)]
    assert measure.cores_between(series, 1, 100.3, 100.4) == pytest.approx(1.0)
    assert measure.cores_between(series, 2, 100.3, 100.4) == pytest.approx(2.0)
    assert measure.cores_between(series, 1) == pytest.approx(1.0)
    assert measure.cores_between(series, 1, 99.0, 100.4) is None  # before the first sample: unknown
    assert measure.cores_between(series, 1, 100.4, 101.5) is None  # past the last
    assert measure.cores_between(series[:1], 1) is None


def test_profile_steady_leaves_out_warm_up_and_log_steps():
    per_step = [{"step": k, "ms": 10.0, "host_syncs": 1 if k in (10, 20, 30) else 0, "item_calls": 0,
                 "dtoh_copies": 0, "other_thread_syncs": 2} for k in range(2, 32)]
    got = measure.profile_steady(per_step, total=44, log_interval=20)  # warm-up 10; syncs at 10 and the log at 20
    assert got["steps"] == [k for k in range(11, 32) if k != 20]
    assert got["host_syncs_per_step"] == pytest.approx(1 / 20) and got["other_thread_syncs_per_step"] == 2
    assert measure.engine_sync_steps(44, 10**6) == {1, 10, 44}


class FakeNvml:
    """nvidia-ml-py's calls the check makes, answering a scripted JPEG-engine utilisation."""

    def __init__(self, values, fail=None):
        self.values, self.fail, self.calls = list(values), fail, 0

    def nvmlInit(self):
        if self.fail:
            raise RuntimeError(self.fail)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetJpgUtilization(self, handle):
        self.calls += 1
        return [self.values[min(self.calls - 1, len(self.values) - 1)], 166666]


def test_the_jpeg_engine_is_observed_through_nvml():
    import gpu_check_probe as probe
    with probe.JpegEngine(interval=0.001, nvml=FakeNvml([0, 0, 35, 80, 80])) as engine:
        while len(engine.samples) < 6:
            time.sleep(0.001)
    got = engine.summary()
    assert got["available"] == "yes" and got["max_pct"] == 80 and got["busy_samples"] >= 3
    assert got["summary"].startswith(f"busy in {got['busy_samples']}/{got['samples']} samples")
    assert got["used"] is True and got["sampling_period_us"] == 166666 and "NVML averages over 166666 us" in got["summary"]
    absent = probe.JpegEngine(nvml=FakeNvml([], fail="NVML Shared Library Not Found")).summary()
    assert absent["available"].startswith("no: RuntimeError: NVML Shared Library") and "not sampled" in absent["summary"]


def _run(img, **extra):
    window = {"epochs": [1], "skip_steps": 14, "steps": 56, "img_per_s": img, "data_wait_fraction": 0.02}
    return {"status": "ok", "window": window, "derived": {"efficiency": 0.97, "ceiling_img_per_s": 5000.0,
                                                          "main_cores": 0.8, "loader_cores": 12.5},
            "proc": {"main_peak_rss_gib": 3.1, "workers": 15, "workers_peak_pss_gib": 6.0, "shm_peak_gib": 1.2},
            "decoder": "turbo (libjpeg-turbo 2.1.5)", "shards": "restart grid on 21000/21000",
            "epoch": {"first_step_seconds": 3.2, "amp_scale": 65536.0, "amp_skipped_steps": 0, "ema_val_top1": 0.01},
            **extra}


def test_the_table_renders_every_row_of_a_gpu_result():
    """The rows only a GPU run fills (every step ok, NVML sampled, SyncBatchNorm traced in a group):
    one line each, the figures from the JSON."""
    profile = {"profile_steady": {"steps": list(range(9, 22)), "host_syncs_per_step": 0.0, "item_calls_per_step": 0.0,
                                  "dtoh_copies_per_step": 0.0, "other_thread_syncs_per_step": 1.0,
                                  "step_ms_median": 51.0}, "syncs": {"htod_overlap_fraction": 0.98}}
    probe = {"modes": ["loader", "same_stream"], "tolerance": 2.0, "mean_abs_diff_vs_cpu_max": 0.8, "ok": True,
             "loader": {"iterations": 20, "corrupted_decodes": 0, "wrong_pending_sums": 0},
             "same_stream": {"iterations": 20, "corrupted_decodes": 13, "wrong_pending_sums": 4}}
    steps = {
        "env": {"status": "ok", "cores": 16, "shm_total_gib": 64, "nvml": "yes", "torch": "torch 2.11.0",
                "decoder": "turbo", "turbo_libjpeg": "2.1.5", "extensions": "carried wheel x.whl"},
        "data": {"status": "ok", "images": 21000, "mean_kb": 95.0, "progressive_fraction": 0.1,
                 "format": "restart grid on 21000/21000"},
        "ceiling": _run(5000.0), "ceiling_end": {**_run(4950.0), "derived": {"drift": -0.01}},
        "real": _run(4850.0), "gpu_decode_train": _run(4990.0, decoder="nvJPEG (--gpu-decode)"),
        "recipe_rn50": _run(6100.0), "recipe_rn18": _run(9000.0),
        "profile": {"status": "ok", **_run(1.0), **profile}, "fp16": {"status": "ok", **_run(1.0), **profile},
        "bench_loader": {"status": "ok", "images_per_s_per_worker": 410.0, "workers": 4, "decoder": "turbo",
                         "derived": {"workers_for_ceiling": 12.2}},
        "gpu_decode_loader": {"status": "ok", "probe": probe, "nvml": {"summary": "busy in 40/41 samples, mean 63 %", "available": "yes",
                                                                   "used": True},
                              "grid": {"grid_ms": 9.1, "no_grid_ms": 9.4},
                              "timing": {"img_per_s": 14000.0, "timed_from": 6, "batches": 40, "wait_ms_per_batch": 0.4,
                                         "decode_ms_per_batch": 15.0, "crop_ms_per_batch": 2.1}},
        "ddp": {"status": "ok", "verdict": "ok", "detail": "--gpu-decode: weights identical on both ranks",
                "syncbn_compile": {"verdict": "breaks the graph", "detail": "in a 2-rank process group: 20 graph breaks"}},
        "augment_compile": {**_run(5600.0), "derived": {"ceiling_img_per_s": 6500.0, "compile_speedup": 1.3,
                                                         "efficiency": 5600.0 / 6500.0, "main_cores": 0.9,
                                                         "loader_cores": 12.0}},
    }
    result = {"device": "cuda: NVIDIA H200", "mode": "gpu", "steps": steps, "elapsed_s": 371.0, "budget_s": 380.0,
              "finished": True}
    text = report.table(result)
    judged, measured = text.split("\n\n", 1)
    rows = [line for line in measured.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 17 and not [r for r in rows if "| not run |" in r or "| - |" in r]
    lines = [line for line in judged.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(lines) == len(report.verdicts(result)) == 10 and not [v for v in lines if "not settled" in v]
    assert "| Does the CPU loader keep up at the default workers? (real) | yes | efficiency 0.970 (>= 0.95" in judged
    # the compiled run is under its goal, and says why: 12 loader cores for 15 workers is not CPU-bound,
    # the main process at 0.9 cores is
    assert "vs the compiled ceiling) | no: the main process is CPU-bound (0.90 cores)" in judged
    assert "hardware JPEG engine? | yes | busy in 40/41" in judged and "train faster than the CPU loader? | yes" in judged
    assert "torchvision torchvision" not in text
    assert "4850 img/s | efficiency 0.970 vs 5000 img/s" in text and "loader 12.5 cores" in text
    assert "JPEG engine (NVML) busy in 40/41 samples" in text and "grid 9.1 ms vs no grid 9.4 ms" in text
    assert "same_stream: 13/20 corrupted" in text and "SyncBatchNorm + --compile | breaks the graph" in text
    assert "1.30x the eager one" in text and "drift -1.0 %" in text and "371.0 s of a 380 s budget" in text


def test_a_killed_run_leaves_no_process_behind():
    """A run forked from the warm server leads its own process group; killing the group ends it and
    everything it started, children that ignore SIGTERM included, and nothing of it is left."""
    import gpu_check_child as child
    runner = child.Runner()
    proc = runner.start("subprocess:call", ["sh", "-c", "trap '' TERM; sleep 300 & sleep 300 & wait"],
                        "/dev/null")
    try:
        deadline = time.monotonic() + 60
        while len(child.group_alive(proc.pid)) < 4 and time.monotonic() < deadline:  # the run, sh, two sleeps
            time.sleep(0.05)
        group = child.group_alive(proc.pid)
        assert len(group) >= 4 and proc.pid in group, group
    finally:
        left = child.kill_group(proc.pid)
        proc.join(10)
    assert left == [] and child.group_alive(proc.pid) == [] and not proc.is_alive()
    assert not [pid for pid in group if child._alive(pid)]


def _fake_proc(root: Path, *, children_files: bool, smaps: bool) -> int:
    """A /proc with one run (pid 100, threads 100 and 101) and two workers (200, 201), as /proc shows them."""
    def stat(pid, ppid, ticks):  # fields after "(comm) ": state ppid ... utime (14th) stime (15th)
        rest = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), str(ticks)] + ["0"] * 30
        return f"{pid} (python) " + " ".join(rest)
    for pid, ppid in ((100, 1), (200, 100), (201, 100), (300, 1)):
        d = root / str(pid)
        (d / "task" / str(pid)).mkdir(parents=True)
        (d / "stat").write_text(stat(pid, ppid, 50))
        (d / "status").write_text("Name: python\nVmRSS:  204800 kB\n")
        if smaps:
            (d / "smaps_rollup").write_text("Rss: 100 kB\nPss:  102400 kB\n")
    if children_files:
        (root / "100" / "task" / "101").mkdir()
        (root / "100" / "task" / "100" / "children").write_text("200 ")
        (root / "100" / "task" / "101" / "children").write_text("201 ")
    return 100


@pytest.mark.parametrize("children_files", [True, False])
def test_the_proc_sampler_counts_workers_with_or_without_children_files(tmp_path, children_files):
    pid = _fake_proc(tmp_path, children_files=children_files, smaps=True)
    sampler = measure.ProcSampler(pid, interval=0.01, proc=str(tmp_path))
    time.sleep(0.1)
    got = sampler.stop()
    assert got["workers"] == 2 and got["workers_peak_pss_gib"] == pytest.approx(0.195, abs=0.001)
    assert got["unavailable"] == {} and got["main_peak_rss_gib"] == pytest.approx(0.195, abs=0.001)


def test_the_proc_sampler_says_unavailable_never_zero(tmp_path):
    """No smaps_rollup (gVisor): the workers' PSS is unavailable, not 0.00; and with neither children
    files nor a /proc listing that shows the run, the workers and their CPU are unavailable, not 0."""
    pid = _fake_proc(tmp_path, children_files=True, smaps=False)
    sampler = measure.ProcSampler(pid, interval=0.01, proc=str(tmp_path))
    time.sleep(0.1)
    got = sampler.stop()
    assert got["workers"] == 2 and got["workers_peak_pss_gib"] is None and "smaps_rollup" in got["unavailable"]["workers_pss"]
    row = report._run_row("real loader", {**_run(4000.0), "proc": {**got, "series": []}})
    assert "2 workers PSS unavailable" in row[2]
    class Blind(measure.ProcSampler):
        def _children(self):
            return None  # what it answers when /proc has no children files and cannot be listed

    blind = Blind(pid, interval=0.01, proc=str(tmp_path))
    time.sleep(0.1)
    got = blind.stop()
    assert got["workers"] is None and "children" in got["unavailable"]["workers"]
    row = report._run_row("real loader", {**_run(4000.0), "proc": {**got, "series": []}})
    assert "loader unavailable" in row[2] and "unavailable workers PSS unavailable" in row[2]


def test_a_carried_extension_that_does_not_import_is_one_line(tmp_path):
    """An extension file that is there but does not import (a wheel without its libjpeg): the env step
    survives and names it, `install` stops claiming the build works, and the table has one line for it."""
    import gpu_check_probe as probe
    for folder, name in (("train/loader", "_jpegcrop"), ("pipeline/prepare", "_jpegtran")):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "train/loader" / "_jpegcrop.abi3.so").write_bytes(b"not an ELF file")
    env = probe.environment("cpu", repo=tmp_path)
    assert env["decoder"] == "pil" and set(env["extension_errors"]) == {"_jpegcrop"}
    assert env["extension_errors"]["_jpegcrop"].startswith("_jpegcrop.abi3.so: ImportError")
    assert probe._extension("pipeline/prepare", "_jpegtran", tmp_path) == (None, None)  # not there: no error
    check = gpu_check_run.Check.__new__(gpu_check_run.Check)
    check.result = {"install": "carried wheel x.whl (abi3, libjpeg-turbo beside the modules)", "steps": {}}
    check.note_extensions(env)
    assert check.result["install"].startswith("carried wheel x.whl") and "but _jpegcrop failed to import" in check.result["install"]
    result = {"device": "cpu", "mode": "cpu-smoke", "elapsed_s": 1.0, "budget_s": 400.0, "steps": {"env": env},
              **check.result}
    lines = [line for line in report.table(result).splitlines() if "_jpegcrop failed to import" in line]
    assert len(lines) == 1 and lines[0].startswith("| extension failure | FAILED |")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_cc_fallback_builds_every_source_or_says_it_failed(tmp_path):
    """Without a carried wheel the wrapper builds each module from all its C files with the shared
    headers, and each imports; a module that links but does not import (a missing part file: an
    undefined symbol) is removed and the build says it failed."""
    tree = tmp_path / "tree"
    for folder in ("train/loader", "pipeline/prepare", "scripts/gpu_check"):
        (tree / folder).mkdir(parents=True)
    shutil.copytree(REPO / "pipeline" / "native", tree / "pipeline" / "native",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "scripts" / "gpu_check" / "gpu_check.sh", tree / "scripts" / "gpu_check")
    env = {**os.environ, "PYTHON": sys.executable}
    run = ["scripts/gpu_check/gpu_check.sh", "--extensions-only", str(tmp_path / "work")]
    ok = subprocess.run(run, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and ok.stdout.strip() == "built here with cc against the system libjpeg", ok.stderr
    import gpu_check_probe as probe
    assert all(probe._extension(f, n, tree)[0] is not None for f, n in (("train/loader", "_jpegcrop"),
                                                                         ("pipeline/prepare", "_jpegtran")))
    for built in [*tree.glob("train/loader/*.so"), *tree.glob("pipeline/prepare/*.so")]:
        built.unlink()
    (tree / "pipeline" / "native" / "jpegcrop_entry.c").unlink()
    bad = subprocess.run(run, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 0 and bad.stdout.startswith("none: the cc build failed: ") and "undefined symbol" in bad.stdout
    assert not list(tree.glob("train/loader/_jpegcrop*.so"))


def test_data_generation_stops_at_its_deadline(tmp_path):
    import gpu_check_data as data
    jobs = [(str(tmp_path / f"{i}.JPEG"), 64, 48, i, False) for i in range(64)]
    assert len(data.generate_until(jobs, 1, time.perf_counter() + 120, chunk=8)) == 64
    for f in tmp_path.glob("*.JPEG"):
        f.unlink()
    early = data.generate_until(jobs, 1, time.perf_counter(), chunk=8)  # the deadline is now
    assert len(early) < 64 and sorted(early) == sorted(str(p) for p in tmp_path.glob("*.JPEG"))
    marker = tmp_path / "child.pid"  # a child under it too, like prepare-shards' pool workers
    code = f"import subprocess, time; open({str(marker)!r}, 'w').write(str(subprocess.Popen(['sleep', '60']).pid)); time.sleep(60)"
    t0 = time.monotonic()
    rc, why = data.run_bounded([sys.executable, "-c", code], 3.0)
    assert rc == -9 and why.startswith("still running after") and time.monotonic() - t0 < 10
    grandchild = int(marker.read_text())
    deadline = time.monotonic() + 5
    import gpu_check_child as child
    while child._alive(grandchild):
        assert time.monotonic() < deadline, "the child of the killed command is still running"
        time.sleep(0.05)


def test_a_cut_run_keeps_the_figures_its_records_give(tmp_path):
    """The window of a run killed in its second epoch is computed from what it wrote (a last line cut
    mid-write left out), and the row and its verdict say "cut"."""
    records = _queue_model(0.9, workers=4, steps=40, log=4)
    end_of_first = next(i for i, r in enumerate(records) if r["kind"] == "epoch")
    kept = records[:end_of_first + 1 + 6]  # six intervals of epoch 2, then the kill
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in kept) + '{"kind": "train_interval", "ep')
    assert gpu_check_run._records(path) == kept
    w = measure.window(gpu_check_run._records(path), 256, epochs=(1,), skip=4, rounds_of=4)
    assert w["steps"] == 20 and w["img_per_s"] / (256 / 0.1) == pytest.approx(0.9, abs=0.02)
    step = {**_run(w["img_per_s"]), "status": "cut: killed at its 45 s cap; figures from the records it wrote"}
    assert report._run_row("real loader", step)[1].endswith("img/s (cut)")
    verdict = report.verdicts({"steps": {"real": step}})[0]
    assert verdict["verdict"] == "yes" and verdict["figure"].endswith("(cut)")


def test_caps_can_be_changed_and_bad_ones_are_refused(capsys):
    assert gpu_check.main(["--cpu-smoke", "--cap", "real=abc"]) == 2
    assert gpu_check.main(["--cpu-smoke", "--cap", "warp=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("error: --cap") == 2


def test_a_run_ends_with_its_workers_when_the_check_is_killed(tmp_path):
    """SIGKILL to the check (and its forkserver) while a run works: the run's own process group, a
    child that ignores SIGTERM included, is gone within seconds, not left running."""
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / "scripts" / "gpu_check")!r})
        import gpu_check_child as child
        if __name__ == "__main__":  # the forkserver imports this file as its main module
            proc = child.Runner().start("subprocess:call", ["sh", "-c", "trap '' TERM; sleep 300 & sleep 300 & wait"],
                                        "/dev/null")
            print(proc.pid, flush=True)
            time.sleep(300)
    """))
    check = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    import gpu_check_child as child
    try:
        run = int(check.stdout.readline())
        deadline = time.monotonic() + 60
        while len(child.group_alive(run)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(child.group_alive(run)) >= 4
    finally:
        os.killpg(check.pid, signal.SIGKILL)
        check.wait()
    deadline = time.monotonic() + 5
    while child.group_alive(run) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = child.kill_group(run)  # (so a failure leaves nothing either)
    assert left == [] and time.monotonic() < deadline, "the run outlived the check"
