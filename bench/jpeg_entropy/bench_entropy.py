"""Issue 34's prototype: the region decode's entropy decoding, as today and with two ways out of
libjpeg-turbo's slow path, on our stored JPEGs (a benchmark, not product code), and the way that was
built into the loader (the ``product`` mode: region_start with the own decoder's hook as built).

    python bench/jpeg_entropy/bench_entropy.py WORK [--images 300] [--rounds 5] [--seed 0] [--no-callgrind]
                                               [--flips 8] [--json]

1. **data** (WORK/src, WORK/shards, reused while the arguments match): bench/benchmarks.py's
   ``make_data``: ``make-synthetic-imagenet --imagenet-like --no-quirks`` (10 classes, ``images / 10``
   train images each), then ``prepare-shards`` with its defaults (restart-marker grid, longer side
   500, q90);
2. **corpus** (WORK/corpus.bin): every train JPEG of the shards with the crop box the loader draws
   for it in epoch 0 (``batching.sample_rng`` -> ``decode.random_resized_crop_params``, 224 px);
3. **build** (WORK/entropy_bench): ``cc -O2`` over entropy_bench.c, the vendored and patched
   ``vendor/jdhuff_patched.c`` (libjpeg-turbo 2.1.5), and the loader's own region-decode C files
   (found wherever they live in the tree, compiled unchanged), the own decoder among them
   (``pipeline/native/jpegcrop_cells.c``, "cells.c" below), against the system libjpeg-turbo;
4. **check**: on every image, the coefficients libjpeg writes in the region decode equal the
   patched decoder's and cells.c's (1, 2, 4 streams), cells.c's over the whole entry JPEG equal
   ``jpeg_read_coefficients``', and the region's pixels are byte-identical in every mode (the
   built hook's too); a difference fails the run (exit 1) before anything is timed;
5. **timing**: each mode over the whole corpus, modes taking turns, ``--rounds`` times; the median
   round, microseconds per image (this thread's CPU time: still noisy on a shared box, say so);
6. **instructions**: one round of each mode under ``valgrind --tool=callgrind`` (collecting only
   inside ``run_images``; cells.c's part from ``own_predecode``'s inclusive count);
7. **damaged data** (``--flips N``, 0: skipped): N random bit flips in each image's entropy-coded
   data, every mode built with AddressSanitizer and UBSan (a fault stops the run); which images each
   mode rejects, against libjpeg's. A probe, not a fuzzer.

Prints a markdown table (the one docs/loader.md carries) and, with ``--json``, the figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import re
import shutil
import statistics
import struct
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODES = ("lib", "patched", "own1", "own2", "own4", "product")
LABELS = {"lib": "(a) libjpeg-turbo 2.1.5 as today (decode_mcu_slow, every MCU)",
          "patched": "(b) patched jdhuff.c: fast path inside a cell",
          "own1": "(b) own table-driven decoder, 1 cell at a time",
          "own2": "(c) own decoder, 2 cells interleaved",
          "own4": "(c) own decoder, 4 cells interleaved",
          "product": "built: the loader's hook (jpegcrop_entropy.c, 2 cells)"}
# the loader's C files, compiled in unchanged; jpegcrop_cells.c is the own decoder the modes time
LOADER_SOURCES = ("jpegcrop_entry.c", "jpegcrop_region.c", "jpegcrop_resample.c", "jpegcrop_entropy.c", "jpegcrop_cells.c")


def _find_all(name: str) -> list[Path]:
    """The files called ``name`` in the repository, outside hidden and temporary folders, the virtual
    environment, build/, bench/ and tests/."""
    skip = {".venv", "bench", "tests", "build", "node_modules", "tmp-data"}
    hits = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if not d.startswith((".", "tmp")) and d not in skip]
        hits += [Path(folder) / name] if name in files else []
    return sorted(hits)


def _find(name: str) -> Path:
    """The one file called ``name`` in the repository, wherever the C sources live at the time."""
    hits = _find_all(name)
    if len(hits) != 1:
        raise SystemExit(f"error: expected one {name} in the repository, found {len(hits)}: {hits}")
    return hits[0]


def build(work: Path, *, name: str = "entropy_bench", flags: tuple[str, ...] = ("-O2",)) -> Path:
    """WORK/NAME, compiled with ``flags`` from this folder and the loader's C files."""
    loader = [_find(n) for n in LOADER_SOURCES]
    # the headers they include: beside them, or (main's layout) pipeline/format/jpeg_warnings.h
    includes = sorted({p.parent for p in loader} | {p.parent for p in _find_all("jpeg_warnings.h")})
    exe = work / name
    # the vendored file needs libjpeg's private headers, which it finds beside it (vendor/) only
    obj = work / f"{name}.jdhuff_patched.o"
    subprocess.run(["cc", *flags, "-c", "-I", str(HERE / "vendor"), "-o", str(obj),
                    str(HERE / "vendor" / "jdhuff_patched.c")], check=True)
    subprocess.run(["cc", *flags, "-std=gnu11", "-o", str(exe), str(HERE / "entropy_bench.c"), *map(str, loader), "-I", str(HERE), "-I", str(HERE / "vendor"), *[f"-I{d}" for d in includes],
                    str(obj), "-ljpeg", "-lm", "-lpthread"], check=True)
    return exe


