"""Every per-core table of docs/benchmarks.md in one run, printed as markdown (the doc pastes it as is).

    python bench/benchmarks.py WORK [--peers DIR] [--seed 1] [--rounds 3] [--batches 30] [--json]

Each table comes from this one run, on the same files, with the date, the machine and this command:
1. **data** (WORK/src, WORK/shards; reused while the arguments match): ``make-synthetic-imagenet
   --classes 10 --train-per-class 300 --val-per-class 10 --imagenet-like --no-quirks --seed SEED``
   (seed 1 by default: held out, not the set the code was tuned on), then ``prepare-shards`` with its
   defaults (restart-marker grid, longer side 500, q90);
   and WORK/pixels-400, the pixel form of WORK/shards (``prepare-shards derive --pixels yuv420
   --max-side 400``: FFCV rn18's max side), derived again only when the shards were rewritten, and
   WORK/pixels-400-direct, the same form straight from WORK/src (``prepare-shards --pixels yuv420
   --max-side 400``), likewise;
2. **loader per core** (``bench-loader --compare``'s ``compare``, this process pinned to one core, its
   worker inheriting it): RandomResizedCrop + flip at 224 px (every row), 192 and 160 px (ours over
   the JPEG shards and over both pixel sets, ImageFolder, DALI and the three FFCV rows: all JPEG, and
   ffcv-imagenet's rn50 and rn18 write settings), images per CPU-second of the process tree, bytes per
   image each row reads;
3. **where our loader's time goes** (bench/profile_loader.py at 224 px);
4. **prepare vs FFCV's writer** (bench/bench_prepare.py: marginal rates of N and 3N images, 1 worker
   pinned to one core; 2 workers, with the CPU-time-based 1 -> 2 scaling), and derive's marginal rate
   (the JPEG shards of those N and 3N images -> the pixel form, 1 worker pinned to one core, its rounds
   after prepare's), and ``prepare-shards --pixels yuv420 --max-side 400``'s (the same N and 3N images
   straight from the archive to the pixel form, one decode; as derive's row, its rounds after derive's);
5. **the whole job** (bench/whole_job.py): CPU per image of the offline stages once plus 16 epochs
   (at 224 px, and on ffcv-imagenet's rn50 and rn18 16-epoch schedules, per epoch as the trainer runs
   the recipes), ours (prepare; prepare + derive + the pixel form's loader; prepare --pixels + the loader
   over its set) against FFCV's writer and
   loader in each of its write settings, from the figures of tables 2 and 4, and issue 32's target;
6. **what the restart-marker grid costs and buys**: bytes, prepare and loader rates with the grid
   (the default) and with ``--no-restart-markers`` (WORK/shards-plain, our loader alone at 224 px).
Figures are measured here, never asserted; FFCV and DALI rows need ``--peers`` (or
$IMAGENET_SHARDS_PEERS: the folder shared/peers/setup.sh prints) and say ``not run: <reason>`` otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_prepare  # noqa: E402  (bench/, this folder)
import profile_loader  # noqa: E402
import whole_job as W  # noqa: E402

from imagenet_shards.train.bench.compare import compare  # noqa: E402
from imagenet_shards.train.bench.report import machine_info  # noqa: E402

RESOLUTIONS = (224, 192, 160)
FEW_ROWS = ("imagenet-shards (turbo)", "torchvision ImageFolder", "DALI", "FFCV")  # at 192 and 160 px


def _script(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def make_data(work: Path, *, classes: int, per_class: int, seed: int, say) -> Path:
    """WORK/src (the archives), WORK/shards (prepare-shards' defaults) and WORK/shards-plain (the same
    with --no-restart-markers), written unless present for these arguments; returns WORK/shards."""
    args = ["--classes", str(classes), "--train-per-class", str(per_class), "--val-per-class", "10",
            "--imagenet-like", "--no-quirks", "--seed", str(seed)]
    stamp = work / "data.json"
    if stamp.exists() and json.loads(stamp.read_text()) == args and (work / "shards-plain" / "manifest.json").exists():
        return work / "shards"
    say(f"writing the data under {work}")
    src = work / "src"
    for stale in (src, pixel_dir(work), direct_dir(work)):  # what an interrupted run left; older pixel sets
        shutil.rmtree(stale, ignore_errors=True)
    subprocess.run([_script("make-synthetic-imagenet"), str(src), *args, "--quiet"], check=True)
    for out, extra in ((work / "shards", []), (work / "shards-plain", ["--no-restart-markers"])):
        subprocess.run([_script("prepare-shards"), "--train", str(src / "ILSVRC2012_img_train.tar"),
                        "--val", str(src / "ILSVRC2012_img_val.tar"), "--devkit",
                        str(src / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(out), "--overwrite", "--quiet", *extra],
                       check=True)
    stamp.write_text(json.dumps(args))
    return work / "shards"


def pixel_dir(work: Path) -> Path:
    """Where WORK keeps the pixel form of WORK/shards."""
    return work / f"pixels-{W.PIXEL_SIDE}"


def direct_dir(work: Path) -> Path:
    """Where WORK keeps the pixel form written straight from WORK/src (prepare --pixels)."""
    return work / f"pixels-{W.PIXEL_SIDE}-direct"


def direct_form(work: Path) -> Path:
    """``prepare-shards --pixels yuv420 --max-side W.PIXEL_SIDE`` of WORK/src into direct_dir(work) (all
    cores; it resumes, or skips a job already done there); returns that folder."""
    src, out = work / "src", direct_dir(work)
    subprocess.run([_script("prepare-shards"), "--train", str(src / "ILSVRC2012_img_train.tar"),
                    "--val", str(src / "ILSVRC2012_img_val.tar"), "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"),
                    "--out", str(out), "--pixels", "yuv420", "--max-side", str(W.PIXEL_SIDE), "--quiet"], check=True)
    return out


def pixel_form(shards: Path, out: Path, max_side: int = W.PIXEL_SIDE) -> Path:
    """The pixel form of ``shards`` at ``max_side`` in ``out`` (prepare-shards derive, one worker; it
    resumes, or skips a job already done there); returns ``out``."""
    from imagenet_shards.pipeline.prepare.derive import derive

    derive(str(shards), out=str(out), max_side=max_side, workers=1, progress=False)
    return out


def loader_tables(shards: Path, pixels: Path, direct: Path, work: Path, *, peers, rounds: int, batches: int,
                  batch_size: int, say) -> dict:
    """compare() at each resolution, pinned to one core, with the pixel sets ``pixels`` and ``direct`` as rows:
    {res: rows}; and "plain": our loader alone at 224 px on the shards without restart markers (what
    the grid buys)."""
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[0]})
    common = dict(workers=1, batches=batches, batch_size=batch_size, rounds=rounds, peers=peers, progress=say)
    try:
        tables = {res: compare(str(shards), res=res, work=str(work / "compare"),
                               forms={W.PIXEL_LABEL: str(pixels), W.DIRECT_LABEL: str(direct)},
                               only=None if res == RESOLUTIONS[0] else FEW_ROWS, **common) for res in RESOLUTIONS}
        plain = shards.with_name(shards.name + "-plain")
        tables["plain"] = compare(str(plain), res=RESOLUTIONS[0], work=str(work / "compare-plain"), only=(), **common)
        return tables
    finally:
        os.sched_setaffinity(0, set(allowed))


def derive_rates(archives: Path, work: Path, *, n: int, rounds: int, say) -> dict:
    """Table 4's derive row: ``prepare-shards derive`` (JPEG shards -> the pixel form at W.PIXEL_SIDE),
    one worker pinned to one core, marginal rate between the shards of bench_prepare's N- and
    3N-image subsets (prepared as its 1-worker row prepares them, untimed here); medians of
    ``rounds`` rounds, bench_prepare's timing and summary."""
    from imagenet_shards.pipeline.prepare.derive import derive

    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[0]})
    try:
        sources = []
        for k in (n, 3 * n):
            tar, _, _ = bench_prepare.subset(archives / "ILSVRC2012_img_train.tar", k, work)
            bench_prepare.ours(tar, work / f"jpeg-{k}", 1)
            sources.append(work / f"jpeg-{k}")
        out = work / "pixels-out"

        def once(src: Path) -> dict:
            def run():
                shutil.rmtree(out, ignore_errors=True)
                return derive(str(src), out=str(out), max_side=W.PIXEL_SIDE, workers=1,
                              progress=False)["images_processed"]
            return {**bench_prepare.timed(run), "bytes": bench_prepare.shard_bytes(out)}

        pairs = []
        for r in range(rounds):
            say(f"round {r + 1}/{rounds}: derive, 1 worker")
            pairs.append(tuple(once(src) for src in sources))
    finally:
        os.sched_setaffinity(0, set(allowed))
    return bench_prepare.summary(W.DERIVE_ROW, pairs)


