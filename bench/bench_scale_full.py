"""The full ImageNet's scale: what each process holds per sample at millions of samples over 21,841 classes.

    python bench/bench_scale_full.py FOLDER [--samples 3000000] [--classes 21841] [--part-of 100]
                                            [--workers 2] [--skip prepare,trace,audit,loader] [--json]
    (or: python bench/bench_scale.py FOLDER --full ...)

The per-sample state is what grows to 14.2 M samples (fall11); the image work is per shard. So this
measures the index paths at --samples (default 3.0 M) and reports bytes per sample, projected to
14.2 M (the issue's budget: <= 1.5 GB per process):
- **prepare**: the real `prepare-shards --train fall11_whole.tar --holdout-per-class 10 --part 0/P`
  on a generated fall11-layout archive (FOLDER/input-full: a tar of 21,841 per-synset tars of
  `nXXXXXXXX_<n>.JPEG`, class sizes skewed as the release's, every image the same ~630 B JPEG, so
  the 3 M-member archive is ~4.7 GB). The main process indexes and plans all of it (imagenet-22k,
  the held-out split) and writes the job state; this part then builds 1/P of the shards, so the
  workers' share of it shows too without writing 9 GB of shards. Peak RSS/PSS per process as
  bench_scale.py samples it (VmHWM, smaps_rollup).
- **trace**: index + plan once more under tracemalloc in one process: Python heap per member of the
  index (`MemberTable`), of the plan, and the peak while planning.
- **audit**: audit-shards' set-wide state, the one part that grows with the samples: what each
  worker sends back per shard (audit/run.py `ShardResult`: packed keys, 8-byte key hashes, 16-byte
  image digests, class counts) for --samples synthetic keys, then the real set-wide checks on it
  (`set_wide_key_checks`: duplicate keys, holdout; `set_wide_content`: duplicate images); reading
  a shard is bounded by one shard.
- **loader**: `make_loader` over a manifest of --samples samples in --samples/1000 shards and 21,841
  classes (written here: no shard is read; the loader's index is the manifest and the epoch plan).
Numbers are measured, never asserted; docs/benchmarks.md ("Full ImageNet scale") keeps them.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from imagenet_shards.pipeline.format.label_spaces import label_space
from imagenet_shards.pipeline.tools.synthetic.archives import add_member, tar_bytes

INPUT_VERSION = 1
FULL_SAMPLES = 14_200_000  # fall11's images, to project to
HOLDOUT = 10


def _sibling(name: str):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def class_sizes(classes: int, samples: int, seed: int) -> np.ndarray:
    """Per-class image counts summing to `samples`, skewed as fall11's (a lognormal spread, >= 1)."""
    rng = np.random.default_rng([seed, 22])
    w = rng.lognormal(mean=0.0, sigma=1.0, size=classes)
    sizes = np.maximum(1, np.floor(w / w.sum() * samples)).astype(np.int64)
    sizes[np.argsort(-w)[: samples - sizes.sum()]] += 1 if samples > sizes.sum() else 0
    while sizes.sum() > samples:  # the floor of 1 can overshoot by a few
        sizes[np.argmax(sizes)] -= 1
    return sizes


def tiny_jpeg() -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), 128, np.uint8), "RGB").save(buf, "JPEG", quality=50)
    return buf.getvalue()


def build_input(folder: Path, *, classes: int, samples: int, seed: int = 0, progress=print) -> dict:
    """Write (or reuse) FOLDER/fall11_whole.tar; returns what input.json records."""
    args = {"version": INPUT_VERSION, "classes": classes, "samples": samples, "seed": seed}
    stamp = folder / "input.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("args") == args:
        return json.loads(stamp.read_text())
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    t0 = time.monotonic()
    wnids = label_space("imagenet-22k").wnids[:classes]
    sizes = class_sizes(len(wnids), samples, seed)
    image, rng = tiny_jpeg(), np.random.default_rng([seed, 23])
    with tarfile.open(folder / "fall11_whole.tar", "w", format=tarfile.GNU_FORMAT) as outer:
        for c, (wnid, n) in enumerate(zip(wnids, sizes)):
            numbers = np.sort(rng.choice(np.arange(1, max(60000, 2 * n)), n, replace=False))
            add_member(outer, f"{wnid}.tar", tar_bytes([(f"{wnid}_{k}.JPEG", image) for k in numbers.tolist()]))
            if c % 2000 == 1999:
                progress(f"input: {c + 1}/{len(wnids)} classes ({time.monotonic() - t0:.0f} s)")
    found = {"args": args, "images": int(sizes.sum()), "largest_class": int(sizes.max()),
             "median_class": int(np.median(sizes)), "bytes": (folder / "fall11_whole.tar").stat().st_size,
             "build_s": round(time.monotonic() - t0, 1)}
    stamp.write_text(json.dumps(found, indent=1) + "\n")
    return found


