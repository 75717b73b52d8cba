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
question, its figure beside its goal. Modules: gpu_check_run (a step within its cap, one run's launch
and figures, the files saved after each step), gpu_check_data (the JPEGs and shards), gpu_check_probe
(what runs with torch), gpu_check_measure (sampling, the window), gpu_check_report (the verdicts, the
table), gpu_check_steps (the steps that are more than one run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_data import make_data  # noqa: E402
from gpu_check_measure import profile_steady  # noqa: E402
from gpu_check_probe import environment  # noqa: E402
from gpu_check_run import Check, say  # noqa: E402
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


def missing_modules() -> list[str]:
    """The modules the check needs that this Python cannot import."""
    import importlib.util
    return [m for m in REQUIRED_MODULES if importlib.util.find_spec(m) is None]


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
    check = Check(sz, w, args.cpu_smoke, args.out, only, {**CAPS, **caps})
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