def direct_rates(archives: Path, work: Path, *, n: int, rounds: int, say) -> dict:
    """Table 4's prepare --pixels row: ``prepare-shards --pixels yuv420 --max-side W.PIXEL_SIDE`` on
    bench_prepare's N- and 3N-image subsets, one worker pinned to one core, marginal rate; medians of
    ``rounds`` rounds, bench_prepare's timing and summary (its 1-worker row, with the pixel form)."""
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[0]})
    try:
        tars = [bench_prepare.subset(archives / "ILSVRC2012_img_train.tar", k, work)[0] for k in (n, 3 * n)]
        pairs = []
        for r in range(rounds):
            say(f"round {r + 1}/{rounds}: prepare --pixels, 1 worker")
            pairs.append(tuple(bench_prepare.ours(tar, work / "direct-out", 1, pixels_side=W.PIXEL_SIDE)
                               for tar in tars))
    finally:
        os.sched_setaffinity(0, set(allowed))
    return bench_prepare.summary(W.DIRECT_ROW, pairs, "archives -> pixel shards, one decode")


def prepare_tables(work: Path, *, n: int, rounds: int, peers, say) -> dict:
    """Table 4: bench_prepare's rows, then derive's and prepare --pixels' (after prepare's, whose rounds
    they do not share)."""
    say("prepare-shards against FFCV's writer")
    prep = bench_prepare.run_bench(work / "src", work / "prepare", n=n, rounds=rounds, peers=peers, progress=say)
    say("prepare-shards derive")
    row = derive_rates(work / "src", work / "prepare", n=n, rounds=rounds, say=say)
    both = [prep["rows"][0].get("marginal_img_cpu_s"), row.get("marginal_img_cpu_s")]
    row["note"] = "JPEG shards -> pixel shards" + (f"; prepare + derive: {1 / sum(1 / r for r in both):,.0f} img per "
                                                   f"CPU-s" if all(both) else "")
    say("prepare-shards --pixels")
    prep["rows"][1:1] = [row, direct_rates(work / "src", work / "prepare", n=n, rounds=rounds, say=say)]
    return prep


