"""What a read of winter21_whole.tar.gz costs, and what the one-read path saves and spills.

    python bench/bench_onepass.py FOLDER [--classes 40 --per-class 25] [--workers 2] [--json]

On a generated winter21-layout .tar.gz of ImageNet-like JPEGs (`images.photo_bytes`: ImageNet's bytes
per pixel and size spread; FOLDER/input, reused), measured in CPU seconds (the box may be shared):
- **inflate**: one sequential read of the .tar.gz through tarfile, every image's bytes (what each
  read of the file costs: gzip inflate plus tar parsing), in MB of images per CPU second, projected
  to winter21's 1.1 TB;
- **one read vs two**: `prepare-shards` on the .tar.gz as one part (one read: index and process
  together, `prepare/onepass.py`) and as two parts on one machine (each part reads it twice: the
  index, then its shards' images), CPU and wall of the whole command; the uncompressed tar (read by
  offset) beside them;
- **spill**: the one-read spill file's size (the processed images) against the images' raw bytes
  and the shards' bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

from imagenet_shards.pipeline.format.label_spaces import label_space
from imagenet_shards.pipeline.tools.synthetic.archives import tar_bytes
from imagenet_shards.pipeline.tools.synthetic.images import class_styles, imagenet_like_size, photo_bytes

WINTER21_BYTES = 1.1e12  # winter21_whole.tar.gz (image-net.org)


def build_input(folder: Path, classes: int, per_class: int) -> dict:
    stamp = folder / "input.json"
    args = {"classes": classes, "per_class": per_class, "version": 1}
    if stamp.exists() and json.loads(stamp.read_text())["args"] == args:
        return json.loads(stamp.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    wnids = label_space("imagenet-22k").wnids[::len(label_space("imagenet-22k").wnids) // classes][:classes]
    styles, inner, raw = class_styles(classes, 0), [], 0
    for c, w in enumerate(wnids):
        rng = np.random.default_rng([c, 7])
        members = []
        for i in range(per_class):
            data, _ = photo_bytes(styles[c], rng, *imagenet_like_size(rng), int(rng.integers(75, 96)))
            members.append((f"{w}_{i + 1}.JPEG", data))
            raw += len(data)
        inner.append((f"winter21_whole/{w}.tar", tar_bytes(members)))
    body = tar_bytes(inner)
    (folder / "winter21_whole.tar").write_bytes(body)
    (folder / "winter21_whole.tar.gz").write_bytes(gzip.compress(body, compresslevel=6, mtime=0))
    found = {"args": args, "images": classes * per_class, "image_bytes": raw, "tar_bytes": len(body),
             "targz_bytes": (folder / "winter21_whole.tar.gz").stat().st_size}
    stamp.write_text(json.dumps(found, indent=1))
    return found


def inflate_cost(path: Path) -> dict:
    t0, c0 = time.monotonic(), time.process_time()
    n = 0
    with tarfile.open(path, mode="r|gz") as outer:
        for oti in outer:
            if oti.isfile():
                with tarfile.open(fileobj=outer.extractfile(oti), mode="r|") as inner:
                    for ti in inner:
                        if ti.isfile():
                            n += len(inner.extractfile(ti).read())
    cpu = time.process_time() - c0
    return {"image_mb": round(n / 1e6, 1), "cpu_s": round(cpu, 2), "wall_s": round(time.monotonic() - t0, 2),
            "mb_per_cpu_s": round(n / 1e6 / cpu, 1)}


def _run(cmd: list[str]) -> dict:
    t0 = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": round(time.monotonic() - t0, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--classes", type=int, default=40)
    p.add_argument("--per-class", type=int, default=25)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    inp = build_input(args.folder / "input", args.classes, args.per_class)
    gz, plain = args.folder / "input" / "winter21_whole.tar.gz", args.folder / "input" / "winter21_whole.tar"
    tool = str(Path(sys.executable).with_name("prepare-shards"))
    common = ["--holdout-per-class", "2", "--workers", str(args.workers), "--quiet"]
    result = {"input": inp, "inflate": [inflate_cost(gz) for _ in range(3)]}
    best = min(result["inflate"], key=lambda r: r["cpu_s"])
    result["inflate_projected_hours_per_read_at_1_1TB"] = round(
        WINTER21_BYTES * inp["image_bytes"] / inp["targz_bytes"] / 1e6 / best["mb_per_cpu_s"] / 3600, 2)
    runs = {}
    for name, cmds in (("one read (.tar.gz, one part)", [[tool, "--train", str(gz), *common, "--out", "{out}"]]),
                       ("two reads (.tar.gz, parts 0/2 + 1/2)",
                        [[tool, "--train", str(gz), *common, "--out", "{out}", "--part", f"{i}/2"] for i in (0, 1)]),
                       ("by offset (uncompressed tar)", [[tool, "--train", str(plain), *common, "--out", "{out}"]])):
        out = args.folder / "out"
        shutil.rmtree(out, ignore_errors=True)
        parts = [_run([c.replace("{out}", str(out)) for c in cmd]) for cmd in cmds]
        runs[name] = {"wall_s": round(sum(x["wall_s"] for x in parts), 1),
                      "cpu_s": round(sum(x["cpu_s"] for x in parts), 1),
                      "shard_bytes": sum(f.stat().st_size for f in out.rglob("*.tar"))}
    result["prepare"] = runs
    from imagenet_shards.pipeline.prepare.config import Config
    from imagenet_shards.pipeline.prepare.onepass import index_and_process
    spill = args.folder / "spill" / "train.bin"
    shutil.rmtree(spill.parent, ignore_errors=True)
    index_and_process("tar-of-tars.gz", gz, "train", Config().policy(), str(spill), keep=lambda w: True,
                      workers=args.workers, progress=False)
    result["spill"] = {"spill_bytes": spill.stat().st_size, "image_bytes": inp["image_bytes"],
                       "shard_bytes": runs["one read (.tar.gz, one part)"]["shard_bytes"],
                       "spill_over_raw": round(spill.stat().st_size / inp["image_bytes"], 3)}
    shutil.rmtree(spill.parent, ignore_errors=True)
    result["machine"] = f"{os.uname().nodename}, {os.cpu_count()} CPUs"
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
