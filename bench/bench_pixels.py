"""The pixel form per core against FFCV's rn18 and rn50 writes and our JPEG form, in one run (issue 32).

    python bench/bench_pixels.py WORK [--peers DIR] [--rounds 3] [--batches 30] [--json]

1. **data** (reused while present): bench/benchmarks.py's ``make_data`` with 100 train images per
   class (1,000 ImageNet-like images, prepare-shards' defaults: ~100 KB per JPEG sample), then the
   pixel form of the same shards at max side 400 (FFCV rn18's) in WORK/pixels-400;
2. ``bench-loader --compare``'s ``compare`` at 224, 192 and 160 px, RandomResizedCrop + flip to
   uint8, this process pinned to one core (its worker inherits it), batch 64: our loader over the
   JPEG shards (the reference), over the pixel shards, and FFCV written with ffcv-imagenet's rn18
   and rn50 settings (peers.FFCV_WRITES), images per CPU-second and bytes per image;
3. the issue's ratios, and docs/recipes.md's "loader cores per H200" for ``ffcv-rn18-16`` (2 x the
   published A100 rate, times CPU seconds per image over its schedule, 12 epochs at 160 px and 4 at
   192) for each form.
The pixel shards come from ``prepare-shards derive`` at max side 400 (benchmarks.py's ``pixel_form``), the
schedule from the recipe as the trainer runs it (whole_job.py's ``recipe_schedule``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import benchmarks  # noqa: E402  (bench/, this folder)
import whole_job  # noqa: E402

from imagenet_shards.train.bench.compare import compare  # noqa: E402
from imagenet_shards.train.bench.report import machine_info  # noqa: E402

RESOLUTIONS = (224, 192, 160)
PIXEL_ROW, JPEG_ROW = whole_job.PIXEL_ROW, whole_job.JPEG_ROW
FFCV = {"rn18": "FFCV, rn18 write (10 % JPEG, 400 px)", "rn50": "FFCV, rn50 write (50 % JPEG, 500 px)"}
# docs/recipes.md: ffcv-rn18-16 on one A100 in 35.0 min, an H200 assumed 2x; 12 epochs at 160 px, 4 at 192
H200_RN18 = 2 * 16 * 1_281_167 / (35.0 * 60)
RN18_SCHEDULE = whole_job.recipe_schedule("ffcv-rn18-16")


def tables(work: Path, *, peers, rounds: int, batches: int, say) -> dict:
    shards = benchmarks.make_data(work, classes=10, per_class=100, seed=1, say=say)
    pixels = benchmarks.pixel_form(shards, benchmarks.pixel_dir(work))
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[0]})
    try:
        return {res: compare(str(shards), res=res, work=str(work / "compare"), workers=1, batches=batches,
                             batch_size=64, rounds=rounds, peers=peers, progress=say, also_decoders=(),
                             forms={whole_job.PIXEL_LABEL: str(pixels)}, only=(JPEG_ROW, *FFCV.values()))
                for res in RESOLUTIONS}
    finally:
        os.sched_setaffinity(0, set(allowed))


def _rate(rows: list[dict], name: str) -> float | None:
    return next((r["images_per_cpu_s"] for r in rows if r["name"] == name), None)


def summary(loader: dict) -> dict:
    """The issue's ratios per resolution, bytes per image, and loader cores per H200 for ffcv-rn18-16."""
    out = {}
    for res, rows in loader.items():
        pix, jpeg, rn18 = (_rate(rows, n) for n in (PIXEL_ROW, JPEG_ROW, FFCV["rn18"]))
        out[res] = {"pixel_vs_ffcv_rn18": pix / rn18 if pix and rn18 else None,
                    "pixel_vs_our_jpeg": pix / jpeg if pix and jpeg else None}
    size = {r["name"]: r.get("bytes_per_image") for r in loader[RESOLUTIONS[0]]}
    out["bytes_pixel_vs_ffcv_rn18"] = (size[PIXEL_ROW] / size[FFCV["rn18"]]
                                      if size.get(PIXEL_ROW) and size.get(FFCV["rn18"]) else None)
    for name in (JPEG_ROW, PIXEL_ROW):
        rates = [(_rate(loader[res], name), n) for res, n in RN18_SCHEDULE]
        seconds = sum(n / r for r, n in rates) / sum(n for _, n in rates) if all(r for r, _ in rates) else None
        out[f"loader cores per H200, ffcv-rn18-16, {name}"] = H200_RN18 * seconds if seconds else None
    return out


def markdown(loader: dict, summ: dict) -> list[str]:
    names = [r["name"] for r in loader[RESOLUTIONS[0]]]
    head = "| row | KB per image | " + " | ".join(f"{res} px img/CPU-s | pixel ÷" for res in RESOLUTIONS) + " | note |"
    lines = [head, "|---|---:|" + "---:|---:|" * len(RESOLUTIONS) + "---|"]
    fmt = lambda v, f: "·" if v is None else format(v, f)  # noqa: E731
    for name in names:
        rows = {res: next(r for r in loader[res] if r["name"] == name) for res in RESOLUTIONS}
        first = rows[RESOLUTIONS[0]]
        cells = []
        for res in RESOLUTIONS:
            rate, pix = rows[res]["images_per_cpu_s"], _rate(loader[res], PIXEL_ROW)
            cells += [fmt(rate, ",.0f"), fmt(pix / rate if pix and rate else None, ".2f")]
        size = first.get("bytes_per_image")
        lines.append(f"| {name} | {fmt(size / 1000 if size else None, '.0f')} | " + " | ".join(cells)
                     + f" | {first.get('note') or ''} |")
    lines.append("")
    for key, value in summ.items():
        shown = ", ".join(f"{k} {fmt(v, '.2f')}" for k, v in value.items()) if isinstance(value, dict) else fmt(value, ".2f")
        lines.append(f"- {key}{' px' if isinstance(key, int) else ''}: {shown}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--peers", default=None, help="the folder shared/peers/setup.sh prints (FFCV's environment)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of markdown")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    say = lambda m: print(f"[bench-pixels] {m}", file=sys.stderr, flush=True)  # noqa: E731
    start, load0 = datetime.datetime.now(datetime.timezone.utc), os.getloadavg()
    loader = tables(args.work, peers=args.peers, rounds=args.rounds, batches=args.batches, say=say)
    summ = summary(loader)
    if args.json:
        print(json.dumps({"loader": loader, "summary": summ}, indent=1, default=str))
        return 0
    end, load1 = datetime.datetime.now(datetime.timezone.utc), os.getloadavg()
    print(f"**This run**: {start:%Y-%m-%d %H:%M}–{end:%H:%M} UTC with `python bench/bench_pixels.py {' '.join(map(str, argv or sys.argv[1:]))}`; "
          f"machine: {json.dumps(machine_info())}; load average {load0[0]:.1f} / {load0[1]:.1f} / {load0[2]:.1f} at the "
          f"start, {load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} at the end.\n")
    print("\n".join(markdown(loader, summ)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
