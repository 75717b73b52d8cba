"""Benchmark prepare-shards against FFCV's writer and a naive script, on the same ImageNet-like images.

    python bench/bench_prepare.py [--classes 10 --train-per-class 300] [--n 300] [--rounds 3]
                                  [--peers DIR] [--archives DIR] [--json]

Contenders, one output policy (longer side at most 500 px, JPEG q90) on the same images:
- ours: ``prepare()`` on a train archive (tar of class tars), 1 worker, then 2 workers; and 1 worker
  with ``restart_markers=False`` (pass-through JPEGs stored byte for byte instead of rewritten with
  restart markers: what the rewrite costs); shards of 50 samples, so two workers share the work evenly;
- FFCV: ``DatasetWriter`` + ``RGBImageField`` over the same images as files, as each of
  train/bench/peers.py's FFCV_WRITES says (all JPEG q90 at max side 500, and ffcv-imagenet's own
  ``write_mode="proportion"`` settings for rn50 and rn18), run as a subprocess in the FFCV
  environment (``bench/peer_ffcv_writer.py``; ``--peers DIR`` or ``$IMAGENET_SHARDS_PEERS``), one
  worker; without it the rows say "not run: <reason>", never a figure measured elsewhere;
- naive: tarfile + Pillow full decode + LANCZOS + save q90, one process.

Rates are marginal (time N and 3N images, divide the difference of images by the difference of
seconds), so start-up (imports, FFCV's JIT, pool start) is not counted; medians of ``--rounds``
rounds, contenders interleaved. The one-worker rows are pinned to one core (the first this process
may use); the two-worker row gets two. CPU seconds (the process tree's) are reported beside wall
clock: on a shared machine wall figures are noisy, images per CPU-second less so. The 1 -> 2 workers
scaling is CPU-time based for the same reason: the 2-worker run's critical path is estimated as the
larger of half its CPU seconds and its busiest process's (what two free cores would take), and the
scaling is the 1-worker run's CPU seconds over that (marginal: 3N run minus N run). The images are
``make-synthetic-imagenet --imagenet-like`` (ImageNet's bytes per pixel and size spread) unless
``--archives`` names another set. Numbers are measured, never asserted; docs/benchmarks.md keeps them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from PIL import Image

from imagenet_shards.pipeline.prepare.config import Config
from imagenet_shards.pipeline.prepare.run import prepare
from imagenet_shards.pipeline.tools.synthetic.generate import generate
from imagenet_shards.train.bench.peers import FFCV_WRITES, PEERS_ENV, describe_write, peers_dir
from imagenet_shards.train.bench.timing import median, process_tree_cpu_seconds, wait_until_idle

HERE = Path(__file__).resolve().parent
RESIZE, QUALITY = "longer:500", 90
SHARD_SAMPLES = 50  # small shards: the 2-worker runs split the work evenly


def subset(train_tar: Path, n: int, work: Path) -> tuple[Path, Path, int]:
    """The first images of each class (in archive order, round-robin over classes) up to ``n``: as a
    train archive and as an ImageFolder (the same bytes). Returns (tar, folder, count)."""
    per_class: dict[str, list[tuple[str, bytes]]] = {}
    with tarfile.open(train_tar) as outer:
        class_tars = outer.getmembers()
        k = -(-n // max(1, len(class_tars)))  # read no more of each class than the subset can use
        for member in class_tars:
            with tarfile.open(fileobj=outer.extractfile(member)) as inner:
                files = [m for m in inner.getmembers() if m.isfile()][:k]
                per_class[member.name[:-4]] = [(m.name, inner.extractfile(m).read()) for m in files]
    picked: dict[str, list[tuple[str, bytes]]] = {w: [] for w in per_class}
    count, i = 0, 0
    while count < n and any(i < len(v) for v in per_class.values()):
        for wnid, members in per_class.items():
            if i < len(members) and count < n:
                picked[wnid].append(members[i])
                count += 1
        i += 1
    work.mkdir(parents=True, exist_ok=True)
    tar_path, folder = work / f"train_{n}.tar", work / f"folder_{n}"
    shutil.rmtree(folder, ignore_errors=True)
    with tarfile.open(tar_path, "w") as outer:
        for wnid, members in picked.items():
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as inner:
                for name, data in members:
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    inner.addfile(info, io.BytesIO(data))
                    (folder / wnid).mkdir(parents=True, exist_ok=True)
                    (folder / wnid / name).write_bytes(data)
            info = tarfile.TarInfo(f"{wnid}.tar")
            info.size = buf.tell()
            buf.seek(0)
            outer.addfile(info, buf)
    return tar_path, folder, count


def _own_cpu(pid: int | str = "self") -> float | None:
    """CPU seconds of one process (not its children), from /proc; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BusiestProcess:
    """Samples the CPU seconds of this process's children every 20 ms while a run goes on, so the
    busiest process of the run is known after its workers have exited (within one sample)."""

    def __init__(self):
        import threading
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.02):
            for entry in os.listdir("/proc"):
                if entry.isdigit() and int(entry) != me:
                    try:
                        with open(f"/proc/{entry}/stat") as f:
                            fields = f.read().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    if int(fields[1]) == me:
                        self.seen[int(entry)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def timed(fn) -> dict:
    """Images, wall and CPU seconds of ``fn()`` (the process tree's), and the CPU seconds of its busiest
    process (this one or a worker)."""
    wait_until_idle()
    c0, t0, own0 = process_tree_cpu_seconds(), time.perf_counter(), _own_cpu()
    with BusiestProcess() as busiest:
        images = fn()
    wall, cpu, own = time.perf_counter() - t0, process_tree_cpu_seconds() - c0, _own_cpu() - own0
    return {"images": images, "wall_s": wall, "cpu_s": cpu, "busiest_cpu_s": max([own, *busiest.seen.values()])}


def ours(train_tar: Path, out: Path, workers: int, restart_markers: bool = True,
         pixels_side: int | None = None) -> dict:
    """prepare() on ``train_tar`` with ``workers`` worker processes: images, wall and CPU seconds; with
    ``pixels_side``, prepare --pixels yuv420 --max-side PIXELS_SIDE (the pixel form from the archives)."""
    if pixels_side is None:
        config = Config(resize=RESIZE, quality=QUALITY, shard_samples=SHARD_SAMPLES, splits=("train",),
                        restart_markers=restart_markers)
    else:
        config = Config(resize=f"longer:{pixels_side}", pixels="yuv420", shard_samples=SHARD_SAMPLES, splits=("train",))

    def run():
        shutil.rmtree(out, ignore_errors=True)
        s = prepare(out=str(out), train=train_tar, config=config, workers=workers, progress=False)
        return s["images_processed"]
    return {**timed(run), "bytes": shard_bytes(out)}


def naive(train_tar: Path) -> dict:
    """tarfile + Pillow full decode + convert("RGB") + LANCZOS to longer side 500 + save q90, one process."""
    def run():
        count = 0
        with tarfile.open(train_tar) as outer:
            for member in outer:
                with tarfile.open(fileobj=outer.extractfile(member)) as inner:
                    for m in inner:
                        try:
                            img = Image.open(io.BytesIO(inner.extractfile(m).read())).convert("RGB")
                        except Exception:
                            continue
                        w, h = img.size
                        if max(w, h) > 500:
                            s = 500 / max(w, h)
                            img = img.resize((max(1, round(w * s)), max(1, round(h * s))), Image.LANCZOS)
                        img.save(io.BytesIO(), "JPEG", quality=QUALITY)
                        count += 1
        return count
    return timed(run)


def ffcv_round(python: Path, folders: list[Path], work: Path, write: str = "jpg") -> list[dict]:
    """One round of FFCV's writer (1 worker, FFCV_WRITES[write]) over ``folders`` in a fresh process,
    after one untimed write of the first (numba JIT). Raises RuntimeError with the reason when it fails."""
    setup = {"folders": [str(folders[0])] + [str(f) for f in folders], "out": str(work), "workers": 1, "rounds": 1,
             "write": FFCV_WRITES[write]}
    wait_until_idle()
    proc = subprocess.run([str(python), str(HERE / "peer_ffcv_writer.py"), json.dumps(setup)], capture_output=True,
                          text=True, timeout=1800)
    lines = [s for s in proc.stdout.splitlines() if s.startswith("{")]
    msg = json.loads(lines[-1]) if lines else {"error": f"exited with status {proc.returncode}: "
                                                        f"{(proc.stderr.strip().splitlines() or [''])[-1][:200]}"}
    if "error" in msg:
        raise RuntimeError(msg["error"])
    return msg["runs"][0][1:]


def marginal(small: dict, large: dict) -> dict:
    """Images per second and per CPU-second over the difference between two runs."""
    d = large["images"] - small["images"]
    return {"img_s": d / max(1e-9, large["wall_s"] - small["wall_s"]),
            "img_cpu_s": d / max(1e-9, large["cpu_s"] - small["cpu_s"])}


def summary(name: str, pairs: list[tuple[dict, dict]], note: str = "") -> dict:
    """A row: medians over rounds of the marginal rates, and of the whole 3N run's rate (and, for a
    writer that reports its file, bytes per image)."""
    m = [marginal(a, b) for a, b in pairs]
    row = {"name": name, "marginal_img_s": median([x["img_s"] for x in m]),
           "marginal_img_cpu_s": median([x["img_cpu_s"] for x in m]),
           "whole_run_img_s": median([b["images"] / b["wall_s"] for _, b in pairs]),
           "rounds": [[a, b] for a, b in pairs], "note": note}
    if all("bytes" in b for _, b in pairs):
        row["bytes_per_image"] = median([b["bytes"] / b["images"] for _, b in pairs])
    return row


def cpu_scaling(one: list[tuple[dict, dict]], two: list[tuple[dict, dict]]) -> float:
    """1 -> 2 workers, CPU-time based (module docstring): the 1-worker runs' marginal CPU seconds over
    the 2-worker runs' marginal critical path, max(CPU / 2, busiest process); median over rounds."""
    def path(r):
        return max(r["cpu_s"] / 2, r["busiest_cpu_s"])
    return median([(b1["cpu_s"] - a1["cpu_s"]) / max(1e-9, path(b2) - path(a2)) for (a1, b1), (a2, b2) in zip(one, two)])


def shard_bytes(out: Path) -> int:
    """Bytes of the shard files under ``out``."""
    return sum(p.stat().st_size for p in out.rglob("*.tar"))


def run_bench(archives: Path, work: Path, *, n: int, rounds: int, peers: str | None, progress=print) -> dict:
    """Every row, interleaved round by round; see the module docstring."""
    allowed = sorted(os.sched_getaffinity(0))
    one, two = {allowed[0]}, set(allowed[:2])
    tar_n, folder_n, count_n = subset(archives / "ILSVRC2012_img_train.tar", n, work)
    tar_3n, folder_3n, count_3n = subset(archives / "ILSVRC2012_img_train.tar", 3 * n, work)
    root = peers_dir(peers)
    ffcv_python = root / "ffcv" / "bin" / "python" if root else None
    ffcv_note = ("" if ffcv_python and os.access(ffcv_python, os.X_OK) else
                 f"not run: no FFCV environment ({'at ' + str(ffcv_python) if ffcv_python else 'peers not found'}; "
                 f"pass --peers DIR or set {PEERS_ENV} to the folder shared/peers/setup.sh prints)")
    runs: dict[str, list] = {"ours_1w": [], "ours_2w": [], "naive": [], "ours_1w_keep": []}
    runs.update({f"ffcv_{w}": [] for w in FFCV_WRITES})
    ffcv_notes = dict.fromkeys(FFCV_WRITES, ffcv_note)
    for r in range(rounds):
        os.sched_setaffinity(0, one)
        try:
            progress(f"round {r + 1}/{rounds}: ours, 1 worker")
            runs["ours_1w"].append((ours(tar_n, work / "out", 1), ours(tar_3n, work / "out", 1)))
            for w in FFCV_WRITES:
                if ffcv_notes[w]:
                    continue
                progress(f"round {r + 1}/{rounds}: FFCV writer ({describe_write(w)}), 1 worker")
                try:
                    runs[f"ffcv_{w}"].append(tuple(ffcv_round(ffcv_python, [folder_n, folder_3n], work, w)))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    ffcv_notes[w] = f"not run: FFCV failed in round {r + 1}: {e}"[:300]
            progress(f"round {r + 1}/{rounds}: naive script")
            runs["naive"].append((naive(tar_n), naive(tar_3n)))
            progress(f"round {r + 1}/{rounds}: ours, 1 worker, no restart markers")
            runs["ours_1w_keep"].append((ours(tar_n, work / "out", 1, False), ours(tar_3n, work / "out", 1, False)))
        finally:
            os.sched_setaffinity(0, set(allowed))
        if len(two) == 2:
            os.sched_setaffinity(0, two)
            try:
                progress(f"round {r + 1}/{rounds}: ours, 2 workers")
                runs["ours_2w"].append((ours(tar_n, work / "out", 2), ours(tar_3n, work / "out", 2)))
            finally:
                os.sched_setaffinity(0, set(allowed))
    rows = [summary("imagenet-shards prepare, 1 worker", runs["ours_1w"])]
    for w in FFCV_WRITES:
        name = f"FFCV DatasetWriter, 1 worker ({describe_write(w)})"
        rows.append(summary(name, runs[f"ffcv_{w}"], w) if runs[f"ffcv_{w}"] and not ffcv_notes[w] else
                    {"name": name, "note": ffcv_notes[w] or "not run: no round finished"})
    rows.append(summary("tarfile + PIL script (naive)", runs["naive"]))
    base = rows[0]
    for row in rows:  # the one-worker rows
        if row.get("marginal_img_s"):
            row["ours_over_this"] = base["marginal_img_s"] / row["marginal_img_s"]
            row["ours_over_this_cpu"] = base["marginal_img_cpu_s"] / row["marginal_img_cpu_s"]
    if runs["ours_2w"]:
        rows.append(summary("imagenet-shards prepare, 2 workers", runs["ours_2w"], "two cores, shared with others"))
        rows[-1]["scaling_1_to_2"] = rows[-1]["marginal_img_s"] / base["marginal_img_s"]
        rows[-1]["scaling_1_to_2_cpu"] = cpu_scaling(runs["ours_1w"], runs["ours_2w"])
    else:
        rows.append({"name": "imagenet-shards prepare, 2 workers", "note": "not run: this process may use one core"})
    rows.append(summary("imagenet-shards prepare, 1 worker, --no-restart-markers", runs["ours_1w_keep"],
                        "pass-through JPEGs stored byte for byte (no lossless rewrite)"))
    return {"images": [count_n, count_3n], "rows": rows,
            "peak_rss_mb": round(max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                                     resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024, 1)}


def data_description(archives: Path) -> dict:
    """Bytes per pixel and size spread of the train images, from expected.json."""
    e = json.loads((archives / "expected.json").read_text())
    s = [x for x in e["samples"] if x["split"] == "train" and x["width"]]
    longer = sorted(max(x["width"], x["height"]) for x in s)
    sizes = {x["member"]: x["width"] * x["height"] for x in s}
    with tarfile.open(archives / "ILSVRC2012_img_train.tar") as outer:
        nbytes = {}
        for member in outer:
            with tarfile.open(fileobj=outer.extractfile(member)) as inner:
                nbytes.update({f"{member.name}/{m.name}": m.size for m in inner})
    bpp = [nbytes[k] / v for k, v in sizes.items() if k in nbytes]
    return {"images": len(s), "imagenet_like": bool(e["args"].get("imagenet_like")),
            "mean_bytes_per_pixel": sum(bpp) / len(bpp), "mean_kb": sum(nbytes[k] for k in sizes) / len(s) / 1000,
            "over_500_px": sum(1 for v in longer if v > 500) / len(s), "longest_side_max": longer[-1]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archives", type=Path, default=None, help="an existing make-synthetic-imagenet set "
                   "(default: write an --imagenet-like one under the work folder)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train-per-class", type=int, default=300)
    p.add_argument("--n", type=int, default=300, help="N of the marginal rate: runs of N and 3N images (default 300)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--peers", default=None, help=f"the peers folder (default ${PEERS_ENV})")
    p.add_argument("--work", default=None, help="working folder (default: a temp dir, removed)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-prepare-"))
    say = (lambda m: print(f"[bench-prepare] {m}", file=sys.stderr, flush=True))
    archives = args.archives or work / "archives"
    if not (archives / "expected.json").exists():
        say(f"writing an ImageNet-like set under {archives}")
        generate(archives, classes=args.classes, train_per_class=args.train_per_class, val_per_class=1, seed=0,
                 quirks=False, progress=False, imagenet_like=True)
    result = run_bench(archives, work, n=args.n, rounds=args.rounds, peers=args.peers, progress=say)
    result.update(machine=f"{platform.machine()}, {platform.processor() or 'cpu'}, cores allowed: "
                          f"{len(os.sched_getaffinity(0))}", python=platform.python_version(), pil=Image.__version__,
                  data=data_description(archives), policy=f"{RESIZE}, q{QUALITY}")
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        d = result["data"]
        print(f"data: {d['images']} train images, {d['mean_bytes_per_pixel']:.2f} bytes/pixel, {d['mean_kb']:.0f} KB "
              f"mean, {100 * d['over_500_px']:.0f}% over 500 px; N = {result['images'][0]}, 3N = {result['images'][1]}")
        print(f"{'row':72s} {'marginal img/s':>15s} {'img/CPU-s':>10s} {'whole 3N':>9s} {'ours/this':>10s} "
              f"{'KB/img':>7s}")
        for r in result["rows"]:
            if "marginal_img_s" not in r:
                print(f"{r['name']:72s} {r['note']}")
                continue
            size = r.get("bytes_per_image")
            print(f"{r['name']:72s} {r['marginal_img_s']:15.0f} {r['marginal_img_cpu_s']:10.0f} "
                  f"{r['whole_run_img_s']:9.0f} {r.get('ours_over_this_cpu', 0):10.2f} "
                  f"{'-' if size is None else format(size / 1000, '7.0f')}"
                  + (f"  scaling 1->2: {r['scaling_1_to_2']:.2f} wall, {r['scaling_1_to_2_cpu']:.2f} by CPU time"
                     if "scaling_1_to_2" in r else ""))
        print(f"peak RSS (the bench process, which holds the subsets, or any child): {result['peak_rss_mb']:.0f} MB; medians of {args.rounds} rounds; "
              f"wall figures are noisy on a shared machine")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