# ----------------------------------------------------------------------------- markdown

_n = W.fmt


def _grid_md(loader: dict, prepare: list[dict]) -> list[str]:
    """What the restart-marker grid costs (bytes, prepare) and buys (the loader), from this run."""
    def prep(name):
        return next((r for r in prepare if r["name"] == name), {})
    grid, plain = loader[RESOLUTIONS[0]][0], loader["plain"][0]
    pg, pp = prep("imagenet-shards prepare, 1 worker"), prep("imagenet-shards prepare, 1 worker, --no-restart-markers")
    growth = 100 * (grid["bytes_per_image"] / plain["bytes_per_image"] - 1)
    rates = grid["images_per_cpu_s"], plain["images_per_cpu_s"]
    speed = rates[0] / rates[1] if all(rates) else None  # None: a round too short for the CPU clock's 10 ms
    return ["| shards | KB per image | loader img/CPU-s, 224 px | prepare img/CPU-s |", "|---|---:|---:|---:|",
            f"| with the grid (default) | {grid['bytes_per_image'] / 1000:.1f} | {_n(grid['images_per_cpu_s'])} | "
            f"{_n(pg.get('marginal_img_cpu_s'))} |",
            f"| `--no-restart-markers` | {plain['bytes_per_image'] / 1000:.1f} | {_n(plain['images_per_cpu_s'])} | "
            f"{_n(pp.get('marginal_img_cpu_s'))} |", "",
            f"The grid: {growth:+.2f} % bytes, ×{_n(speed, '.2f')} loader images per CPU-second at 224 px."]


