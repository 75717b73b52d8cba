"""The parts of the GPU check that run inside one Python process with torch (scripts/gpu_check/gpu_check.py
starts them as child processes, so the check's own process never holds a CUDA context), and the
machine's description, which needs no torch (`environment`, called in the check's process).

  python scripts/gpu_check/gpu_check_probe.py env --device D         -> JSON: versions, device, decoder, NVML
  python scripts/gpu_check/gpu_check_probe.py decode DATA --src DIR  -> JSON: the --gpu-decode loader's timing, the
                                                              JPEG engine's use (NVML), grid vs no grid,
                                                              and the stream-safety probe
  torchrun ... scripts/gpu_check/gpu_check_probe.py rank OUT [--explain-arch A] -- TRAIN-ARGS
                                                           -> per rank: train-imagenet TRAIN-ARGS, and
                                                              SyncBatchNorm under torch._dynamo.explain
                                                              without and in the process group;
                                                              OUT/result-rankR.json

The stream-safety probe (pytorch/vision#9606): before each decode, GPU work is queued that ends by
writing into, and summing, blocks of the decoded images' sizes, which are freed while that work is
still queued. Mode `loader` does what the --gpu-decode loader does: the blocks come from the decode
stream, are used on the crop stream (record_stream) and the decode runs with the kernel-free decode
stream current: it must be clean. Mode `same_stream` queues the work on the stream the decode
then runs on (the hazard: nvJPEG's hardware engine may write a recycled block early): it shows
whether this machine has the hazard at all. Corruption shows as checksums that differ between two
decodes of the same batch, or wrong pending sums.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path


def _libjpeg_maps() -> list[str]:
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libjpeg" in line})


REPO = Path(__file__).resolve().parents[2]


def _extension(folder: str, name: str, repo: Path = REPO):
    """Our extension module, found by file name in this tree and loaded alone (finding it through its
    package would import the package, and so torch): (module, None), (None, None) when there is no
    build of it for this Python, or (None, why) when one is there but does not import (a carried
    wheel without its libjpeg, an unresolved symbol: the loader then uses Pillow, and the row says so)."""
    import importlib.machinery
    import importlib.util
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:  # this Python's order: its own build before abi3
        path = repo / folder / (name + suffix)
        if path.exists():
            try:
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            except Exception as e:  # noqa: BLE001 - ImportError, OSError: one line in the env step
                return None, f"{path.name}: {type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            return module, None
    return None, None


def environment(device: str, repo: Path = REPO) -> dict:
    """Versions (package metadata), the decoder and extensions this tree gives this Python (and the
    libjpeg they load), the GPU (nvidia-smi), NVML, cores and /dev/shm: without importing torch."""
    import shutil
    import subprocess
    from importlib import metadata

    def version(*names):
        for name in names:
            try:
                return f"{name} {metadata.version(name)}"
            except metadata.PackageNotFoundError:
                continue
        return None

    crop, crop_error = _extension("train/loader", "_jpegcrop", repo)
    tran, tran_error = _extension("pipeline/prepare", "_jpegtran", repo)
    errors = {name: why for name, why in (("_jpegcrop", crop_error), ("_jpegtran", tran_error)) if why}
    gpu = None
    if device == "cuda" and shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        gpu = q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else None
    st = os.statvfs("/dev/shm") if os.path.exists("/dev/shm") else None
    return {
        "python": platform.python_version(), "torch": version("torch"), "torchvision": version("torchvision"),
        "pillow": version("pillow-simd", "pillow", "Pillow"), "decoder": "turbo" if crop is not None else "pil",
        "turbo_libjpeg": getattr(crop, "LIBJPEG_TURBO_VERSION", None),
        "jpegcrop_from": getattr(crop, "__file__", None), "jpegtran_from": getattr(tran, "__file__", None),
        "extension_errors": errors,
        "libjpeg_loaded": _libjpeg_maps(), "device_name": gpu or "cpu", "nvml": JpegEngine().available_why,
        "cores": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
        "shm_total_gib": round(st.f_blocks * st.f_frsize / 2**30, 2) if st else None,
        "shm_free_gib": round(st.f_bavail * st.f_frsize / 2**30, 2) if st else None,
    }


class JpegEngine:
    """NVML's utilisation of the GPU's JPEG engine (nvidia-ml-py), sampled in a thread while active:
    observed, not inferred from JPEG headers. `available_why` is "yes" or why not."""

    def __init__(self, interval: float = 0.02, nvml=None):
        self.samples: list[int] = []
        self.interval, self.handle, self.nvml = interval, None, nvml
        self.period_us: int | None = None
        try:
            if self.nvml is None:
                import pynvml as nvml_module
                self.nvml = nvml_module
            self.nvml.nvmlInit()
            self.handle = self.nvml.nvmlDeviceGetHandleByIndex(0)
            self.nvml.nvmlDeviceGetJpgUtilization(self.handle)
            self.available_why = "yes"
        except Exception as e:  # noqa: BLE001 - no module, no driver, no JPEG engine: all say why
            self.handle, self.available_why = None, f"no: {type(e).__name__}: {str(e)[:80]}"
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.handle is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            value, period_us = self.nvml.nvmlDeviceGetJpgUtilization(self.handle)[:2]
            self.samples.append(int(value))
            self.period_us = int(period_us)  # NVML's own averaging window for that figure
            self._stop.wait(self.interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> dict:
        s = self.samples
        if self.handle is None:
            return {"available": self.available_why, "summary": f"not sampled ({self.available_why})"}
        busy = sum(v > 0 for v in s)
        out = {"available": "yes", "samples": len(s), "busy_samples": busy, "mean_pct": sum(s) / len(s) if s else None,
               "max_pct": max(s) if s else None, "interval_s": self.interval, "sampling_period_us": self.period_us,
               "used": busy > 0 if s else None}
        out["summary"] = (f"busy in {busy}/{len(s)} samples, mean {out['mean_pct'] or 0:.0f} %, max {out['max_pct']} % "
                          f"(read every {1000 * self.interval:.0f} ms; NVML averages over {self.period_us} us)"
                          if s else "no sample")
        return out


def _churn(sizes: list[int], device, torch, *, alloc_ctx, work_ctx) -> list:
    """Queue ~tens of ms of work ending with writes into and sums of blocks of `sizes` bytes, the
    blocks allocated under `alloc_ctx` and used under `work_ctx`; free them while it is queued."""
    cuda = device.type == "cuda"
    with alloc_ctx():
        blocks = [torch.empty(n, dtype=torch.uint8, device=device) for n in sizes]
    with work_ctx(blocks):
        a = torch.randn(4096 if cuda else 256, 4096 if cuda else 256, device=device)
        for _ in range(8 if cuda else 1):
            a = torch.tanh(a @ a)
        sums = []
        for b in blocks:
            b.fill_(7)
            b.add_(a[0, :1].to(torch.uint8) * 0)  # after the matmuls: the write happens late
            sums.append((b.sum(dtype=torch.int64), 7 * b.numel()))
    del blocks
    return sums


def stream_probe(jpgs, reference, device, iters: int, tolerance: float) -> dict:
    """Decode the same batch `iters` times after _churn, in each mode (module docstring)."""
    import torch

    from imagenet_shards.train.loader import gpu_decode as gd
    sizes = [int(r.numel()) for r in reference]
    ops = gd.StreamOps(device)
    result = {"modes": ["loader", "same_stream"], "tolerance": tolerance}
    for mode in result["modes"]:
        alloc = ops.decoding
        work = ops.cropping if mode == "loader" else (lambda blocks: ops.decoding())
        checksums, corrupted, bad_sums, worst = None, 0, 0, 0.0
        with ops.context():
            for _ in range(iters):
                pending = _churn(sizes, device, torch, alloc_ctx=alloc, work_ctx=work)
                with ops.decoding():
                    images = gd.decode_batch(jpgs, device)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                sums = [int(t.sum(dtype=torch.int64)) for t in images]
                bad_sums += sum(int(got) != want for got, want in pending)
                if checksums is None:
                    checksums = sums
                    worst = max(float((img.float().cpu() - ref).abs().mean()) for img, ref in zip(images, reference))
                corrupted += sums != checksums
        result[mode] = {"iterations": iters, "corrupted_decodes": corrupted, "wrong_pending_sums": bad_sums,
                        "mean_abs_diff_vs_cpu": worst}
    result["mean_abs_diff_vs_cpu_max"] = max(result[m]["mean_abs_diff_vs_cpu"] for m in result["modes"])
    lo = result["loader"]
    result["ok"] = lo["corrupted_decodes"] == 0 and lo["wrong_pending_sums"] == 0 and result["mean_abs_diff_vs_cpu_max"] <= tolerance
    return result


def grid_timing(src: Path, batch: int, device, repeats: int) -> dict:
    """nvJPEG decode time per batch of the same baseline JPEGs without and with the restart-marker
    grid (prepare-shards' lossless rewrite: same coefficients), interleaved, median of `repeats`."""
    import torch

    from imagenet_shards.pipeline.prepare import images as prep
    from imagenet_shards.train.loader import gpu_decode as gd
    if prep._jpegtran is None:
        return {"status": "not run: no _jpegtran extension to make the grid"}
    files = sorted(Path(src).rglob("*.JPEG"))
    plain = [f.read_bytes() for f in files[: batch * 3]]
    plain = [d for d in plain if gd.jpeg_coding(d) == gd.BASELINE][:batch]
    grid = [prep._jpegtran.restart_rows(d)[0] for d in plain]
    as_tensors = [[torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in group] for group in (plain, grid)]
    ops = gd.StreamOps(device)
    times: dict = {"no_grid": [], "grid": []}
    with ops.context():
        for _ in range(repeats):
            for name, group in zip(("no_grid", "grid"), as_tensors):
                t0 = time.perf_counter()
                with ops.decoding():
                    gd.decode_batch(group, device)
                times[name].append(time.perf_counter() - t0)
    med = {k: sorted(v)[len(v) // 2] * 1000 for k, v in times.items()}
    return {"status": "ok", "batch": len(plain), "repeats": repeats, "no_grid_ms": med["no_grid"], "grid_ms": med["grid"],
            "grid_over_no_grid": med["grid"] / med["no_grid"] if med["no_grid"] else None,
            "grid_bytes_over_no_grid": sum(map(len, grid)) / max(1, sum(map(len, plain)))}


def decode_check(data: str, *, src: str, device: str, batch: int, res: int, workers: int, batches: int, skip: int,
                 iters: int, amp: str, tolerance: float) -> dict:
    """The --gpu-decode loader alone, timed from batch `skip` on (after the workers' start and
    nvJPEG's initialisation) with the trainer's matmul precision; the JPEG engine sampled meanwhile;
    grid vs no grid; the stream-safety probe."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    from imagenet_shards.train.loader import gpu_decode as gd
    dev = torch.device(device)
    torch.set_float32_matmul_precision("high" if amp == "none" else "highest")  # as train-imagenet sets it
    loader = gd.make_gpu_decode_loader(data, "train", batch, workers=workers, device=dev, res=res,
                                       pin_memory=dev.type == "cuda", persistent_workers=True)
    it = iter(loader)
    marks = {}
    with JpegEngine() as engine:
        for n, _ in enumerate(it, 1):
            if n == skip:
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                marks = {"t": time.perf_counter(), **{k: loader.stats[k] for k in ("wait_s", "decode_s", "crop_s")}}
                engine.samples.clear()
            if n >= batches:
                break
        if dev.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - marks["t"]
    it.close()  # the crop seconds are complete once the thread has stopped
    s, timed = dict(loader.stats), batches - skip
    timing = {"batches": batches, "timed_from": skip + 1, "img_per_s": timed * batch / max(seconds, 1e-9),
              **{f"{k[:-2]}_ms_per_batch": 1000 * (s[k] - marks[k]) / timed for k in ("wait_s", "decode_s")},
              "crop_ms_per_batch": 1000 * s["crop_s"] / max(1, s["batches"]),
              "hardware_path_by_header": s["hardware_decodes"], "host_path_by_header": s["host_decodes"],
              "bad_samples": s["bad_samples"]}
    raw = next(iter(gd.RawBatches(loader.dataset.shards, batch_size=batch, train=True, workers=1, seed=0, rank=0,
                                  world_size=1, shuffle_buffer=0)))
    blob, offsets = raw[0], raw[1].tolist()
    jpgs = [blob[a:b].clone() for a, b in zip(offsets[:-1], offsets[1:])]
    reference = [decode_jpeg(j, mode=ImageReadMode.RGB).float() for j in jpgs]  # libjpeg-turbo on the CPU
    with JpegEngine() as grid_engine:
        grid = grid_timing(Path(src), batch, dev, repeats=5 if dev.type == "cuda" else 1)
    return {"timing": timing, "nvml": engine.summary(), "grid": {**grid, "nvml": grid_engine.summary()},
            "probe": stream_probe(jpgs, reference, dev, iters, tolerance)}


def syncbn_explain(device, *, arch: str, res: int, batch: int) -> dict:
    """torch._dynamo.explain over a SyncBatchNorm model's training forward: graphs and breaks (in a
    process group of 2+ ranks, where SyncBatchNorm really syncs, or without one)."""
    import torch
    import torch.distributed as dist
    import torchvision
    nn = torch.nn
    base = (nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
            if arch == "tiny" else torchvision.models.get_model(arch, num_classes=10))  # tiny: cheap on the CPU
    model = nn.SyncBatchNorm.convert_sync_batchnorm(base)
    model = model.to(device).train()
    x = torch.randn(batch, 3, res, res, device=device)
    grouped = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    try:
        with torch._dynamo.config.patch(disable=False):  # the CPU smoke's TORCH_COMPILE_DISABLE is for --compile
            e = torch._dynamo.explain(model)(x)
    except Exception as exc:  # noqa: BLE001 - recorded: on the CPU SyncBatchNorm refuses to sync
        return {"in_process_group": grouped, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
    finally:
        torch._dynamo.reset()
    reasons = sorted({str(getattr(b, "reason", b)).splitlines()[0][:160] for b in e.break_reasons})
    return {"in_process_group": grouped, "graphs": e.graph_count, "graph_breaks": e.graph_break_count,
            "reasons": reasons[:5], "syncbn_layers": sum(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())}


def rank_main(out: Path, train_args: list[str], explain_arch: str, explain_res: int) -> int:
    """One rank (torchrun's environment): SyncBatchNorm explained without a process group, training,
    then SyncBatchNorm explained in the group (train-imagenet leaves the group made: it is still there)."""
    import torch

    from imagenet_shards.train.trainer.cli import config_from_argv
    from imagenet_shards.train.trainer.distributed import init_distributed, shutdown_distributed
    from imagenet_shards.train.trainer.run import train
    config, _, _ = config_from_argv(train_args)
    rank = int(os.environ.get("RANK", "0"))
    report = {}
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % max(1, torch.cuda.device_count())) \
        if config.device == "cuda" else torch.device("cpu")
    report["syncbn_alone"] = syncbn_explain(device, arch=explain_arch, res=explain_res, batch=4)
    result = train(config)
    report["result"] = {k: result.get(k) for k in ("weights_sha256", "val_samples", "step", "epoch", "loader",
                                                     "steady_img_per_s", "val_top1")}
    path = Path(out, f"result-rank{rank}.json")
    path.write_text(json.dumps(report, sort_keys=True, default=str))  # the DDP answers first: the explain
    init_distributed(config.device, backend=config.dist_backend)    # below runs collectives that could hang
    report["syncbn_grouped"] = syncbn_explain(device, arch=explain_arch, res=explain_res, batch=4)
    path.write_text(json.dumps(report, sort_keys=True, default=str))
    shutdown_distributed()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check_probe")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env").add_argument("--device", default="cuda")
    d = sub.add_parser("decode")
    d.add_argument("data")
    d.add_argument("--src", required=True, help="the source JPEGs (no grid) of the shards")
    d.add_argument("--device", default="cuda")
    d.add_argument("--batch", type=int, default=256)
    d.add_argument("--res", type=int, default=176)
    d.add_argument("--workers", type=int, default=8)
    d.add_argument("--batches", type=int, default=40)
    d.add_argument("--skip", type=int, default=5, help="batches before the clock starts")
    d.add_argument("--iters", type=int, default=20)
    d.add_argument("--amp", default="bf16", help="the trainer's --amp (sets the matmul precision as it does)")
    d.add_argument("--tolerance", type=float, default=2.0)
    r = sub.add_parser("rank")
    r.add_argument("out")
    r.add_argument("--explain-arch", default="resnet18", help="a torchvision model, or tiny (two conv-BN layers)")
    r.add_argument("--explain-res", type=int, default=64)
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []  # rank: train-imagenet's arguments after --
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.cmd == "rank":
        return rank_main(Path(args.out), rest, args.explain_arch, args.explain_res)
    if args.cmd == "env":
        out = environment(args.device)
    else:
        out = decode_check(args.data, src=args.src, device=args.device, batch=args.batch, res=args.res,
                           workers=args.workers, batches=args.batches, skip=args.skip, iters=args.iters,
                           amp=args.amp, tolerance=args.tolerance)
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
