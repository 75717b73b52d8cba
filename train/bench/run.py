"""bench-loader: images/s of the shard loader, and (--compare) of the loaders a user would otherwise pick.

Every contender decodes the same JPEG bytes into uint8 [B,3,res,res] batches with the same
RandomResizedCrop + horizontal flip, the same number of DataLoader worker processes and the same
batch size; the first ``--warmup`` batches (worker start-up, buffer fill) are not timed. Pin the
whole run to N cores with ``taskset -c ...`` to get per-core numbers.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable

import torch

from imagenet_shards.train import loader as D
from imagenet_shards.train.loader import decode as dec


# ----------------------------------------------------------------------------- timing

def process_tree_cpu_seconds() -> float | None:
    """CPU seconds (user + system) used so far by this process, its reaped children and its live
    descendants (DataLoader workers), from /proc; None where /proc is not available.

    On a shared or throttled machine wall-clock images/s depends on the neighbours; images per
    CPU-second does not (much), and equals images/s per fully used core."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        procs = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue  # exited meanwhile
            fields = stat[stat.rindex(")") + 2:].split()
            procs[int(entry)] = (int(fields[1]), [int(x) for x in fields[11:15]])
    except (OSError, ValueError, AttributeError):
        return None
    me = os.getpid()
    if me not in procs:
        return None
    utime, stime, cutime, cstime = procs[me][1]
    total, tree, frontier = utime + stime + cutime + cstime, {me}, [me]
    while frontier:
        kids = [pid for pid, (ppid, _) in procs.items() if ppid in frontier and pid not in tree]
        tree.update(kids)
        frontier = kids
        total += sum(procs[k][1][0] + procs[k][1][1] for k in kids)
    return total / tick


class BatchStream:
    """Endless batches from ``epochs(e)`` for e = 0, 1, ...; lets several loaders take turns."""

    def __init__(self, epochs: Callable[[int], Iterable]):
        self.epochs, self.epoch, self.it = epochs, 0, None

    def next(self):
        for _ in range(2):
            if self.it is None:
                self.it = iter(self.epochs(self.epoch))
                self.epoch += 1
            batch = next(self.it, None)
            if batch is not None:
                return batch
            self.it = None
        raise ValueError("the loader yields no batches: use a smaller --batch-size or more data")


def time_stream(stream: BatchStream, *, batches: int, warmup: int) -> dict:
    """Skip ``warmup`` batches (start-up, and whatever was prefetched while idle), then time
    ``batches``: wall clock, and CPU time of the whole process tree (``images_per_cpu_s``)."""
    if warmup < 1:
        raise ValueError("--warmup must be at least 1 (the first batch includes worker start-up)")
    for _ in range(warmup):
        stream.next()
    t0, c0 = time.perf_counter(), process_tree_cpu_seconds()
    images = sum(len(stream.next()[1]) for _ in range(batches))
    seconds = time.perf_counter() - t0
    c1 = process_tree_cpu_seconds()
    cpu = None if c0 is None or c1 is None else c1 - c0
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds, "cpu_seconds": cpu,
            "images_per_cpu_s": images / cpu if cpu else None}


def wait_until_idle(*, window: float = 0.25, busy: float = 0.1, timeout: float = 30.0) -> bool:
    """Block until the process tree uses less than ``busy`` of a core over ``window`` seconds; False
    on timeout or without /proc (then it just sleeps ``window``).

    A DataLoader keeps working after its reader stops: the worker finishes the batches it was
    asked to prefetch. When loaders take turns on the same cores, that work would land in the
    next loader's timing (both its wall clock and the tree's CPU time)."""
    c0 = process_tree_cpu_seconds()
    if c0 is None:
        time.sleep(window)
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(window)
        c1 = process_tree_cpu_seconds()
        if c1 is None:
            return False
        if c1 - c0 < busy * window:
            return True
        c0 = c1
    return False


def _median(values: list[float]) -> float:
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