def make_data(work: Path, *, images: int, seed: int, say) -> Path:
    """WORK/shards: bench/benchmarks.py's data (prepare-shards' defaults over an ImageNet-like
    synthetic set of 10 classes), reused while the arguments match."""
    sys.path.insert(0, str(HERE.parent))
    import benchmarks  # bench/benchmarks.py

    return benchmarks.make_data(work, classes=10, per_class=max(1, images // 10), seed=seed, say=say)


def write_corpus(shards: Path, path: Path, *, seed: int) -> dict:
    """Every train JPEG with the 224 px RandomResizedCrop box the loader draws for it (epoch seed
    ``seed``), as entropy_bench reads them; returns the corpus' summary."""
    from imagenet_shards.train import loader as D
    from imagenet_shards.train.loader import _jpegcrop
    from imagenet_shards.train.loader import decode as dec
    from imagenet_shards.train.loader.batching import sample_rng

    out, sizes, area = [], [], []
    for s in D.split_shards(D.read_manifest(str(shards)), str(shards), "train"):
        for rec in D.read_shard(s.url):
            w, h, _ = _jpegcrop.header(rec.jpg)
            top, left, ch, cw = dec.random_resized_crop_params(w, h, (0.08, 1.0), (3 / 4, 4 / 3), sample_rng(seed, rec))
            out.append(struct.pack("<I4d", len(rec.jpg), top, left, ch, cw) + rec.jpg)
            sizes.append((len(rec.jpg), w, h))
            area.append(ch * cw / (w * h))
    path.write_bytes(b"JEC1" + struct.pack("<I", len(out)) + b"".join(out))
    return {"images": len(out), "mean_kb": statistics.mean(s[0] for s in sizes) / 1000,
            "mean_size": (statistics.mean(s[1] for s in sizes), statistics.mean(s[2] for s in sizes)),
            "mean_crop_area": statistics.mean(area)}


def flip_probe(work: Path, corpus: Path, *, flips: int, seed: int, cut: bool = False) -> dict:
    """``flips`` random bit flips in the entropy-coded data of every image (seeded; with ``cut``,
    instead one cell of each image cut short: 1-24 bytes removed from inside it, its marker kept),
    each mode run over them built with AddressSanitizer and UBSan: per mode the images it rejects,
    and against libjpeg's (a) the ones it lets through that libjpeg rejects (``missed``) and the
    other way round."""
    data = corpus.read_bytes()
    count, at, out, rng = struct.unpack("<I", data[4:8])[0], 8, [], random.Random(seed)
    for _ in range(count):
        size = struct.unpack("<I", data[at:at + 4])[0]
        head, jpg = data[at:at + 36], bytearray(data[at + 36:at + 36 + size])
        at += 36 + size
        sos = jpg.index(b"\xff\xda")
        start = sos + 2 + (jpg[sos + 2] << 8 | jpg[sos + 3])
        if cut:  # a cell cut short: bytes removed before one of its markers' successors
            markers = [i for i in range(start, len(jpg) - 1) if jpg[i] == 0xFF and 0xD0 <= jpg[i + 1] <= 0xD9]
            a, b = rng.choice([(x + 2, y) for x, y in zip([start - 2] + markers, markers) if y - x > 4])
            x = rng.randrange(a, b - 1)
            del jpg[x:rng.randrange(x + 1, min(b, x + 24) + 1)]
            head = struct.pack("<I", len(jpg)) + head[4:]
        for _ in range(0 if cut else flips):
            jpg[rng.randrange(start, len(jpg) - 2)] ^= 1 << rng.randrange(8)
        out.append(head + bytes(jpg))
    damaged = work / "flipped.bin"
    damaged.write_bytes(b"JEC1" + struct.pack("<I", count) + b"".join(out))
    try:
        exe = build(work, name="entropy_bench_asan", flags=("-O1", "-g", "-fsanitize=address,undefined",
                                                            "-fno-sanitize-recover=undefined"))
    except subprocess.CalledProcessError:
        return {"not run": "the C compiler cannot build with AddressSanitizer and UBSan here"}
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
    run = subprocess.run([str(exe), str(damaged), "flags"], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise SystemExit(f"error: a sanitizer stopped the bench on damaged data:\n{run.stderr[-3000:]}")
    rejected = {m: set(v) for m, v in _json_lines(run.stdout)[0].items()}
    return {m: {"rejected": len(r), "missed": sorted(rejected["lib"] - r), "extra": sorted(r - rejected["lib"])}
            for m, r in rejected.items()}


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def timing(exe: Path, corpus: Path, *, rounds: int) -> dict:
    """Per mode: the median and the spread of ``rounds`` rounds (modes taking turns)."""
    runs = {m: [] for m in MODES}
    for _ in range(rounds):
        for m in MODES:
            row = _json_lines(subprocess.run([str(exe), str(corpus), m, "1"], check=True, capture_output=True,
                                             text=True).stdout)[0]
            if row["failed"]:
                raise SystemExit(f"error: {row['failed']} images failed in mode {m}")
            runs[m].append(row)
    out = {}
    for m, rows in runs.items():
        region = [r["region_us"] for r in rows]
        own = [r["own_us"] for r in rows]
        out[m] = {"region_us": statistics.median(region), "region_min": min(region), "region_max": max(region),
                  "own_us": statistics.median(own), "mcus": rows[0]["mcus"], "own_mcus": rows[0]["own_mcus"],
                  "images": rows[0]["images"], "fast_tries": rows[0]["fast_tries"],
                  "fast_failures": rows[0]["fast_failures"]}
    return out


def instructions(exe: Path, corpus: Path, work: Path, *, images: int) -> dict:
    """Per mode: instructions per image inside run_images, and inside own_predecode (cells.c's part)."""
    out = {}
    for m in MODES:
        cg = work / f"callgrind.{m}.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", "--toggle-collect=run_images*",
                        str(exe), str(corpus), m, "1"], check=True, capture_output=True)
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(cg)], check=True, capture_output=True,
                             text=True).stdout
        total = int(re.search(r"^summary:\s+(\d+)", cg.read_text(), re.M).group(1))
        own = re.search(r"^\s*([\d,]+) .*:own_predecode \[", ann, re.M)
        out[m] = {"ir": total / images, "own_ir": int(own.group(1).replace(",", "")) / images if own else 0.0}
        cg.unlink()
    return out


