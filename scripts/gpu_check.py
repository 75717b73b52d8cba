"""The GPU check of the trainer: one call of at most 8 minutes on one GPU + 16 cores that settles the
open questions about the GPU paths, prints one table and writes $OUT/gpu_check.json (see
docs/training.md, "GPU check"). Run it through scripts/gpu_check.sh, which installs carried wheels,
maps the `imagenet_shards` namespace onto this tree and builds the turbo decoder where it can.

  python scripts/gpu_check.py [--cpu-smoke] [--workdir DIR] [--out DIR]

--cpu-smoke runs every step with tiny sizes on the CPU (same steps, same JSON keys, "cpu" in the
device field; the --gpu-decode training step then checks the trainer's refusal). The check's own
process never touches CUDA: every measurement runs in a child process (train-imagenet, bench-loader,
scripts/gpu_check_probe.py), sampled from /proc for CPU, memory and /dev/shm use.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_report import ProcSampler, steady, table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REQUIRED_MODULES = ("torch", "torchvision", "numpy", "PIL", "tqdm", "yaml", "webdataset", "braceexpand")
STEPS = ("env", "data", "ceiling", "real", "bench_loader", "profile", "gpu_decode_loader", "gpu_decode_train",
         "fp16", "ceiling_compile", "ceiling_end")


@dataclasses.dataclass(frozen=True)
class Sizes:
    device: str
    classes: int
    train_per_class: int
    val_per_class: int
    image: tuple          # (w, h): ImageNet's most common shape; a third are turned to portrait
    shard_samples: int
    arch: str
    batch: int
    res: int
    val_res: int
    val_crop: int
    workers: tuple        # the real loader is measured at each of these worker counts
    ceiling_batches: int
    fp16_batches: int
    profile_steps: int
    bench_batches: int
    bench_workers: int
    probe_batches: int
    probe_iters: int
    log_interval: int
    budget_s: float       # the whole check; steps that no longer fit are skipped, and say so


REAL = Sizes("cuda", 100, 200, 10, (500, 375), 1000, "resnet50", 256, 176, 256, 224, (8, 12, 15), 60, 40, 5, 20, 4,
             30, 20, 5, 470.0)
SMOKE = Sizes("cpu", 4, 24, 3, (64, 48), 40, "resnet18", 8, 32, 36, 32, (1,), 3, 2, 2, 3, 1, 3, 2, 2, 120.0)


def say(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def missing_modules() -> list[str]:
    """The modules the check needs that this Python cannot import."""
    import importlib.util
    return [m for m in REQUIRED_MODULES if importlib.util.find_spec(m) is None]


# ----------------------------------------------------------------------------- data

def photo_jpeg(args) -> int:
    """Write one photo-like JPEG (busy at every scale, ~80-110 KB at 500x375 q90, like ImageNet's
    average; smooth synthetic textures compress to ~24 KB and decode ~1.8x faster per core)."""
    import numpy as np
    from PIL import Image
    path, w, h, seed, progressive = args
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (h // 16 + 2, w // 16 + 2, 3), dtype=np.uint8)
    img = np.asarray(Image.fromarray(base).resize((w, h), Image.BICUBIC), dtype=np.int16)
    mid = rng.integers(0, 256, (h // 4 + 2, w // 4 + 2, 3), dtype=np.uint8)
    img += (np.asarray(Image.fromarray(mid).resize((w, h), Image.BILINEAR), dtype=np.int16) - 128) // 3
    grain = int(rng.integers(10, 21))
    img += rng.integers(-grain, grain + 1, (h, w, 3), dtype=np.int16)
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90, progressive=progressive)
    Path(path).write_bytes(buf.getvalue())
    return len(buf.getvalue())


def make_data(sz: Sizes, w: Path, cores: int, timeout: float) -> dict:
    """ImageFolder trees of photo-like JPEGs (real WNIDs, 10% progressive) -> prepare-shards."""
    from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
    stamp = json.dumps(dataclasses.asdict(sz), sort_keys=True)
    shards = w / "shards"
    if (shards / "manifest.json").exists() and (w / "sizes.json").exists() and (w / "sizes.json").read_text() == stamp:
        return {"reused": True, **json.loads((w / "data.json").read_text())}
    shutil.rmtree(w / "src", ignore_errors=True)
    shutil.rmtree(shards, ignore_errors=True)
    table_ = imagenet_1k_classes()
    wnids = [table_[i * len(table_) // sz.classes].wnid for i in range(sz.classes)]
    rng, jobs, number = random.Random(0), [], 0
    for split, per in (("train", sz.train_per_class), ("val", sz.val_per_class)):
        for c, wnid in enumerate(wnids):
            folder = w / "src" / split / wnid
            folder.mkdir(parents=True)
            for i in range(per):
                number += 1
                name = f"{wnid}_{i}.JPEG" if split == "train" else f"ILSVRC2012_val_{number:08d}.JPEG"
                iw, ih = sz.image if rng.random() < 0.67 else sz.image[::-1]
                jobs.append((str(folder / name), iw, ih, number, rng.random() < 0.1))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(cores) as pool:
        sizes = list(pool.map(photo_jpeg, jobs, chunksize=64))
    generated = time.perf_counter() - t0
    cmd = [sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", "--train", str(w / "src" / "train"),
           "--val", str(w / "src" / "val"), "--out", str(shards), "--shard-samples", str(sz.shard_samples),
           "--workers", str(cores), "--quiet"]
    t1 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"prepare-shards exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    info = {"images": len(jobs), "mean_kb": sum(sizes) / len(sizes) / 1000,
            "progressive_fraction": sum(j[4] for j in jobs) / len(jobs), "generate_s": generated,
            "prepare_s": time.perf_counter() - t1}
    (w / "data.json").write_text(json.dumps(info))
    (w / "sizes.json").write_text(stamp)
    return {"reused": False, **info}


# ----------------------------------------------------------------------------- the machine

def environment(sz: Sizes) -> dict:
    """Versions (from package metadata: no torch import here), decoder, cores, GPU, /dev/shm."""
    import importlib.util
    import platform
    from importlib import metadata

    def version(*names):
        for name in names:
            try:
                return f"{name} {metadata.version(name)}"
            except metadata.PackageNotFoundError:
                continue
        return None

    turbo = None
    spec = importlib.util.find_spec("imagenet_shards.train.loader._jpegcrop")
    if spec is not None:  # load the extension alone: importing its package would import torch
        loaded = importlib.util.spec_from_file_location("_jpegcrop", spec.origin)
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
        turbo = module.LIBJPEG_TURBO_VERSION
    gpu = None
    if sz.device == "cuda" and shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        gpu = q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else None
    st = os.statvfs("/dev/shm") if os.path.exists("/dev/shm") else None
    return {"python": platform.python_version(), "torch": version("torch"), "torchvision": version("torchvision"),
            "pillow": version("pillow-simd", "pillow", "Pillow"), "decoder": "turbo" if turbo else "pil",
            "turbo_libjpeg": turbo, "turbo_build": os.environ.get("GPU_CHECK_TURBO_BUILD", "not attempted"),
            "device_name": gpu or "cpu", "cores": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
            "shm_total_gib": round(st.f_blocks * st.f_frsize / 2**30, 2) if st else None}


# ----------------------------------------------------------------------------- child processes

class Check:
    def __init__(self, sz: Sizes, w: Path, smoke: bool):
        self.sz, self.w, self.smoke = sz, w, smoke
        self.start = time.perf_counter()
        self.steps: dict = {}
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if smoke:  # a shared 2-core box: one intra-op thread, and no minutes-long CPU compile
            self.env.update(OMP_NUM_THREADS="1", TORCH_COMPILE_DISABLE="1", TORCHDYNAMO_DISABLE="1")

    def left(self) -> float:
        return self.sz.budget_s - (time.perf_counter() - self.start)

    def step(self, name: str, fn, *, cap: float, reserve: float = 0.0) -> dict:
        """Run fn(timeout) as step `name` within the budget, keeping `reserve` seconds (of the full
        check's budget, scaled to this one) for the steps after it; its dict (or failure) is recorded."""
        scale = self.sz.budget_s / REAL.budget_s
        timeout = min(cap * scale, self.left() - reserve * scale)
        if timeout < 5:
            result = {"status": "skipped: time budget"}
        else:
            say(f"{name} (up to {timeout:.0f} s)")
            t0 = time.perf_counter()
            try:
                result = {"status": "ok", **fn(timeout)}
            except Exception as e:  # noqa: BLE001 - recorded, and the check goes on
                result = {"status": f"failed: {type(e).__name__}: {str(e).strip().splitlines()[-1:] or ''}"}
            result["seconds"] = round(time.perf_counter() - t0, 1)
        say(f"{name}: {result['status']}")
        self.steps[name] = result
        return result

    def child_json(self, cmd: list, timeout: float) -> dict:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env, cwd=REPO)
        if proc.returncode != 0:
            raise RuntimeError(f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def trainer(self, name: str, args: list, timeout: float, *, expect_exit: int = 0) -> dict:
        """One train-imagenet run in RUN_DIR=W/runs/NAME, sampled from /proc while it runs."""
        sz, out = self.sz, self.w / "runs" / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        cmd = [sys.executable, "-m", "imagenet_shards.train", "--out", str(out), "--arch", sz.arch,
               "--batch-size", str(sz.batch), "--res", str(sz.res), "--val-res", str(sz.val_res),
               "--val-crop", str(sz.val_crop), "--device", sz.device, "--channels-last", "--epochs", "1",
               "--log-interval", str(sz.log_interval), *map(str, args)]
        with open(out / "log.txt", "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)
            sampler = ProcSampler(proc.pid)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"{name}: still running after {timeout:.0f} s") from None
            finally:
                sampled = sampler.stop()
        text = (out / "log.txt").read_text(errors="replace").replace("\r", "\n")
        errors = [line for line in text.splitlines() if line.startswith("error:")]
        if rc != expect_exit:
            raise RuntimeError(f"exit {rc}: {errors[-1] if errors else text.strip().splitlines()[-1:]}")
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()] \
            if (out / "metrics.jsonl").exists() else []
        epoch = next((r for r in records if r["kind"] == "epoch"), {})
        return {"exit": rc, "error": errors[-1] if errors else None, "proc": sampled,
                "steady": steady(records, sz.batch), "epoch": {k: epoch.get(k) for k in (
                    "steady_img_per_s", "data_wait_fraction", "first_step_seconds", "main_cpu_fraction",
                    "peak_rss_gib", "pinned_peak_gib", "gpu_mem_gib", "amp_scale", "amp_skipped_steps", "loader",
                    "bad_samples", "val_top1")}}