def summarize(runs: list[dict]) -> dict:
    """Rounds -> ``images_per_s`` (median), ``images_per_s_best`` (the least disturbed round) and
    ``images_per_cpu_s`` (median; None without /proc). Medians are what the ratios use."""
    cpu = [r["images_per_cpu_s"] for r in runs if r.get("images_per_cpu_s")]
    return {"rounds": len(runs), "images": sum(r["images"] for r in runs),
            "images_per_s": _median([r["images_per_s"] for r in runs]),
            "images_per_s_best": max(r["images_per_s"] for r in runs),
            "images_per_cpu_s": _median(cpu) if len(cpu) == len(runs) else None}


def our_stream(data: str, *, split: str = "train", workers: int = 1, batch_size: int = 64, decoder: str = "auto",
               res: int = 224) -> tuple[BatchStream, D.ShardLoader]:
    loader = D.make_loader(data, split, batch_size, workers=workers, res=res, decoder=decoder, val_crop=res,
                           val_resize=max(res, round(res * 256 / 224)), persistent_workers=workers > 0)

    def epochs(e):
        loader.set_epoch(e)
        return loader
    return BatchStream(epochs), loader


def measure_loader(data: str, *, split: str = "train", workers: int = 1, batches: int = 50, batch_size: int = 64,
                   decoder: str = "auto", res: int = 224, warmup: int = 5, rounds: int = 1) -> dict:
    """images/s of ``make_loader`` (train crops unless ``split`` is not train), best of ``rounds``."""
    stream, loader = our_stream(data, split=split, workers=workers, batch_size=batch_size, decoder=decoder, res=res)
    out = summarize([time_stream(stream, batches=batches, warmup=warmup) for _ in range(rounds)])
    out.update(workers=workers, batch_size=batch_size, decoder=dec.resolve_decoder(decoder), res=res, split=split,
               images_per_s_per_worker=out["images_per_s"] / max(1, workers))
    return out


# ----------------------------------------------------------------------------- baselines for --compare

def _pil_transform(res: int):
    import torchvision.transforms as T
    return T.Compose([T.RandomResizedCrop(res), T.RandomHorizontalFlip(), T.PILToTensor()])


def _dataloader(dataset, *, batch_size: int, workers: int, shuffle: bool = False):
    from torch.utils.data import DataLoader
    kw = dict(persistent_workers=True, prefetch_factor=4) if workers > 0 else {}
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=workers, drop_last=True, **kw)


class TarfileDataset(torch.utils.data.IterableDataset):
    """The seed's approach: shards split over workers, ``tarfile`` random access, PIL open + transforms."""

    def __init__(self, urls: list[str], transform):
        self.urls, self.transform = urls, transform

    def __iter__(self):
        from PIL import Image
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        for url in self.urls[wid::nw]:
            with tarfile.open(url) as tar:
                members = {m.name: m for m in tar.getmembers()}
                for name, m in members.items():
                    if not name.endswith(".jpg"):
                        continue
                    key = name[:-4]
                    img = Image.open(io.BytesIO(tar.extractfile(m).read())).convert("RGB")
                    label = int(tar.extractfile(members[key + ".cls"]).read())
                    yield self.transform(img), label


def export_image_folder(shards: list[D.Shard], root: Path) -> int:
    """Write every sample of ``shards`` as ROOT/<label>/<key>.JPEG (the same bytes); returns the count."""
    n = 0
    for shard in shards:
        for rec in D.read_shard(shard.url):
            if rec.jpg is None or rec.cls is None:
                continue
            d = root / f"{int(rec.cls):04d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{rec.key}.JPEG").write_bytes(rec.jpg)
            n += 1
    return n