TRACE = """
import json, sys, time, tracemalloc
from functools import partial
from imagenet_shards.pipeline.prepare.config import Config
from imagenet_shards.pipeline.prepare.holdout import holdout_rows
from imagenet_shards.pipeline.prepare.plan import plan_splits
from imagenet_shards.pipeline.prepare.inputs import index_sources
from imagenet_shards.pipeline.prepare.label_space import resolve_label_space
cfg = Config(holdout_per_class={k})
tracemalloc.start()
t0 = time.monotonic()
indexes, classes = index_sources(cfg, train=sys.argv[1])
n = len(indexes["train"].members)
indexed, index_peak = tracemalloc.get_traced_memory()
t1 = time.monotonic()
tracemalloc.reset_peak()
cfg, classes = resolve_label_space(cfg, classes)
_, _, plans = plan_splits(cfg, {{"train": indexes["train"].members}}, classes,
                          holdout=partial(holdout_rows, per_class={k}, seed=0))
planned, plan_peak = tracemalloc.get_traced_memory()
t2 = time.monotonic()
print(json.dumps({{"members": n, "table_bytes_per_member": round(indexes["train"].members.nbytes() / n, 1),
                  "index_bytes_per_member": round(indexed / n, 1), "index_peak_bytes_per_member": round(index_peak / n, 1),
                  "plan_bytes_per_member": round((planned - indexed) / n, 1),
                  "plan_peak_bytes_per_member": round(plan_peak / n, 1), "index_s": round(t1 - t0, 1),
                  "plan_s": round(t2 - t1, 1), "shards": {{s: len(p.shards) for s, p in plans.items()}}}}))
"""

AUDIT = """
import hashlib, json, sys, time
from collections import Counter
import numpy as np
from imagenet_shards.pipeline.audit.duplicates import key_hashes, pack_keys
from imagenet_shards.pipeline.audit.run import ShardResult, fold_class_counts, set_wide_content, set_wide_key_checks
from imagenet_shards.pipeline.format.label_spaces import label_space
n, per = int(sys.argv[1]), 1000
wnids = label_space("imagenet-22k").wnids
t0 = time.monotonic()
results, counts, folded = [], Counter(), {{}}
for s in range(0, n, per):  # what each audit worker sends back (audit/run.py ShardResult)
    keys = [f"{{wnids[(s + i) % len(wnids)]}}_{{s + i}}" for i in range(min(per, n - s))]
    digests = b"".join(hashlib.blake2b(k.encode(), digest_size=16).digest() for k in keys)
    c = Counter(k.split("_")[0] for k in keys)
    counts.update(c)
    results.append(ShardResult(f"train/imagenet22k-train-{{s // per:06d}}.tar", "train", [], pack_keys(keys),
                               len(keys), key_hashes(keys), np.arange(len(keys), dtype=np.uint32).tobytes(),
                               digests, c, True, len(keys) * 3072))
    fold_class_counts(results[-1], folded)  # as audit() does when a result arrives
built = time.monotonic()
m = {{"config": {{"holdout": {{"per_class": 10}}}}, "splits": {{"train": {{"class_counts": dict(counts)}},
      "val": {{"class_counts": {{}}}}}}, "rejected": []}}
problems = set_wide_key_checks(m, results, ["train"], True)
dups = set_wide_content(results, ["train"])
print(json.dumps({{"samples": n, "build_s": round(built - t0, 1), "checks_s": round(time.monotonic() - built, 1),
                  "problems": len(problems)}}))
"""

LOADER = """
import json, sys, time
from imagenet_shards.train.loader import make_loader
t0 = time.monotonic()
loader = make_loader(sys.argv[1], "train", 256, workers=2, res=64)
batches = len(loader)
print(json.dumps({{"batches": batches, "s": round(time.monotonic() - t0, 1)}}))
"""


def write_manifest(folder: Path, samples: int, classes: int) -> Path:
    """A manifest of `samples` train samples in 1000-sample shards over `classes` classes (no shard files):
    what the loader reads before it opens a shard. one listed fix a shard (0.1 %, as ImageNet-1k's)."""
    from imagenet_shards.pipeline.format.manifest import build_manifest, write_outputs

    wnids = label_space("imagenet-22k").wnids[:classes]
    sizes = class_sizes(len(wnids), samples, 0)
    records = []
    for i, start in enumerate(range(0, samples, 1000)):
        n = min(1000, samples - start)
        records.append({"index": i, "url": f"train/imagenet22k-train-{i:06d}.tar", "num_samples": n,
                        "bytes": n * 3072, "sha256": hashlib.sha256(str(i).encode()).hexdigest(),
                        "md5": hashlib.md5(str(i).encode()).hexdigest(), "rejected": [], "skipped": [],
                        "class_counts": {}, "fixed": [{"split": "train", "key": f"{wnids[0]}_{start}",
                                                       "fixes": ["gray_to_rgb"]}]})
    records[0]["class_counts"] = {w: int(n) for w, n in zip(wnids, sizes)}
    state = {"config": {"splits": ["train"]}, "sources": [],
             "classes": [{"index": i, "wnid": w, "name": w} for i, w in enumerate(wnids)],
             "splits": {"train": {"images_in": samples, "plan_rejected": []}}, "dataset": "imagenet22k"}
    out = folder / "manifest-only"
    out.mkdir(parents=True, exist_ok=True)
    write_outputs(str(out), build_manifest(state, {"train": records}))
    return out