def _loader_md(loader: dict) -> list[str]:
    loader = {res: rows for res, rows in loader.items() if res in RESOLUTIONS}
    names = list(dict.fromkeys(r["name"] for rows in loader.values() for r in rows))
    by = {res: {r["name"]: r for r in rows} for res, rows in loader.items()}
    head = " | ".join(f"{res} px img/CPU-s | ours ÷" for res in RESOLUTIONS)
    lines = [f"| row | KB per image | {head} | note |", "|---|---:|" + "---:|---:|" * len(RESOLUTIONS) + "---|"]
    for name in names:
        cells, note, size = [], "", None
        for res in RESOLUTIONS:
            r = by[res].get(name)
            if r is None:
                cells += ["·", "·"]
                continue
            size = r.get("bytes_per_image") or size
            note = r["note"] or note
            ratio = r.get("speedup_cpu")
            cells += [_n(r["images_per_cpu_s"]), "1.00" if name == names[0] else _n(ratio, ".2f")]
        lines.append(f"| {name} | {_n(None if size is None else size / 1000)} | {' | '.join(cells)} | {note} |")
    return lines


def _profile_md(prof: dict) -> list[str]:
    lines = [f"{prof['images']} images, {prof['mean_kb']:.0f} KB mean; CPU µs per image:", "",
             "| stage | µs per image |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} (ratio or share) |" if profile_loader.not_seconds(k) else f"| {k} | {v * 1e6:,.0f} |"
              for k, v in prof.items() if k not in ("images", "mean_kb")]
    return lines


def _prepare_md(prep: dict) -> list[str]:
    lines = ["| row | marginal img/s (wall) | img per CPU-s | ours ÷ this (CPU) | KB per image | note |",
             "|---|---:|---:|---:|---:|---|"]
    for r in prep["rows"]:
        if "marginal_img_s" not in r:
            lines.append(f"| {r['name']} | — | — | — | — | {r['note']} |")
            continue
        note = r["note"]
        if "scaling_1_to_2_cpu" in r:
            note = (f"1 → 2 workers: ×{r['scaling_1_to_2_cpu']:.2f} by CPU time (×{r['scaling_1_to_2']:.2f} wall, "
                    f"{note})")
        size = r.get("bytes_per_image")
        lines.append(f"| {r['name']} | {_n(r['marginal_img_s'])} | {_n(r['marginal_img_cpu_s'])} | "
                     f"{_n(r.get('ours_over_this_cpu'), '.2f')} | {_n(None if size is None else size / 1000)} | {note} |")
    return lines