def _baselines(urls: list[str], folder: Path, *, res: int, batch_size: int, workers: int, seed: int = 0):
    """(name, epochs-callable or None, note) for each baseline."""
    out = []
    tf = _pil_transform(res)

    def image_folder():
        from torchvision.datasets import ImageFolder
        loader = _dataloader(ImageFolder(str(folder), transform=tf), batch_size=batch_size, workers=workers,
                             shuffle=True)
        return lambda e: loader
    out.append(("torchvision ImageFolder + PIL", image_folder, ""))

    def tarfile_ds():
        loader = _dataloader(TarfileDataset(urls, tf), batch_size=batch_size, workers=workers)
        return lambda e: loader
    out.append(("seed tarfile dataset + PIL", tarfile_ds, ""))

    def webdataset():
        import webdataset as wds
        ds = (wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("pil")
              .to_tuple("jpg", "cls").map_tuple(tf, lambda c: int(c)))
        loader = _dataloader(ds, batch_size=batch_size, workers=workers)
        return lambda e: loader
    out.append(("webdataset .decode('pil') + PIL", webdataset, ""))

    try:
        import nvidia.dali  # noqa: F401
        have_dali = True
    except ImportError:
        have_dali = False

    def dali():
        from nvidia.dali import fn, pipeline_def, types

        @pipeline_def(batch_size=batch_size, num_threads=max(1, workers), device_id=None, seed=seed)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=str(folder), random_shuffle=True, name="reader")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
            images = fn.resize(images, resize_x=res, resize_y=res)
            images = fn.flip(images, horizontal=fn.random.coin_flip())
            return fn.transpose(images, perm=[2, 0, 1]), labels
        p = pipe()
        p.build()
        per_epoch = max(1, len(list(folder.rglob("*.JPEG"))) // batch_size)

        def epochs(e):
            for _ in range(per_epoch):
                images, labels = p.run()
                yield torch.from_numpy(images.as_array()), torch.from_numpy(labels.as_array())
        return epochs
    out.append(("DALI CPU pipeline", dali if have_dali else None,
                "" if have_dali else "skipped: nvidia.dali not installed"))

    try:
        import ffcv  # noqa: F401
        have_ffcv = True
    except ImportError:
        have_ffcv = False

    def ffcv_loader():
        from ffcv.fields import IntField, RGBImageField
        from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
        from ffcv.loader import Loader, OrderOption
        from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage
        from ffcv.writer import DatasetWriter
        from torchvision.datasets import ImageFolder
        beton = folder.parent / "ffcv.beton"
        DatasetWriter(str(beton), {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()},
                      num_workers=max(1, workers)).from_indexed_dataset(ImageFolder(str(folder)))
        loader = Loader(str(beton), batch_size=batch_size, num_workers=max(1, workers), order=OrderOption.RANDOM,
                        drop_last=True, pipelines={
                            "image": [RandomResizedCropRGBImageDecoder((res, res)), RandomHorizontalFlip(),
                                      ToTensor(), ToTorchImage()],
                            "label": [IntDecoder(), ToTensor()]})
        return lambda e: ((x, y.view(-1)) for x, y in loader)
    out.append(("FFCV", ffcv_loader if have_ffcv else None, "" if have_ffcv else "skipped: ffcv not installed"))
    return out


def compare(data: str, *, workers: int = 1, batches: int = 50, batch_size: int = 64, decoder: str = "auto",
            res: int = 224, warmup: int = 5, rounds: int = 3, also_decoders: Iterable[str] | None = None,
            progress: Callable[[str], None] | None = None) -> list[dict]:
    """Rows {name, images_per_s (median of rounds), images_per_s_best, images_per_s_per_worker, images_per_cpu_s,
    speedup (ours / theirs, median wall clock), speedup_cpu (by images per CPU-second), note} on the same
    images (train split).

    The first row is our loader with ``decoder``; ``also_decoders`` (default: ``pil`` when that is
    not the decoder already) adds our loader with those decoders as rows of their own, so the table
    shows what the decoder alone buys.

    The loaders take turns: each round times ``batches`` batches of every loader after skipping
    ``warmup`` (covering what its workers prefetched while idle), so slow drifts in machine load
    hit all of them alike. Before each turn the process tree must be idle (``wait_until_idle``):
    the previous loader's workers finish their prefetching on their own time, not the next one's."""
    shards = D.split_shards(D.read_manifest(data), data, "train")
    local = all("://" not in s.url for s in shards)
    tmp = Path(tempfile.mkdtemp(prefix="bench-loader-"))
    try:
        folder = tmp / "images"
        if progress:
            progress(f"writing the images as files under {folder} for the file-based baselines")
        export_image_folder(shards, folder)
        urls = [s.url for s in shards]
        main = dec.resolve_decoder(decoder)
        ours_name = f"imagenet-shards ({main})"
        contenders, notes, order = [], {}, [ours_name]
        stream, _ = our_stream(data, workers=workers, batch_size=batch_size, decoder=decoder, res=res)
        contenders.append((ours_name, stream))
        also = [d for d in (["pil"] if also_decoders is None else also_decoders) if dec.resolve_decoder(d) != main]
        for d in dict.fromkeys(dec.resolve_decoder(d) for d in also):
            order.append(f"imagenet-shards ({d})")
            stream, _ = our_stream(data, workers=workers, batch_size=batch_size, decoder=d, res=res)
            contenders.append((order[-1], stream))
        for name, build, note in _baselines(urls, folder, res=res, batch_size=batch_size, workers=workers):
            order.append(name)
            if build is None or (name.startswith("seed") and not local):
                notes[name] = note or "skipped: needs local shards"
                continue
            try:
                contenders.append((name, BatchStream(build())))
            except Exception as e:  # an optional extra that is installed but broken must not sink the table
                notes[name] = f"failed: {type(e).__name__}: {e}"[:200]
        # prefetch depth a loader builds up while another one runs: skip it every round
        per_round_warmup = max(warmup, 4 * max(1, workers) + 2)
        runs: dict[str, list] = {name: [] for name, _ in contenders}
        for r in range(rounds):
            for name, stream in contenders:
                if name in notes:
                    continue
                if progress:
                    progress(f"round {r + 1}/{rounds}: {name}")
                wait_until_idle()
                try:
                    runs[name].append(time_stream(stream, batches=batches,
                                                  warmup=warmup if r == 0 else per_round_warmup))
                except Exception as e:
                    notes[name] = f"failed: {type(e).__name__}: {e}"[:200]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    ours = summarize(runs[ours_name])
    rows = []
    for name in order:
        r = summarize(runs[name]) if runs.get(name) and name not in notes else None
        if r is None:
            rows.append({"name": name, "images_per_s": None, "images_per_s_best": None,
                         "images_per_s_per_worker": None, "images_per_cpu_s": None, "speedup": None,
                         "speedup_cpu": None, "note": notes.get(name, "")})
            continue
        cpu_ratio = (ours["images_per_cpu_s"] / r["images_per_cpu_s"]
                     if r.get("images_per_cpu_s") and ours.get("images_per_cpu_s") else None)
        rows.append({"name": name, "images_per_s": r["images_per_s"], "images_per_s_best": r["images_per_s_best"],
                     "images_per_s_per_worker": r["images_per_s"] / max(1, workers),
                     "images_per_cpu_s": r.get("images_per_cpu_s"), "speedup": ours["images_per_s"] / r["images_per_s"],
                     "speedup_cpu": cpu_ratio, "note": ""})
    return rows


# ----------------------------------------------------------------------------- CLI

def machine_info() -> dict:
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
    from importlib import metadata
    try:
        pil = "pillow-simd " + metadata.version("pillow-simd")
    except metadata.PackageNotFoundError:
        import PIL
        pil = "Pillow " + PIL.__version__
    import torchvision
    turbo = dec._jpegcrop.LIBJPEG_TURBO_VERSION if dec._jpegcrop is not None else None
    return {"cpu": cpu, "cores_usable": cores, "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "torchvision": torchvision.__version__, "pil": pil,
            "jpegcrop_libjpeg_turbo": turbo}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench-loader", description=__doc__.split("\n\n")[0])
    p.add_argument("data", metavar="DATA", help="shard set directory or URL (holds manifest.json)")
    p.add_argument("--split", default="train")
    p.add_argument("--workers", type=int, default=1, help="DataLoader worker processes (default 1)")
    p.add_argument("--batches", type=int, default=50, help="timed batches (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed batches first (default 5)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--decoder", default="auto", choices=dec.DECODERS)
    p.add_argument("--res", type=int, default=224, help="output crop size")
    p.add_argument("--rounds", type=int, default=None,
                   help="timed rounds, best one reported (default 1, or 3 with --compare: loaders take turns)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--compare", action="store_true",
                   help="also run ImageFolder, the seed's tarfile dataset, webdataset, DALI and FFCV (train split), "
                        "and our loader with the pil decoder when --decoder is another one")
    return p


def _fmt(v, spec):
    return format("-", ">" + spec.split(".")[0]) if v is None else format(v, spec)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.rounds is None:
        args.rounds = 3 if args.compare else 1
    if args.workers < 0 or args.batches < 1 or args.warmup < 1 or args.batch_size < 1 or args.rounds < 1:
        print("error: --workers must be >= 0, and --batches, --warmup, --batch-size, --rounds >= 1", file=sys.stderr)
        return 2
    if args.compare and args.split != "train":
        print("error: --compare measures train crops; leave out --split", file=sys.stderr)
        return 2
    if args.workers == 0:
        torch.set_num_threads(1)  # per-core numbers: no intra-op threads in the main process either
    say = (lambda m: None) if args.json else (lambda m: print(f"[bench-loader] {m}", file=sys.stderr, flush=True))
    common = dict(workers=args.workers, batches=args.batches, batch_size=args.batch_size, decoder=args.decoder,
                  res=args.res, warmup=args.warmup)
    rows = None
    try:
        if args.compare:
            rows = compare(args.data, rounds=args.rounds, progress=say, **common)
            ours = rows[0]
            result = {k: ours[k] for k in ("images_per_s", "images_per_s_best", "images_per_s_per_worker",
                                           "images_per_cpu_s")}
            result.update(workers=args.workers, batch_size=args.batch_size, res=args.res, split="train",
                          decoder=dec.resolve_decoder(args.decoder), rounds=args.rounds,
                          images=args.rounds * args.batches * args.batch_size)
        else:
            result = measure_loader(args.data, split=args.split, rounds=args.rounds, **common)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result["machine"] = machine_info()
    if rows is not None:
        result["compare"] = rows
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    print(f"{result['images_per_s']:.1f} images/s overall, {result['images_per_s_per_worker']:.1f} images/s per worker "
          f"({args.workers} workers, batch {args.batch_size}, {result['res']}px, decoder {result['decoder']}, "
          f"split {result['split']}; median of {args.rounds} rounds of {args.batches} batches, "
          f"best {result['images_per_s_best']:.1f})")
    if result.get("images_per_cpu_s"):
        print(f"{result['images_per_cpu_s']:.1f} images per CPU-second (whole process tree: the per-core speed, "
              f"less sensitive to other load on the machine)")
    m = result["machine"]
    turbo = (f"turbo decoder on libjpeg-turbo {m['jpegcrop_libjpeg_turbo']}" if m["jpegcrop_libjpeg_turbo"]
             else "turbo decoder not built")
    print(f"machine: {m['cpu']}, {m['cores_usable']} usable of {m['cpu_count']} cores, {m['pil']}, "
          f"torch {m['torch']}, torchvision {m['torchvision']}, {turbo}")
    if rows is not None:
        width = max(len(r["name"]) for r in rows)
        print(f"\n{'loader':<{width}}  {'img/s':>8}  {'best':>8}  {'img/s/worker':>12}  {'img/cpu-s':>9}  "
              f"{'ours is':>8}  {'(by cpu)':>8}  note")
        for r in rows:
            speed = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
            speed_cpu = "-" if r["speedup_cpu"] is None else f"{r['speedup_cpu']:.2f}x"
            print(f"{r['name']:<{width}}  {_fmt(r['images_per_s'], '8.1f')}  {_fmt(r['images_per_s_best'], '8.1f')}  "
                  f"{_fmt(r['images_per_s_per_worker'], '12.1f')}  {_fmt(r['images_per_cpu_s'], '9.1f')}  "
                  f"{speed:>8}  {speed_cpu:>8}  {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
