"""``bench-loader --compare``: our loader, the baselines and the peers take turns on the same images.

A row either carries figures measured in this run or says ``not run: <reason>`` with no figures
at all: no estimate, no figure measured elsewhere.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable

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


def compare(data: str, *, workers: int = 1, batches: int = 50, batch_size: int = 64, decoder: str = "auto",
            res: int = 224, warmup: int = 5, rounds: int = 3, also_decoders: Iterable[str] | None = None,
            peers: str | None = None, seed: int = 0, progress: Callable[[str], None] | None = None,
            split: str = "train") -> list[dict]:
    """Rows {name, images_per_s (median of rounds), images_per_s_best, images_per_s_per_worker, images_per_cpu_s,
    speedup (ours / theirs, median wall clock), speedup_cpu (by images per CPU-second), note} on the same
    images of ``split``: RandomResizedCrop + flip for train, else the centre crop (resize the shorter
    side to ``res * 256 / 224``, crop ``res``) for every row. A row that could not run has None
    figures and a ``not run: ...`` note.

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
    tmp = Path(tempfile.mkdtemp(prefix="bench-loader-"))
    running: list[P.PeerProcess] = []
    try:
        folder = tmp / "images"
        if progress:
            progress(f"writing the images as files under {folder} for the file-based baselines")
        export_image_folder(shards, folder)
        main = dec.resolve_decoder(decoder)
        ours_name = f"imagenet-shards ({main})"
        timers: dict[str, Timer] = {}
        notes: dict[str, str] = {}      # rows that did not run: why
        remarks: dict[str, str] = {}    # rows that ran: what to know when reading their figures
        timers[ours_name] = _timer(our_stream(data, split=split, workers=workers, batch_size=batch_size,
                                              decoder=decoder, res=res)[0])
        also = [d for d in (["pil"] if also_decoders is None else also_decoders) if dec.resolve_decoder(d) != main]
        for d in dict.fromkeys(dec.resolve_decoder(d) for d in also):
            timers[f"imagenet-shards ({d})"] = _timer(our_stream(data, split=split, workers=workers,
                                                                 batch_size=batch_size, decoder=d, res=res)[0])
        order = list(timers)
        for b in baselines([s.url for s in shards], folder, res=res, batch_size=batch_size, workers=workers,
                           train=train):
            order.append(b.name)
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
            order.append(peer.name)
            try:
                if root is not None and progress:
                    progress(f"starting {peer.name} in its environment under {root}")
                running.append(P.start_peer(peer, root, setup))
                timers[peer.name], remarks[peer.name] = running[-1].time, running[-1].note
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
        shutil.rmtree(tmp, ignore_errors=True)
    return comparison_rows(order, runs, notes, remarks, workers=workers)


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
