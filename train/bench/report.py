"""What ``bench-loader`` prints: the machine it ran on, and its result as text lines."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from imagenet_shards.train.loader import decode as dec


def machine_info() -> dict:
    """CPU model, usable and total cores, and the versions that decide decode speed."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    pil = pil_description()
    import torchvision
    turbo = dec._jpegcrop.LIBJPEG_TURBO_VERSION if dec._jpegcrop is not None else None
    return {"cpu": cpu, "cores_usable": cores, "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "torchvision": torchvision.__version__, "pil": pil,
            "jpegcrop_libjpeg_turbo": turbo}


def pil_description() -> str:
    """The PIL that imports (pillow-simd or Pillow, version) and the libjpeg-turbo it decodes with.

    Asks the imported module, not the installed distributions: a Pillow wheel installed over
    pillow-simd leaves pillow-simd's metadata behind while ``import PIL`` gets Pillow."""
    from importlib import metadata

    import PIL
    from PIL import features
    try:
        simd = metadata.version("pillow-simd") == PIL.__version__
    except metadata.PackageNotFoundError:
        simd = False
    turbo = features.version("libjpeg_turbo") if features.check_feature("libjpeg_turbo") else None
    return (f"{'pillow-simd' if simd else 'Pillow'} {PIL.__version__}"
            + (f" (libjpeg-turbo {turbo})" if turbo else " (libjpeg, not turbo)"))


def _fmt(v, spec):
    return format("-", ">" + spec.split(".")[0]) if v is None else format(v, spec)


def text_lines(result: dict, *, workers: int, batch_size: int, batches: int, rounds: int) -> list[str]:
    """The human-readable report of a ``bench-loader`` result (with its ``compare`` rows, if any)."""
    lines = [f"{result['images_per_s']:.1f} images/s overall, {result['images_per_s_per_worker']:.1f} images/s per "
             f"worker ({workers} workers, batch {batch_size}, {result['res']}px, decoder {result['decoder']}"
             f"{', dct scaling off' if result.get('dct_scaling') == 'off' else ''}, "
             f"split {result['split']}; median of {rounds} rounds of {batches} batches, "
             f"best {result['images_per_s_best']:.1f})"]
    if result.get("images_per_cpu_s"):
        lines.append(f"{result['images_per_cpu_s']:.1f} images per CPU-second (whole process tree: the per-core "
                     f"speed, less sensitive to other load on the machine)")
    if (st := result.get("store")) and st["requests"]:
        lines.append(f"store: {st['bytes_per_s'] / 1e6:.1f} MB/s, {st['requests_per_s']:.1f} requests/s, workers waited "
                     f"{100 * st['wait_fraction']:.1f}% of the time, read-ahead <= {st['readahead_high_bytes'] >> 20} MiB/worker")
    m = result["machine"]
    turbo = (f"turbo decoder on libjpeg-turbo {m['jpegcrop_libjpeg_turbo']}" if m["jpegcrop_libjpeg_turbo"]
             else "turbo decoder not built")
    lines.append(f"machine: {m['cpu']}, {m['cores_usable']} usable of {m['cpu_count']} cores, {m['pil']}, "
                 f"torch {m['torch']}, torchvision {m['torchvision']}, {turbo}")
    rows = result.get("compare")
    if rows is not None:
        width = max(len(r["name"]) for r in rows)
        lines.append("")
        lines.append(f"{'loader':<{width}}  {'img/s':>8}  {'best':>8}  {'img/s/worker':>12}  {'img/cpu-s':>9}  "
                     f"{'ours is':>8}  {'(by cpu)':>8}  {'KB/img':>6}  note")
        for r in rows:
            speed = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
            speed_cpu = "-" if r["speedup_cpu"] is None else f"{r['speedup_cpu']:.2f}x"
            size = r.get("bytes_per_image")
            lines.append(f"{r['name']:<{width}}  {_fmt(r['images_per_s'], '8.1f')}  "
                         f"{_fmt(r['images_per_s_best'], '8.1f')}  {_fmt(r['images_per_s_per_worker'], '12.1f')}  "
                         f"{_fmt(r['images_per_cpu_s'], '9.1f')}  {speed:>8}  {speed_cpu:>8}  "
                         f"{_fmt(None if size is None else size / 1000, '6.0f')}  {r['note']}")
    return lines