def markdown(result: dict) -> str:
    m, d = result["machine"], result["data"]
    cmd = "python bench/benchmarks.py " + " ".join(result["argv"])
    head = [f"Measured {result['date']} with `{cmd}`; machine: {m['cpu']}, {m['cpu_count']} vCPUs, {m['pil']}, "
            f"torch {m['torch']}, torchvision {m['torchvision']}, Python {m['python']}; load average "
            f"{result['load'][0]} at the start, {result['load'][1]} at the end{result['shared_note']}.",
            f"Data: {d['images']} train images, {d['mean_bytes_per_pixel']:.2f} bytes/pixel, {d['mean_kb']:.0f} KB mean "
            f"as generated, {100 * d['over_500_px']:.0f} % over 500 px; stored by prepare-shards at "
            f"{result['stored_kb']:.0f} KB per sample (JPEG and tar overhead).", ""]
    out = head + ["#### Loader per core: RandomResizedCrop + flip, uint8 out (DALI: float), one pinned core", ""]
    out += _loader_md(result["loader"])
    out += ["", "#### Where our loader's time goes, 224 px", ""] + _profile_md(result["profile"])
    out += ["", f"#### prepare-shards vs FFCV's writer (marginal rates, N = {result['prepare']['images'][0]}, "
                f"3N = {result['prepare']['images'][1]})", ""] + _prepare_md(result["prepare"])
    out += ["", "#### The whole job: CPU per image, the offline stages once + the epochs", ""]
    out += W.whole_md(result["whole_job"], result["schedules"])
    out += ["", "#### What the restart-marker grid costs and buys", ""] + _grid_md(result["loader"], result["prepare"]["rows"])
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("work", metavar="WORK", help="folder for the data and the benchmarks' files (kept, reused)")
    p.add_argument("--peers", default=None, help="the peers folder (default $IMAGENET_SHARDS_PEERS)")
    p.add_argument("--seed", type=int, default=1, help="data seed (default 1)")
    p.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    p.add_argument("--train-per-class", type=int, default=300, help="train images per class (default 300)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every table (default 3)")
    p.add_argument("--batches", type=int, default=30, help="timed batches per loader round (default 30)")
    p.add_argument("--batch-size", type=int, default=64, help="loader batch size (default 64)")
    p.add_argument("--n", type=int, default=300, help="N of prepare's marginal rates (default 300)")
    p.add_argument("--profile-images", type=int, default=1000, help="images profiled (default 1000)")
    p.add_argument("--json", action="store_true", help="print the raw results as JSON instead of markdown")
    args = p.parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    say = (lambda msg: print(f"[benchmarks] {msg}", file=sys.stderr, flush=True))
    load0 = os.getloadavg()
    shards = make_data(work, classes=args.classes, per_class=args.train_per_class, seed=args.seed, say=say)
    say(f"the pixel form (yuv420, max side {W.PIXEL_SIDE}) under {pixel_dir(work)}")
    pixels = pixel_form(shards, pixel_dir(work))
    say(f"the pixel form straight from the archives under {direct_dir(work)}")
    direct = direct_form(work)
    loader = loader_tables(shards, pixels, direct, work, peers=args.peers, rounds=args.rounds, batches=args.batches,
                           batch_size=args.batch_size, say=say)
    say("profiling our loader at 224 px")
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[0]})
    try:
        prof = profile_loader.profile(str(shards), images=args.profile_images, res=224)
    finally:
        os.sched_setaffinity(0, set(allowed))
    prep = prepare_tables(work, n=args.n, rounds=args.rounds, peers=args.peers, say=say)
    columns = W.schedules()
    manifest = json.loads((shards / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    result = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "argv": argv,
              "machine": {**machine_info(), "platform": platform.platform()},
              "load": [" / ".join(f"{x:.1f}" for x in load0), " / ".join(f"{x:.1f}" for x in os.getloadavg())],
              "data": bench_prepare.data_description(work / "src"),
              "stored_kb": sum(s["bytes"] for s in train["shards"]) / train["num_samples"] / 1000,
              "loader": loader, "profile": prof, "prepare": prep, "schedules": columns,
              "whole_job": W.whole_job(loader, prep["rows"], columns)}
    result["shared_note"] = "; the box was shared with other jobs" if max(load0[0], os.getloadavg()[0]) > 1.5 else ""
    print(json.dumps(result, indent=1, default=str) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
