"""The machinery a GPU check step runs on (scripts/gpu_check/gpu_check.py says which steps, in which order,
with which caps and sizes): `Check` runs each step within its cap and the time budget and saves the JSON,
the table and the runs' files after every step; `Check.launch` is one run forked from the warm server
(gpu_check_child), sampled from /proc (gpu_check_measure), killed with its process group at its end or
its cap; `Check.trainer` is a train-imagenet run with its measurement window and the CPU over it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

from gpu_check_child import Runner, group_alive, kill_group
from gpu_check_measure import ProcSampler, cores_between, window
from gpu_check_report import table, verdicts


def say(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a kill mid-write leaves the previous version, never half a file


def _records(path: Path) -> list[dict]:
    """A run's metrics records; a last line cut mid-write (the run was killed) is left out."""
    out = []
    for line in (path.read_text().splitlines() if path.exists() else []):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def _wait(proc, timeout: float, metrics: Path, cut_when=None) -> str | None:
    """Wait for run `proc` at most `timeout` s; None when it ended, else why it is to be cut."""
    deadline = time.monotonic() + timeout
    while proc.is_alive():
        left = deadline - time.monotonic()
        if left <= 0:
            return f"killed at its {timeout:.0f} s cap"
        if cut_when is not None and cut_when(_records(metrics)):
            return "killed on purpose mid-run (the forced cut)"
        proc.join(min(left, 0.05 if cut_when else 0.25))
    return None


