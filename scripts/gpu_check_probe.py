"""The parts of the GPU check that run inside one Python process with torch (scripts/gpu_check.py
starts them as child processes, so the check's own process never holds a CUDA context).

  python scripts/gpu_check_probe.py env                     -> JSON: versions, device, decoder
  python scripts/gpu_check_probe.py decode DATA --device D  -> JSON: --gpu-decode loader timing and
                                                               the stream-safety corruption probe

The corruption probe (pytorch/vision#9606): before each decode, GPU work is queued on the decode
stream that ends by writing into, and reducing, blocks of the decoded images' sizes which are
then freed while that work is still queued. If nvJPEG were handed one of those blocks without the
stream being drained, the late writes would land in the decoded images (checksums differ between
two decodes of the same batch) or the decoder's writes in the reductions (wrong sums). Run with
the loader's hand-off (drain first) and, for comparison, without it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time


def env() -> dict:
    """Versions and hardware the run used."""
    import PIL
    import torch
    import torchvision
    from importlib import metadata

    from imagenet_shards.train.loader import decode as dec
    try:
        pil = "pillow-simd " + metadata.version("pillow-simd")
    except metadata.PackageNotFoundError:
        pil = "Pillow " + PIL.__version__
    cuda = torch.cuda.is_available()
    st = os.statvfs("/dev/shm") if os.path.exists("/dev/shm") else None
    return {
        "python": platform.python_version(), "torch": torch.__version__, "torchvision": torchvision.__version__,
        "pillow": pil, "decoder": dec.AUTO_DECODER,
        "turbo_libjpeg": dec._jpegcrop.LIBJPEG_TURBO_VERSION if dec._jpegcrop is not None else None,
        "cuda": torch.version.cuda, "device_name": torch.cuda.get_device_name(0) if cuda else "cpu",
        "cores": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
        "shm_total_gib": round(st.f_blocks * st.f_frsize / 2**30, 2) if st else None,
        "shm_free_gib": round(st.f_bavail * st.f_frsize / 2**30, 2) if st else None,
    }


def _churn(sizes: list[int], device, torch) -> list:
    """Queue ~tens of ms of work on the current stream, ending with writes into and sums of blocks of
    `sizes` bytes, then free those blocks while the work is still queued. Returns the pending sums."""
    cuda = device.type == "cuda"
    a = torch.randn(4096 if cuda else 256, 4096 if cuda else 256, device=device)
    for _ in range(8 if cuda else 1):
        a = torch.tanh(a @ a)
    blocks = [torch.empty(n, dtype=torch.uint8, device=device) for n in sizes]
    sums = []
    for b in blocks:
        b.fill_(7)
        b.add_(a[0, :1].to(torch.uint8) * 0)  # after the matmuls: the write happens late
        sums.append((b.sum(dtype=torch.int64), 7 * b.numel()))
    del blocks
    return sums


def decode_check(data: str, *, device: str, batch: int, res: int, workers: int, batches: int, iters: int,
                 tolerance: float) -> dict:
    """Timing of the --gpu-decode loader alone, and the corruption probe."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    from imagenet_shards.train.loader import gpu_decode as gd
    dev = torch.device(device)
    loader = gd.make_gpu_decode_loader(data, "train", batch, workers=workers, device=dev, res=res,
                                       pin_memory=dev.type == "cuda")
    start, n = time.perf_counter(), 0
    it = iter(loader)
    for n, (images, _) in enumerate(it, 1):
        if n >= batches:
            break
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    it.close()
    s = dict(loader.stats)
    per = max(1, s.get("batches", 0))
    timing = {"batches": s.get("batches", 0), "img_per_s": s.get("samples", 0) / max(seconds, 1e-9),
              "wait_ms_per_batch": 1000 * s.get("wait_s", 0) / per,
              "decode_ms_per_batch": 1000 * s.get("decode_s", 0) / per,
              "crop_ms_per_batch": 1000 * s.get("crop_s", 0) / per,
              "hardware_decodes": s.get("hardware_decodes", 0), "host_decodes": s.get("host_decodes", 0),
              "bad_samples": s.get("bad_samples", 0)}

    raw = next(iter(gd.RawBatches(loader.dataset.shards, batch_size=batch, train=True, workers=1, seed=0, rank=0,
                                  world_size=1, shuffle_buffer=0)))
    blob, offsets = raw[0], raw[1].tolist()
    jpgs = [blob[a:b].clone() for a, b in zip(offsets[:-1], offsets[1:])]
    reference = [decode_jpeg(j, mode=ImageReadMode.RGB).float() for j in jpgs]  # libjpeg-turbo on the CPU
    sizes = [int(r.numel()) for r in reference]
    ops = gd.StreamOps(dev)
    result = {}
    for mode in ("drained", "not_drained"):
        checksums, corrupted, bad_sums, worst = None, 0, 0, 0.0
        with ops.context():
            for _ in range(iters):
                pending = _churn(sizes, dev, torch)
                if mode == "drained":
                    ops.drain()
                images = gd.decode_batch(jpgs, dev)
                ops.drain()
                sums = [int(t.sum(dtype=torch.int64)) for t in images]
                bad_sums += sum(int(got) != want for got, want in pending)
                if checksums is None:
                    checksums = sums
                    worst = max(float((img.float().cpu() - ref).abs().mean()) for img, ref in zip(images, reference))
                corrupted += sums != checksums
        result[mode] = {"iterations": iters, "corrupted_decodes": corrupted, "wrong_pending_sums": bad_sums,
                        "mean_abs_diff_vs_cpu_max": worst}
    d = result["drained"]
    result["tolerance_mean_abs_diff"] = tolerance
    result["ok"] = (d["corrupted_decodes"] == 0 and d["wrong_pending_sums"] == 0
                    and d["mean_abs_diff_vs_cpu_max"] <= tolerance)
    return {"timing": timing, "probe": result}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check_probe")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env")
    d = sub.add_parser("decode")
    d.add_argument("data")
    d.add_argument("--device", default="cuda")
    d.add_argument("--batch", type=int, default=256)
    d.add_argument("--res", type=int, default=176)
    d.add_argument("--workers", type=int, default=8)
    d.add_argument("--batches", type=int, default=30)
    d.add_argument("--iters", type=int, default=20)
    d.add_argument("--tolerance", type=float, default=2.0)
    args = p.parse_args(argv)
    if args.cmd == "env":
        out = env()
    else:
        out = decode_check(args.data, device=args.device, batch=args.batch, res=args.res, workers=args.workers,
                           batches=args.batches, iters=args.iters, tolerance=args.tolerance)
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