def _cut(fraction: float) -> str:
    return "—" if abs(fraction) < 0.005 else f"{-fraction:+.0%}".replace("-", "−")


def table(t: dict, ir: dict | None) -> str:
    """The markdown table: per mode, µs and instructions per image, and the cut of the region decode."""
    base, base_ir = t["lib"]["region_us"], ir["lib"]["ir"] if ir else None
    # the region decode with the entropy decoding free: an own mode's region minus cells.c's part
    free_us = statistics.median(t[m]["region_us"] - t[m]["own_us"] for m in ("own1", "own2", "own4"))
    free_ir = statistics.median(ir[m]["ir"] - ir[m]["own_ir"] for m in ("own1", "own2", "own4")) if ir else None
    head = ("| mode | region decode, µs/image (median; min–max) | entropy decode, µs/image | "
            "region decode, instructions/image | entropy decode, instructions/image | region decode vs (a) |")
    rows = [head, "|" + "---|" * 6]
    for m in MODES:
        r = t[m]
        ent = r["own_us"] if m.startswith("own") else r["region_us"] - free_us
        cut_us = 1 - r["region_us"] / base
        cells = [LABELS[m], f"{r['region_us']:.0f} ({r['region_min']:.0f}–{r['region_max']:.0f})", f"{ent:.0f}"]
        if ir:
            e_ir = ir[m]["own_ir"] if m.startswith("own") else ir[m]["ir"] - free_ir
            cells += [f"{ir[m]['ir'] / 1e3:.0f} k", f"{e_ir / 1e3:.0f} k",
                      f"{_cut(cut_us)} time, {_cut(1 - ir[m]['ir'] / base_ir)} instructions"]
        else:
            cells += ["not run", "not run", f"{_cut(cut_us)} time"]
        if m == "lib":
            cells[-1] = "baseline"
        rows.append("| " + " | ".join(cells) + " |")
    free = f"{free_us:.0f} µs" + (f", {free_ir / 1e3:.0f} k instructions" if ir else "")
    rows.append(f"| the rest of the region decode (entropy decoding free) | {free} | | | | |")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("--images", type=int, default=300)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0, help="data seed; also the epoch seed of the crops")
    p.add_argument("--no-callgrind", action="store_true")
    p.add_argument("--flips", type=int, default=8, help="bit flips per image for the damaged-data probe (0: none)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if shutil.which("cc") is None or (not args.no_callgrind and shutil.which("valgrind") is None):
        print("error: needs cc and (unless --no-callgrind) valgrind: apt-get install gcc valgrind", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    shards = make_data(args.work, images=args.images, seed=args.seed, say=say)
    corpus = args.work / "corpus.bin"
    summary = write_corpus(shards, corpus, seed=args.seed)
    exe = build(args.work)
    say("checking every mode against libjpeg")
    chk = subprocess.run([str(exe), str(corpus), "check"], capture_output=True, text=True)
    sys.stderr.write(chk.stderr)
    checked = _json_lines(chk.stdout)[0]
    if chk.returncode != 0:
        print(f"error: a mode's output differs from libjpeg's: {json.dumps(checked)}", file=sys.stderr)
        return 1
    say("timing")
    t = timing(exe, corpus, rounds=args.rounds)
    ir = None if args.no_callgrind else instructions(exe, corpus, args.work, images=summary["images"])
    say("damaged-data probe")
    probe = flip_probe(args.work, corpus, flips=args.flips, seed=args.seed) if args.flips > 0 else None
    if args.json:
        print(json.dumps({"corpus": summary, "check": checked, "timing": t, "instructions": ir, "probe": probe},
                         indent=1))
        return 0
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.machine()) if Path("/proc/cpuinfo").exists() else ""
    print(f"{datetime.date.today()}, {model}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} "
          f"(thread CPU time, median of {args.rounds} rounds), "
          f"`python bench/jpeg_entropy/bench_entropy.py WORK --images {args.images} --rounds {args.rounds} "
          f"--seed {args.seed}`: {summary['images']} stored JPEGs, {summary['mean_kb']:.0f} KB, "
          f"{summary['mean_size'][0]:.0f} × {summary['mean_size'][1]:.0f} mean, crop {summary['mean_crop_area']:.0%} "
          f"of the image on average; all modes equal to libjpeg on every image "
          f"({checked['images']} region decodes, {checked['entries']} entry JPEGs in full).\n")
    print(table(t, ir))
    p = t["patched"]
    print(f"\nThe patched fast path ran for {p['fast_tries'] / p['mcus']:.0%} of the MCUs and gave "
          f"{p['fast_failures'] / max(1, p['fast_tries']):.0%} of those back to the slow path.")
    if probe and "not run" in probe:
        print(f"\nDamaged-data probe not run: {probe['not run']}.")
    elif probe:
        print(f"\nDamaged data ({args.flips} random bit flips in each image's entropy-coded data; built with "
              f"AddressSanitizer and UBSan, no fault): images rejected, "
              + "; ".join(f"{m} {r['rejected']} (missed {len(r['missed'])}, extra {len(r['extra'])})"
                          for m, r in probe.items()) + " — missed and extra against (a).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