def _steps(folder: Path, samples: int, classes: int, part_of: int, workers: int, skip: set[str], progress) -> dict:
    """Build (or reuse) the input of `samples` and measure each step on it."""
    scale = _sibling("bench_scale")
    work = folder / f"n{samples}"
    inp = build_input(work / "input", classes=classes, samples=samples, progress=progress)
    src, out = work / "input" / "fall11_whole.tar", work / "out"
    if out.exists():
        shutil.rmtree(out)
    py = [sys.executable, "-c"]
    steps = []
    if "prepare" not in skip:
        progress(f"{samples:,}: prepare-shards (index + plan of everything, build 1/{part_of}) ...")
        steps.append(scale.measure("prepare", py + [
            "import sys; from imagenet_shards.pipeline.prepare.cli import main; sys.exit(main())",
            "--train", str(src), "--holdout-per-class", str(HOLDOUT), "--part", f"0/{part_of}", "--out", str(out),
            "--workers", str(workers), "--quiet", "--json"], work / "prepare.log"))
    if "audit" not in skip:
        progress(f"{samples:,}: audit set-wide state ...")
        steps.append(scale.measure("audit", py + [AUDIT.format(), str(samples)], work / "audit.log"))
    if "loader" not in skip:
        progress(f"{samples:,}: loader index ...")
        manifest = write_manifest(work, samples, classes)
        steps.append(scale.measure("loader", py + [LOADER.format(), str(manifest)], work / "loader.log"))
    for st in steps:
        st["log_tail"] = Path(st["log"]).read_text()[-600:] if Path(st["log"]).exists() else ""
    shutil.rmtree(out, ignore_errors=True)
    return {"samples": samples, "input": inp, "steps": steps}


def _peak(step: dict, role: str) -> float:
    procs = [p for p in step["processes"] if (p["role"] == "main") == (role == "main")]
    return max((p["peak_rss_mb"] for p in procs), default=0.0)


def run(folder: Path, *, samples: int, classes: int, part_of: int, workers: int, skip: set[str], progress=print) -> dict:
    """Measure at samples / 3 and at samples; per step and process, the marginal bytes per sample
    between the two and the projection to 14.2 M (peak at `samples` + marginal x the rest)."""
    small, big = (_steps(folder, n, classes, part_of, workers, skip, progress) for n in (samples // 3, samples))
    projected = []
    for a, b in zip(small["steps"], big["steps"]):
        for role in ("main", "workers"):
            lo, hi = _peak(a, role), _peak(b, role)
            if not hi:
                continue
            per = (hi - lo) * 2**20 / (big["samples"] - small["samples"])
            projected.append({"step": b["step"], "process": role, "peak_rss_mb": {small["samples"]: lo, big["samples"]: hi},
                              "marginal_bytes_per_sample": round(per, 1),
                              "projected_mb_at_14_2M": round(hi + per * (FULL_SAMPLES - big["samples"]) / 2**20)})
    traced = None
    if "trace" not in skip:
        progress("traced index + plan ...")
        src = folder / f"n{samples}" / "input" / "fall11_whole.tar"
        done = subprocess.run([sys.executable, "-c", TRACE.format(k=HOLDOUT), str(src)], capture_output=True, text=True)
        traced = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else \
            {"rc": done.returncode, "error": done.stderr[-2000:]}
    return {"machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
            "python": platform.python_version(), "workers": workers, "part_of": part_of, "classes": classes,
            "runs": [small, big], "projected": projected, "trace": traced}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, help="work folder (the input is kept in FOLDER/input-full and reused)")
    p.add_argument("--samples", type=int, default=3_000_000)
    p.add_argument("--classes", type=int, default=21841)
    p.add_argument("--part-of", type=int, default=100, help="prepare builds part 0 of this many (default 100)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--skip", default="", help="comma-separated steps to leave out: prepare, trace, audit, loader")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    say = (lambda m: print(m, file=sys.stderr, flush=True))
    result = run(args.folder, samples=args.samples, classes=args.classes, part_of=args.part_of, workers=args.workers,
                 skip={s for s in args.skip.split(",") if s}, progress=say)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for r in result["runs"]:
            print(f"\n{r['samples']:,} samples:")
            print(_sibling("bench_scale").table(r))
        print("\n| step | process | peak RSS MB (small -> large) | marginal B/sample | projected MB at 14.2 M |")
        print("|---|---|---|---:|---:|")
        for p in result["projected"]:
            print(f"| {p['step']} | {p['process']} | {' -> '.join(f'{v:.0f}' for v in p['peak_rss_mb'].values())} | "
                  f"{p['marginal_bytes_per_sample']} | {p['projected_mb_at_14_2M']} |")
        if result["trace"]:
            print("trace:", json.dumps(result["trace"]))
    return 0 if all(s["rc"] == 0 for r in result["runs"] for s in r["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
