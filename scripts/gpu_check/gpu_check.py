"""The GPU check of the trainer: one call of at most 6.5 minutes (install included) on one GPU + 16
cores that settles the open questions about the GPU paths (docs/training.md, "GPU check"). Run it
through scripts/gpu_check/gpu_check.sh, which puts the carried extensions into the tree and maps the
`imagenet_shards` namespace onto it.

  python scripts/gpu_check/gpu_check.py [--cpu-smoke] [--workdir DIR] [--out DIR] [--steps a,b,...]
                                        [--cap STEP=SECONDS ...]

After every step WORKDIR/gpu_check.json and the table (gpu_check.md) are rewritten, and copied to
--out (default $OUT) with runs.tar.gz (each run's metrics, log and sync counts): a call cut at its
limit still returns every step it finished, and the one it was in says "running". --cpu-smoke runs
every step that can run on the CPU with tiny sizes (same steps, same JSON keys, "cpu" in the device
field; --gpu-decode training is "not run on the CPU"). The check's own process never touches CUDA
(nor imports torch): every measurement runs in a child process forked from a warm server
(scripts/gpu_check/gpu_check_child.py: train-imagenet, bench-loader, scripts/gpu_check/gpu_check_probe.py, the two DDP
ranks), sampled from /proc for CPU, memory and /dev/shm use; each run is a process group of its own,
killed with its workers when it ends, at its step's cap (its figures then come from the records it
wrote, marked "cut") or when the check is gone. The table and the JSON open with one verdict per
question, its figure beside its goal. Modules: gpu_check_data (the JPEGs and shards),
gpu_check_probe (what runs with torch), gpu_check_report (sampling, the window, the verdicts, the
table), gpu_check_steps (the steps that are more than one run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_child import Runner, group_alive, kill_group  # noqa: E402
from gpu_check_data import make_data  # noqa: E402
from gpu_check_probe import environment  # noqa: E402
from gpu_check_report import ProcSampler, cores_between, profile_steady, table, verdicts, window  # noqa: E402
from gpu_check_steps import RECIPES, bench_step, compiled, ddp_step, drift, recipe_step  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REQUIRED_MODULES = ("torch", "torchvision", "numpy", "PIL", "tqdm")  # what the check and its children import
# The steps in order, each with its cap in seconds on the GPU machine (16 cores, one H200): the
# whole call, wheel unpacking included, is budgeted to BUDGET_S; a step gets min(cap, time left) and
# is skipped when under 5 s are left. Estimates, until the first run replaces them: each trainer
# start is ~10 s (imports, CUDA, cuDNN autotuning, workers), the rest is its steps.
# real: 25-35 s estimated (CUDA start, cuDNN autotuning for three shapes, two epochs with val, ~190 MB
# checkpoints), so 45 s, taken from augment_compile (the last: it gets what is left, at most its cap).
# ceiling, profile and fp16 run with --no-val (val answers nothing there). forced_cut runs in the smoke only.
CAPS = {"env": 10, "data": 30, "ceiling": 20, "real": 45, "forced_cut": 20, "profile": 22, "gpu_decode_loader": 25,
        "gpu_decode_train": 30, "ddp": 30, "recipe_rn50": 28, "recipe_rn18": 22, "fp16": 22, "bench_loader": 12,
        "ceiling_end": 15, "augment_compile": 120}
STEPS = tuple(CAPS)
BUDGET_S = 380.0  # 6 min 20 s from the wrapper's start; the device call's timeout_s is 420


@dataclasses.dataclass(frozen=True)
class Sizes:
    device: str
    classes: int
    train_per_class: int
    val_per_class: int
    image: tuple           # (w, h): ImageNet's most common shape; a third are turned to portrait
    shard_samples: int
    arch: str
    batch: int
    res: int
    val_res: int
    val_crop: int
    log_interval: int
    ceiling_batches: int
    profile_batches: int   # a --profile run's steps; its trace holds profile_steps of them
    profile_steps: int
    probe_batches: int
    probe_iters: int
    bench_batches: int
    ddp: tuple             # (arch, batch, res, steps per epoch) of the 2-rank run
    explain_arch: str
    compile_batches: int
    toy: tuple             # extra flags for the recipe runs (the smoke's toy sizes)
    budget_s: float


REAL = Sizes("cuda", 100, 200, 10, (500, 375), 1000, "resnet50", 256, 176, 256, 224, 5, 60, 34, 20, 40, 20, 20,
             ("resnet18", 64, 128, 12), "resnet18", 56, (), BUDGET_S)  # compile: 4 rounds of 14 workers an epoch
SMOKE = Sizes("cpu", 4, 16, 3, (64, 48), 40, "resnet18", 8, 32, 36, 32, 2, 6, 6, 4, 4, 2, 3, ("resnet18", 4, 32, 3),
              "tiny", 4, ("--arch", "resnet18", "--batch-size", "8", "--res", "32", "--val-res", "36", "--val-crop", "32",
                          "--limit-batches", "2"), 400.0)


def say(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def missing_modules() -> list[str]:
    """The modules the check needs that this Python cannot import."""
    import importlib.util
    return [m for m in REQUIRED_MODULES if importlib.util.find_spec(m) is None]


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
    def __init__(self, sz: Sizes, w: Path, smoke: bool, out: Path | None, only: set | None, caps: dict | None = None):
        self.sz, self.w, self.smoke, self.out, self.only = sz, w, smoke, out, only
        self.caps = {**CAPS, **(caps or {})}
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
        whole round, logged once a round (gpu_check_report.window); an epoch too short for that is
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


def run_check(c: Check) -> None:
    sz, w, smoke = c.sz, c.w, c.smoke
    data = ["--data", w / "shards"]
    env = c.step("env", lambda t: {**environment(sz.device), "extensions": os.environ.get("GPU_CHECK_EXT", "as found")})
    c.note_extensions(env)
    cores = env.get("cores") or os.cpu_count() or 1
    workers = 1 if smoke else max(1, cores - 2)  # train-imagenet's default on CUDA: cores less 2 threads
    c.result["device"] = f"{sz.device}: {env.get('device_name', '?')}"
    c.runner.warm()  # the server imports torch & co. while the data is made
    c.step("data", lambda t: make_data(sz, w, cores, t))
    skip_warmup = min(10, sz.ceiling_batches // 4)
    # the ceiling logs as often as `real` does (once a round of the workers): each log line is a host
    # sync, and a ceiling that logs more often reads low, so the efficiency high
    synthetic = ["--synthetic-data", "--no-val", "--epochs", 1, "--limit-batches", sz.ceiling_batches]
    ceiling = c.step("ceiling", lambda t: c.trainer("ceiling", synthetic, t, warmup=skip_warmup, log_interval=workers))
    top = (ceiling.get("window") or {}).get("img_per_s")
    two = ["--epochs", 2, "--workers", workers]  # the window: epoch 2, in whole rounds of the workers
    c.step("real", lambda t: c.efficiency(c.trainer("real", [*data, *two], t, workers=workers), top))
    if smoke:  # a run forced past its cap mid-epoch 2: figures kept and marked cut, no process left behind
        c.step("forced_cut", lambda t: c.efficiency(c.trainer(
            "forced-cut", [*data, "--epochs", 3, "--workers", workers], t, workers=workers,
            cut_when=lambda records: sum(r.get("kind") == "train_interval" and r.get("epoch") == 1
                                         for r in records) >= 3), top))
    else:
        c.steps["forced_cut"] = {"status": "not run on the GPU: the smoke's forced cut (a step cut at its cap "
                                           "keeps its figures the same way)"}
    quiet = 10**6  # logging quiet: no log line (and its host sync) inside the profile

    def profiled(name, amp, t):  # no window: one record; no val (it answers nothing here)
        run = c.trainer(name, [*data, "--workers", workers, "--amp", amp, "--epochs", 1, "--no-val", "--profile",
                               sz.profile_steps, "--limit-batches", sz.profile_batches, "--log-interval", quiet], t)
        path = w / "runs" / name / "profile/syncs-rank0.json"
        if not path.exists():
            raise RuntimeError(f"{name}: {run.get('cut') or 'it ended'} before it wrote its profile")
        syncs = json.loads(path.read_text())
        run["profile_steady"] = profile_steady(syncs.pop("per_step"), total=sz.profile_batches, log_interval=quiet)
        return {**run, "syncs": syncs}

    c.step("profile", lambda t: profiled("profile", "bf16", t))
    c.step("gpu_decode_loader", lambda t: c.child_json("gpu-decode-probe", "gpu_check_probe:main", [
        "decode", str(w / "shards"), "--src", str(w / "src" / "train"), "--device",
         sz.device, "--batch", str(sz.batch), "--res", str(sz.res), "--workers", str(workers), "--batches",
         str(sz.probe_batches), "--skip", str(min(5, sz.probe_batches - 1)), "--iters", str(sz.probe_iters)], t))
    if smoke:  # --gpu-decode needs CUDA; the trainer's refusal is tested in tests/train/trainer/test_trainer.py
        c.steps["gpu_decode_train"] = {"status": "not run on the CPU: --gpu-decode needs CUDA"}
    else:
        c.step("gpu_decode_train", lambda t: c.efficiency(c.trainer(
            "gpu-decode", [*data, *two, "--gpu-decode"], t, workers=workers), top, gpu_decode=True))
    c.step("ddp", lambda t: ddp_step(c, data, t))
    for key, name in RECIPES.items():
        c.step(key, lambda t, key=key, name=name: recipe_step(c, key, name, data, workers, t))
    c.step("fp16", lambda t: profiled("fp16", "fp16", t))
    c.step("bench_loader", lambda t: bench_step(c, w, top, t))
    c.step("ceiling_end", lambda t: drift(c.trainer("ceiling-end", synthetic, t, warmup=skip_warmup,
                                                    log_interval=workers), top))
    # measured like `real`: two epochs, the window in the second (the store the workers filled during
    # the compile is gone by then: each epoch starts with it empty), from the workers' second round
    c.step("augment_compile", lambda t: compiled(c.trainer("augment-compile", [
        *data, *two, "--limit-batches", sz.compile_batches, "--compile", "--mixup", 0.2, "--cutmix", 1.0,
        "--random-erase", 0.25, "--ema", 0.999, "--measure-ceiling", sz.ceiling_batches], t, workers=workers), top))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="every step, tiny sizes, on the CPU")
    p.add_argument("--workdir", type=Path, default=None, help="default /tmp/gpu-check (or /tmp/gpu-check-smoke)")
    p.add_argument("--out", type=Path, default=os.environ.get("OUT") or None,
                   help="also copy gpu_check.json, the table and the runs' metrics here (default $OUT)")
    p.add_argument("--steps", help=f"only these steps, comma-separated (of {', '.join(STEPS)}): e.g. a second "
                                   f"call for what a first one did not reach")
    p.add_argument("--cap", action="append", default=[], metavar="STEP=SECONDS",
                   help="another cap for a step (GPU seconds; the smoke triples them), e.g. --cap real=60")
    args = p.parse_args(argv)
    caps = {}
    for item in args.cap:
        step, _, value = item.partition("=")
        try:
            caps[step] = float(value)
        except ValueError:
            caps[step] = -1.0
        if step not in CAPS or caps[step] <= 0:
            print(f"error: --cap {item}: give STEP=SECONDS with a step of {', '.join(STEPS)} and a positive number",
                  file=sys.stderr)
            return 2
    missing = missing_modules()
    if missing:
        print(f"error: this Python ({sys.executable}) cannot import {', '.join(missing)}: the check needs torch, "
              f"torchvision, numpy, Pillow and tqdm (the GPU machine's image has them)", file=sys.stderr)
        return 2
    only = set(args.steps.split(",")) if args.steps else None
    unknown = sorted((only or set()) - set(STEPS))
    if unknown:
        print(f"error: unknown step(s) {', '.join(unknown)} (steps: {', '.join(STEPS)})", file=sys.stderr)
        return 2
    sz = SMOKE if args.cpu_smoke else REAL
    w = args.workdir or Path("/tmp/gpu-check-smoke" if args.cpu_smoke else "/tmp/gpu-check")
    w.mkdir(parents=True, exist_ok=True)
    check = Check(sz, w, args.cpu_smoke, args.out, only, caps)
    run_check(check)
    check.result["finished"] = True
    check.save()
    print((w / "gpu_check.md").read_text())
    failed = [n for n, s in check.steps.items()
              if not str(s.get("status", "")).startswith(("ok", "cut", "skipped", "not "))]
    failed += [n for n, s in check.steps.items() if s.get("verdict") == "FAILED"]
    failed += [f"{n} (left processes behind)" for n, s in check.steps.items()
               if s.get("left_behind") or (s.get("run") or {}).get("left_behind")]
    if failed:
        say(f"failed steps: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
