"""``bench-loader --compare``: our loader, the baselines and the peers take turns on the same images.

A row either carries figures measured in this run or says ``not run: <reason>`` with no figures
at all: no estimate, no figure measured elsewhere.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from imagenet_shards.pipeline import storage
from imagenet_shards.train.bench import peers as P
from imagenet_shards.train.bench.baselines import baselines, export_image_folder, val_resize
from imagenet_shards.train.bench.measure import our_stream
from imagenet_shards.train.bench.timing import BatchStream, summarize, time_stream, wait_until_idle
from imagenet_shards.train import loader as D
from imagenet_shards.train.loader import decode as dec

FIGURES = ("images_per_s", "images_per_s_best", "images_per_s_per_worker", "images_per_cpu_s", "speedup",
           "speedup_cpu")
Timer = Callable[..., dict]  # timer(batches=, warmup=) -> time_stream's figures


def _failed(e: Exception, when: str) -> str:
    return f"not run: failed {when}: {type(e).__name__}: {e}".splitlines()[0][:200]


def _timer(stream: BatchStream) -> Timer:
    return lambda *, batches, warmup: time_stream(stream, batches=batches, warmup=warmup)


def _folder_export(shards, folder: Path, progress) -> None:
    """The images as files for the file-based rows, written once per folder (``work`` reuses it)."""
    stamp = folder.with_name(folder.name + ".json")
    what = [[s.url, s.num_samples, storage.size(s.url)] for s in shards]
    if folder.is_dir() and stamp.exists() and json.loads(stamp.read_text()) == what:
        return
    if progress:
        progress(f"writing the images as files under {folder} for the file-based baselines")
    shutil.rmtree(folder, ignore_errors=True)
    export_image_folder(shards, folder)
    stamp.write_text(json.dumps(what))


def _mean_bytes(shards, folder: Path) -> tuple[float, float]:
    """Bytes per image of the shards (tar headers and .cls/.json members included) and of the files."""
    files = [p.stat().st_size for p in folder.rglob("*.JPEG")]
    samples = sum(s.num_samples for s in shards)
    return sum(storage.size(s.url) for s in shards) / max(1, samples), sum(files) / max(1, len(files))


def compare(data: str, *, workers: int = 1, batches: int = 50, batch_size: int = 64, decoder: str = "auto",
            res: int = 224, warmup: int = 5, rounds: int = 3, also_decoders: Iterable[str] | None = None,
            peers: str | None = None, seed: int = 0, progress: Callable[[str], None] | None = None,
            split: str = "train", work: str | None = None, only: Iterable[str] | None = None) -> list[dict]:
    """Rows {name, images_per_s (median of rounds), images_per_s_best, images_per_s_per_worker, images_per_cpu_s,
    speedup (ours / theirs, median wall clock), speedup_cpu (by images per CPU-second), bytes_per_image
    (what the row reads per image: our shards, the image files, a peer's own dataset file), note} on
    the same images of ``split``: RandomResizedCrop + flip for train, else the centre crop (resize the
    shorter side to ``res * 256 / 224``, crop ``res``) for every row. A row that could not run has None
    figures and a ``not run: ...`` note. ``only``: the rows to run (names, or their beginnings; our
    first row always runs); ``work``: a folder kept for the next call (the image files and FFCV's
    dataset files are written once), default a temporary one.

    The first row is our loader with ``decoder``; ``also_decoders`` (default: ``pil`` when that is
    not the decoder already) adds our loader with those decoders as rows of their own, so the table
    shows what the decoder alone buys. If our own loader fails, that error propagates. Then the
    baselines (``baselines.py``), then DALI and FFCV, each a subprocess in its environment under
    ``peers`` (default ``$IMAGENET_SHARDS_PEERS``; ``peers.py``).

    The loaders take turns: each round times ``batches`` batches of every loader after skipping
    ``warmup`` (covering what its workers prefetched while idle), so slow drifts in machine load
    hit all of them alike. Before each turn the process tree must be idle (``wait_until_idle``;
    the peers are part of the tree): the previous loader's workers finish their prefetching on
    their own time, not the next one's."""
    shards = D.split_shards(D.read_manifest(data), data, split)
    train = split == "train"
    tmp = Path(work) if work else Path(tempfile.mkdtemp(prefix="bench-loader-"))
    tmp.mkdir(parents=True, exist_ok=True)
    wanted = None if only is None else tuple(only)

    def wants(name: str) -> bool:
        return wanted is None or any(name.startswith(w) for w in wanted)

    running: list[P.PeerProcess] = []
    try:
        folder = tmp / f"images-{split}"
        _folder_export(shards, folder, progress)
        shard_bytes, file_bytes = _mean_bytes(shards, folder)
        sizes: dict[str, float | None] = {}
        main = dec.resolve_decoder(decoder)
        ours_name = f"imagenet-shards ({main})"
        timers: dict[str, Timer] = {}
        notes: dict[str, str] = {}      # rows that did not run: why
        remarks: dict[str, str] = {}    # rows that ran: what to know when reading their figures
        timers[ours_name] = _timer(our_stream(data, split=split, workers=workers, batch_size=batch_size,
                                              decoder=decoder, res=res)[0])
        also = [d for d in (["pil"] if also_decoders is None else also_decoders) if dec.resolve_decoder(d) != main]
        for d in dict.fromkeys(dec.resolve_decoder(d) for d in also):
            if wants(f"imagenet-shards ({d})"):
                timers[f"imagenet-shards ({d})"] = _timer(our_stream(data, split=split, workers=workers,
                                                                     batch_size=batch_size, decoder=d, res=res)[0])
        order = list(timers)
        sizes.update(dict.fromkeys(order, shard_bytes))
        for b in baselines([s.url for s in shards], folder, res=res, batch_size=batch_size, workers=workers,
                           train=train):
            if not wants(b.name):
                continue
            order.append(b.name)
            sizes[b.name] = file_bytes if "ImageFolder" in b.name else shard_bytes
            if b.build is None:
                notes[b.name] = b.not_run
                continue
            try:
                timers[b.name] = _timer(BatchStream(b.build()))
            except Exception as e:  # an optional extra that is installed but broken must not sink the table
                notes[b.name] = _failed(e, "to start")
        root = P.peers_dir(peers)
        setup = dict(folder=str(folder), work=str(tmp), res=res, batch_size=batch_size, workers=workers, seed=seed,
                     train=train, val_resize=val_resize(res))
        for peer in P.PEERS:
            if not wants(peer.name):
                continue
            order.append(peer.name)
            try:
                if root is not None and progress:
                    progress(f"starting {peer.name} in its environment under {root}")
                running.append(P.start_peer(peer, root, setup))
                timers[peer.name], remarks[peer.name] = running[-1].time, running[-1].note
                sizes[peer.name] = running[-1].bytes_per_image
                if sizes[peer.name] is None and peer.env == "dali":
                    sizes[peer.name] = file_bytes  # it reads the image files
            except P.PeerNotRun as e:
                notes[peer.name] = str(e)
        # prefetch depth a loader builds up while another one runs: skip it every round
        per_round_warmup = max(warmup, 4 * max(1, workers) + 2)
        runs: dict[str, list[dict]] = {name: [] for name in timers}
        for r in range(rounds):
            for name, timer in timers.items():
                if name in notes:
                    continue
                if progress:
                    progress(f"round {r + 1}/{rounds}: {name}")
                wait_until_idle()
                try:
                    runs[name].append(timer(batches=batches, warmup=warmup if r == 0 else per_round_warmup))
                except P.PeerNotRun as e:
                    notes[name] = str(e)
                except Exception as e:
                    if name == ours_name:
                        raise
                    notes[name] = _failed(e, f"in round {r + 1}")
    finally:
        for proc in running:
            proc.close()
        if not work:
            shutil.rmtree(tmp, ignore_errors=True)
    rows = comparison_rows(order, runs, notes, remarks, workers=workers)
    for row in rows:
        row["bytes_per_image"] = sizes.get(row["name"])
    return rows


def comparison_rows(order: list[str], runs: dict[str, list[dict]], notes: dict[str, str],
                    remarks: dict[str, str] | None = None, *, workers: int) -> list[dict]:
    """One row per name in ``order`` (the first is ours, the reference of the ratios): figures from
    its rounds in ``runs`` (note: its ``remarks`` entry, if any), or, for a name with a ``notes`` entry
    or no rounds, None figures and a ``not run: ...`` note (the reason from ``notes``)."""
    ours = summarize(runs[order[0]])
    rows = []
    for name in order:
        if name in notes or not runs.get(name):
            note = notes.get(name) or "not run: no round finished"
            rows.append({"name": name, **dict.fromkeys(FIGURES), "note": note})
            continue
        r = summarize(runs[name])
        cpu_ratio = (ours["images_per_cpu_s"] / r["images_per_cpu_s"]
                     if r.get("images_per_cpu_s") and ours.get("images_per_cpu_s") else None)
        rows.append({"name": name, "images_per_s": r["images_per_s"], "images_per_s_best": r["images_per_s_best"],
                     "images_per_s_per_worker": r["images_per_s"] / max(1, workers),
                     "images_per_cpu_s": r.get("images_per_cpu_s"), "speedup": ours["images_per_s"] / r["images_per_s"],
                     "speedup_cpu": cpu_ratio, "note": (remarks or {}).get(name, "")})
    return rows
