"""The GPU check's data: photo-like JPEGs in ImageFolder trees, then prepare-shards (scripts/gpu_check/gpu_check.py).

Photo-like, not smooth: busy at every scale, ~80-110 KB at 500x375 q90 like ImageNet's average
(smooth synthetic textures compress to ~24 KB and decode ~1.8x faster per core), 10 % progressive,
a third turned to portrait, real WNIDs. The sources stay in WORKDIR/src: the --gpu-decode probe
times the same files with and without the restart-marker grid. Which format the shards have (the
grid, from the manifest's counts) is part of the result: without the _jpegtran extension
prepare-shards stores the JPEGs without it, and the check says so.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path


def photo_jpeg(args) -> int:
    """Write one photo-like JPEG; returns its size in bytes."""
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


def shard_format(manifest: dict) -> dict:
    """How the stored JPEGs are laid out: the restart-marker grid on how many (manifest counts)."""
    total = sum(int(s.get("num_samples", 0)) for s in manifest.get("splits", {}).values())
    grid = int(manifest.get("fixed", {}).get("counts", {}).get("restart_markers", 0))
    asked = bool(manifest.get("config", {}).get("restart_markers", False))
    text = (f"restart grid on {grid}/{total}" if grid else
            "no restart grid (the _jpegtran extension was missing)" if asked else "no restart grid (turned off)")
    return {"stored_jpegs": total, "with_grid": grid, "grid_fraction": grid / total if total else None, "text": text}


def make_data(sizes, w: Path, cores: int, timeout: float, python: str = sys.executable) -> dict:
    """ImageFolder trees of photo-like JPEGs (real WNIDs, 10 % progressive) -> prepare-shards."""
    from imagenet_shards.pipeline.format.classes import imagenet_1k_classes
    stamp = json.dumps({k: v for k, v in dataclasses.asdict(sizes).items()
                        if k in ("classes", "train_per_class", "val_per_class", "image", "shard_samples")}, sort_keys=True)
    shards = w / "shards"
    if (shards / "manifest.json").exists() and (w / "sizes.json").exists() and (w / "sizes.json").read_text() == stamp:
        return {"reused": True, **json.loads((w / "data.json").read_text())}
    shutil.rmtree(w / "src", ignore_errors=True)
    shutil.rmtree(shards, ignore_errors=True)
    table = imagenet_1k_classes()
    wnids = [table[i * len(table) // sizes.classes].wnid for i in range(sizes.classes)]
    rng, jobs, number = random.Random(0), [], 0
    for split, per in (("val", sizes.val_per_class), ("train", sizes.train_per_class)):
        for wnid in wnids:
            (w / "src" / split / wnid).mkdir(parents=True)
        for i in range(per):  # round-robin over the classes: a cut generation leaves every class some images
            for wnid in wnids:
                number += 1
                name = f"{wnid}_{i}.JPEG" if split == "train" else f"ILSVRC2012_val_{number:08d}.JPEG"
                iw, ih = sizes.image if rng.random() < 0.67 else sizes.image[::-1]
                jobs.append((str(w / "src" / split / wnid / name), iw, ih, number, rng.random() < 0.1))
    t0 = time.perf_counter()
    made = generate_until(jobs, cores, t0 + GENERATE_SHARE * timeout)
    generated = time.perf_counter() - t0
    cmd = [python, "-m", "imagenet_shards.pipeline.prepare.cli", "--train", str(w / "src" / "train"),
           "--val", str(w / "src" / "val"), "--out", str(shards), "--shard-samples", str(sizes.shard_samples),
           "--workers", str(cores), "--quiet"]
    t1 = time.perf_counter()
    rc, err = run_bounded(cmd, max(5.0, timeout - generated))
    if rc != 0:
        raise RuntimeError(f"prepare-shards exit {rc}: {err}")
    manifest = json.loads((shards / "manifest.json").read_text())
    fmt = shard_format(manifest)
    written = [made[j[0]] for j in jobs if j[0] in made]
    kept = [j for j in jobs if j[0] in made]
    info = {"images": len(kept), "mean_kb": sum(written) / max(1, len(written)) / 1000,
            "progressive_fraction": sum(j[4] for j in kept) / max(1, len(kept)), "generate_s": round(generated, 1),
            "prepare_s": round(time.perf_counter() - t1, 1), "format": fmt["text"], "shard_format": fmt,
            "train_samples": manifest["splits"]["train"]["num_samples"]}
    if len(kept) < len(jobs):  # not stamped: the next call makes the whole set again
        return {"reused": False, "cut": f"generation stopped at {GENERATE_SHARE:.0%} of the cap: {len(kept)} of "
                                         f"{len(jobs)} images", **info}
    (w / "data.json").write_text(json.dumps(info))
    (w / "sizes.json").write_text(stamp)
    return {"reused": False, **info}


GENERATE_SHARE = 0.6  # of the step's cap for the JPEGs: prepare-shards keeps the rest (it takes ~1/3 of it)


def _photo_jpegs(chunk: list) -> dict:
    return {job[0]: photo_jpeg(job) for job in chunk}


def generate_until(jobs: list, cores: int, deadline: float, chunk: int = 32) -> dict:
    """Write the JPEGs of `jobs` in order with `cores` processes until perf_counter() `deadline`:
    {path: bytes} of those written (all of them, unless the deadline came first)."""
    made: dict = {}
    pool = ProcessPoolExecutor(cores)
    try:
        futures = [pool.submit(_photo_jpegs, jobs[i:i + chunk]) for i in range(0, len(jobs), chunk)]
        wait(futures, timeout=max(0.0, deadline - time.perf_counter()))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # the chunks under way finish (a second or so)
    for f in futures:
        if f.done() and not f.cancelled() and f.exception() is None:
            made.update(f.result())
    return made


def run_bounded(cmd: list, timeout: float) -> tuple[int, str]:
    """Run `cmd` for at most `timeout` s, then kill it and every process under it (its pool workers);
    (exit code, last line of its stderr). It stays in the check's process group, so whatever kills
    the check kills it too."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        proc.communicate()
        return -9, f"still running after {timeout:.0f} s (killed, its workers too)"
    return proc.returncode, " ".join(err.strip().splitlines()[-1:])


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and its descendants: stopped first, so none forks or is orphaned meanwhile."""
    os.kill(pid, signal.SIGSTOP)
    family, parents = [pid], {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
    for p in family:  # grows while it is walked: children of children
        family += [c for c, parent in parents.items() if parent == p and c not in family]
    for p in family:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