def run_check(sz: Sizes, w: Path, smoke: bool) -> dict:
    c = Check(sz, w, smoke)
    py = sys.executable
    data = ["--data", str(w / "shards")]
    c.step("env", lambda t: environment(sz), cap=60)
    cores = (c.steps["env"].get("cores") or os.cpu_count() or 1)
    c.step("data", lambda t: make_data(sz, w, cores, t), cap=120)
    c.step("ceiling", lambda t: c.trainer("ceiling", ["--synthetic-data", "--limit-batches", sz.ceiling_batches], t),
           cap=90)
    c.steps["real"] = {"status": "ok", "runs": {}}
    for n in sz.workers:
        c.steps["real"]["runs"][str(n)] = c.step(
            f"real_w{n}", lambda t, n=n: c.trainer(f"real-w{n}", [*data, "--workers", n], t), cap=90, reserve=150)
        c.steps.pop(f"real_w{n}")
    c.step("gpu_decode_loader", lambda t: c.child_json(
        [py, "scripts/gpu_check_probe.py", "decode", str(w / "shards"), "--device", sz.device, "--batch", str(sz.batch),
         "--res", str(sz.res), "--workers", str(sz.workers[0]), "--batches", str(sz.probe_batches),
         "--iters", str(sz.probe_iters)], t), cap=90, reserve=120)
    c.step("gpu_decode_train", lambda t: c.trainer(
        "gpu-decode", [*data, "--workers", sz.workers[0], "--gpu-decode"], t, expect_exit=2 if smoke else 0),
        cap=90, reserve=100)
    c.step("profile", lambda t: {**c.trainer("profile", [*data, "--workers", sz.workers[0], "--profile",
                                                         sz.profile_steps, "--limit-batches", sz.profile_steps + 4], t),
                                 "syncs": json.loads((w / "runs/profile/profile/syncs-rank0.json").read_text())},
           cap=90, reserve=80)
    c.step("fp16", lambda t: c.trainer("fp16", ["--synthetic-data", "--amp", "fp16", "--limit-batches",
                                                sz.fp16_batches], t), cap=60, reserve=70)
    c.step("bench_loader", lambda t: c.child_json(
        [py, "-m", "imagenet_shards.train.bench.run", str(w / "shards"), "--workers", str(sz.bench_workers),
         "--batches", str(sz.bench_batches), "--batch-size", "64", "--res", str(sz.res), "--json"], t),
        cap=60, reserve=60)
    c.step("ceiling_compile", lambda t: c.trainer(
        "ceiling-compile", ["--synthetic-data", "--compile", "--limit-batches", sz.ceiling_batches], t),
        cap=240, reserve=45)
    c.step("ceiling_end", lambda t: c.trainer(
        "ceiling-end", ["--synthetic-data", "--limit-batches", sz.ceiling_batches], t), cap=60)
    return {"device": f"{sz.device}: {c.steps['env'].get('device_name', '?')}", "mode": "cpu-smoke" if smoke else "gpu",
            "sizes": dataclasses.asdict(sz), "budget_s": sz.budget_s,
            "elapsed_s": round(time.perf_counter() - c.start, 1), "steps": c.steps}