class Check:
    """A check in progress: `sz` its sizes (gpu_check.REAL or SMOKE), `w` its work folder, `out` where
    its files are copied too, `only` the steps selected (None: all), `caps` each step's cap in seconds."""

    def __init__(self, sz, w: Path, smoke: bool, out: Path | None, only: set | None, caps: dict):
        self.sz, self.w, self.smoke, self.out, self.only = sz, w, smoke, out, only
        self.caps = dict(caps)
        self.t0 = float(os.environ.get("GPU_CHECK_T0") or time.time())  # the wrapper's start: install counts
        self.steps: dict = {}
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # for the runs that are commands (torchrun)
        if smoke:  # a shared 2-core box: one intra-op thread, and no minutes-long CPU compile
            self.env.update(OMP_NUM_THREADS="1", TORCH_COMPILE_DISABLE="1")
        self.env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # a CUDA check before a fork, if any, stays fork-safe
        os.environ.update(self.env)  # what the warm server, and so every forked run, starts with
        self.runner = Runner()
        self.result = {"device": sz.device, "mode": "cpu-smoke" if smoke else "gpu", "sizes": dataclasses.asdict(sz),
                       "budget_s": sz.budget_s, "caps_s": self.caps, "install": os.environ.get("GPU_CHECK_EXT", "-"),
                       "steps": self.steps, "finished": False, "elapsed_s": 0.0}

    def note_extensions(self, env: dict) -> None:
        """A carried (or cc-built) extension that does not import here is one line in the result and
        the table, and `install` no longer claims it works."""
        failed = env.get("extension_errors") or {}
        if failed:
            line = "; ".join(f"{name} failed to import: {why}" for name, why in sorted(failed.items()))
            self.result["extension_failure"] = f"{line} (the rows use the decoder they name instead)"
            self.result["install"] = f"{self.result['install']}; but {line}"

    def elapsed(self) -> float:
        return time.time() - self.t0

    def save(self) -> None:
        self.result["elapsed_s"] = round(self.elapsed(), 1)
        try:
            self.result["verdicts"] = verdicts(self.result)
        except Exception as e:  # noqa: BLE001 - the steps' figures are all there; a verdict bug must not end the check
            self.result["verdicts"] = [{"question": "(all)", "verdict": f"not made: {type(e).__name__}: {e}"}]
        _write(self.w / "gpu_check.json", json.dumps(self.result, indent=1, sort_keys=True, default=str) + "\n")
        try:
            text = table(self.result)
        except Exception as e:  # noqa: BLE001 - the JSON above has it all; a table bug must not end the check
            text = f"the table could not be made ({type(e).__name__}: {e}); gpu_check.json has every figure\n"
        _write(self.w / "gpu_check.md", text)
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        for name in ("gpu_check.json", "gpu_check.md"):
            shutil.copy(self.w / name, self.out / f".{name}.tmp")
            os.replace(self.out / f".{name}.tmp", self.out / name)
        with tarfile.open(self.out / ".runs.tar.gz.tmp", "w:gz") as tar:  # each run's metrics, log, sync counts
            for run in sorted((self.w / "runs").glob("*")):
                for rel in ("metrics.jsonl", "log.txt", "run-info.json", "profile/syncs-rank0.json", "profile/summary-rank0.txt",
                            "result-rank0.json", "result-rank1.json", "log-rank0.txt", "log-rank1.txt"):
                    if (run / rel).exists():
                        tar.add(run / rel, arcname=f"{run.name}/{rel}")
        os.replace(self.out / ".runs.tar.gz.tmp", self.out / "runs.tar.gz")

    def step(self, name: str, fn) -> dict:
        """Run fn(timeout) as step `name` within its cap and the budget; saved before and after. A
        step whose run was killed at its cap keeps the figures its records give, status "cut: ..."."""
        if self.only is not None and name not in self.only:
            return self.steps.setdefault(name, {"status": "not selected (--steps)"})
        scale = 3.0 if self.smoke else 1.0  # the caps are GPU seconds; a shared 2-core box is slower
        timeout = min(self.caps[name] * scale, self.sz.budget_s - self.elapsed())
        if timeout < 5:
            self.steps[name] = {"status": "skipped: time budget"}
        else:
            say(f"{name} (up to {timeout:.0f} s)")
            self.steps[name] = {"status": "running", "started_s": round(self.elapsed(), 1), "cap_s": round(timeout)}
            self.save()
            t0 = time.perf_counter()
            try:
                result = fn(timeout)
                cut = result.get("cut")
                self.steps[name] = {"status": f"cut: {cut}; figures from the records it wrote" if cut else "ok",
                                    **result}
            except Exception as e:  # noqa: BLE001 - recorded, and the check goes on
                last = str(e).strip().splitlines()[-1:] or [""]
                self.steps[name] = {"status": f"failed: {type(e).__name__}: {last[0][:300]}"}
            self.steps[name]["seconds"] = round(time.perf_counter() - t0, 1)
        say(f"{name}: {self.steps[name]['status']}")
        self.save()
        return self.steps[name]

    def child_json(self, name: str, entry: str, argv: list, timeout: float) -> dict:
        """A run that prints one JSON line last (a probe, bench-loader --json): that object."""
        figures, _, out = self.launch(name, argv, timeout, entry=entry)
        lines = [x for x in (out / "log.txt").read_text(errors="replace").splitlines() if x.startswith("{")]
        if figures.get("cut") or not lines:
            raise RuntimeError(f"{name}: still running after {timeout:.0f} s" if figures.get("cut")
                               else f"{name}: no JSON line in its output")
        return {**json.loads(lines[-1]), "run": {k: figures[k] for k in ("left_behind", "outlived_run", "run_info")}}

    def launch(self, name: str, argv: list, timeout: float, *, entry: str, expect_exit: int = 0,
               cut_when=None) -> tuple[dict, list, Path]:
        """One run in W/runs/NAME (its log there): `entry` (module:function) called with argv in a
        process forked from the warm server (gpu_check_child), sampled from /proc. Killed at `timeout`,
        or as soon as `cut_when(records)` says so (the smoke's forced cut): then `cut` says so, and
        its figures are what its metrics records give (an error when it wrote none). Whether it ended
        or was killed, its process group (the run and its workers) is killed after it, and
        `left_behind` lists what of it is still alive then (none: anything else fails the check)."""
        out = self.w / "runs" / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        argv = [str(a).replace("{out}", str(out)) for a in argv]
        proc = self.runner.start(entry, argv, out / "log.txt")
        sampler = ProcSampler(proc.pid)
        cut = _wait(proc, timeout, out / "metrics.jsonl", cut_when)
        outlived = [] if cut else [p for p in group_alive(proc.pid) if p != proc.pid]
        group = group_alive(proc.pid)
        left = kill_group(proc.pid)
        proc.join()
        sampled = sampler.stop()
        records = _records(out / "metrics.jsonl")
        info_path = out / "run-info.json"
        info = json.loads(info_path.read_text()) if info_path.exists() else {}
        text = (out / "log.txt").read_text(errors="replace").replace("\r", "\n")
        errors = [line.strip() for line in text.splitlines() if "error:" in line or "Error:" in line]
        figures = {"exit": None if cut else proc.exitcode, "error": errors[-1] if errors else None, "proc": sampled,
                   "run_info": info, "left_behind": left, "outlived_run": outlived,
                   "group_at_kill" if cut else "group_at_end": len(group)}
        if cut:
            figures["cut"] = cut
            if not any(r.get("kind") == "train_interval" for r in records) and entry.endswith("trainer.cli:main"):
                raise RuntimeError(f"{name}: still running after {timeout:.0f} s, before its first logged interval")
            return figures, records, out
        if proc.exitcode != expect_exit:
            raise RuntimeError(f"exit {proc.exitcode}: {errors[-1] if errors else text.strip().splitlines()[-1:]}")
        return figures, records, out

    def trainer(self, name: str, args: list, timeout: float, *, workers: int | None = None, epochs=(1,),
                warmup: int = 0, sized: bool = True, log_interval: int | None = None, cut_when=None) -> dict:
        """A train-imagenet run, its window, the CPU over the window and its last epoch. On shards
        (`workers` given): epochs `epochs` from each one's second round of the workers to its last
        whole round, logged once a round (gpu_check_measure.window); an epoch too short for that is
        taken whole, a lower bound (the window says so). Synthetic: epoch 1 after `warmup` steps.
        `sized`: the check's arch, batch and resolutions (a recipe brings its own). A run cut at its
        cap gets the same figures from the records it wrote (a window it did not reach is empty)."""
        sz = self.sz
        base = ["--out", "{out}", "--device", sz.device, "--channels-last"]
        if sized:
            base += ["--arch", sz.arch, "--batch-size", sz.batch, "--res", sz.res, "--val-res", sz.val_res,
                     "--val-crop", sz.val_crop]
        log = log_interval or workers or sz.log_interval
        figures, records, _ = self.launch(name, [*base, "--log-interval", log, *args], timeout,
                                          entry="imagenet_shards.train.trainer.cli:main", cut_when=cut_when)
        series = figures["proc"].pop("series")
        start = next((r for r in records if r["kind"] == "start"), {})
        batch, world = int(start.get("batch_size") or sz.batch), int(start.get("world_size") or 1)
        if workers:
            per_epoch = next((r["step"] for r in records if r["kind"] == "epoch"), 0)
            whole = per_epoch >= 2 * workers
            w = window(records, batch, world=world, epochs=epochs, skip=workers if whole else 0,
                       rounds_of=workers if whole else None)
            w["note"] = None if whole else f"{per_epoch} steps per epoch < 2 rounds of {workers} workers: whole epochs"
        else:
            w = window(records, batch, world=world, epochs=(0,), skip=warmup)
        epoch = [r for r in records if r["kind"] == "epoch"]
        last = epoch[-1] if epoch else {}
        ceiling = next((r for r in records if r["kind"] == "ceiling"), {})
        w["cut"] = bool(figures.get("cut"))
        unknown = figures["proc"].get("unavailable", {})
        derived = {"main_cores": cores_between(series, 1, w["t0"], w["t1"]),
                   "loader_cores": None if "workers" in unknown else cores_between(series, 2, w["t0"], w["t1"]),
                   "own_ceiling_img_per_s": ceiling.get("steady_img_per_s")}
        return {**figures, "window": w, "derived": derived, "start": start, "epoch": {k: last.get(k) for k in (
            "epoch", "step", "steady_img_per_s", "data_wait_fraction", "first_step_seconds", "main_cpu_fraction",
            "peak_rss_gib", "pinned_peak_gib", "gpu_mem_gib", "amp_scale", "amp_skipped_steps", "loader",
            "bad_samples", "val_top1", "ema_val_top1", "res")}}

    def efficiency(self, run: dict, ceiling: float | None, *, gpu_decode: bool = False) -> dict:
        """The run's efficiency against its own ceiling (--measure-ceiling) or `ceiling`, and what it
        decoded with: the decoder `auto` resolved to inside the run (run-info.json), not the probe's."""
        d = run["derived"]
        top = d.get("own_ceiling_img_per_s") or ceiling
        d["ceiling_img_per_s"] = top
        img = run["window"]["img_per_s"]
        d["efficiency"] = img / top if img and top else None
        info = run.get("run_info") or {}
        cpu = info.get("decoder", "unknown (the run wrote no run-info.json)")
        if cpu == "turbo" and info.get("turbo_libjpeg"):
            cpu += f" (libjpeg-turbo {info['turbo_libjpeg']})"
        run["decoder"] = f"nvJPEG (--gpu-decode; host fallback {cpu})" if gpu_decode else cpu
        run["shards"] = self.steps.get("data", {}).get("format", "-")
        return run