def save(result: dict, text: str, w: Path, out: Path | None) -> None:
    (w / "gpu_check.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (w / "gpu_check.md").write_text(text)
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(w / "gpu_check.json", out / "gpu_check.json")
    shutil.copy(w / "gpu_check.md", out / "gpu_check.md")
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:  # each run's metrics, log and sync counts
        for run in sorted((w / "runs").glob("*")):
            for rel in ("metrics.jsonl", "log.txt", "profile/syncs-rank0.json", "profile/summary-rank0.txt"):
                if (run / rel).exists():
                    tar.add(run / rel, arcname=f"{run.name}/{rel}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="every step, tiny sizes, on the CPU")
    p.add_argument("--workdir", type=Path, default=None, help="default /tmp/gpu-check (or /tmp/gpu-check-smoke)")
    p.add_argument("--out", type=Path, default=os.environ.get("OUT") or None,
                   help="also copy gpu_check.json, the table and the runs' metrics here (default $OUT)")
    args = p.parse_args(argv)
    missing = missing_modules()
    if missing:
        print(f"error: this Python ({sys.executable}) cannot import {', '.join(missing)}: run "
              f"scripts/fetch_gpu_wheels.sh on a machine with a registry and carry .whl/ (scripts/gpu_check.sh "
              f"installs them)", file=sys.stderr)
        return 2
    sz = SMOKE if args.cpu_smoke else REAL
    w = args.workdir or Path("/tmp/gpu-check-smoke" if args.cpu_smoke else "/tmp/gpu-check")
    w.mkdir(parents=True, exist_ok=True)
    result = run_check(sz, w, args.cpu_smoke)
    text = table(result)
    print(text)
    save(result, text, w, args.out)
    failed = [n for n, s in result["steps"].items() if not str(s.get("status", "")).startswith(("ok", "skipped"))]
    failed += [f"real {n}" for n, s in result["steps"]["real"]["runs"].items() if s["status"] != "ok"]
    if failed:
        say(f"failed steps: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
