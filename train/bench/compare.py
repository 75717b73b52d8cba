"""``bench-loader --compare``: our loader, the baselines and the peers take turns on the same images.

A row either carries figures measured in this run or says ``not run: <reason>`` with no figures
at all: no estimate, no figure measured elsewhere.
"""

from __future__ import annotations

import json
import posixpath
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.format.manifest import manifest_form
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
            split: str = "train", work: str | None = None, only: Iterable[str] | None = None,
            forms: dict[str, str] | None = None, dct_scaling: str = "auto") -> list[dict]:
    """Rows {name, images_per_s (median of rounds), images_per_s_best, images_per_s_per_worker, images_per_cpu_s,
    speedup (ours / theirs, median wall clock), speedup_cpu (by images per CPU-second), bytes_per_image
    (what the row reads per image: our shards, the image files, a peer's own dataset file), note} on
    the same images of ``split``: RandomResizedCrop + flip for train, else the centre crop (resize the
    shorter side to ``res * 256 / 224``, crop ``res``) for every row. A row that could not run has None
    figures and a ``not run: ...`` note. ``only``: the rows to run (names, or their beginnings; our
    first row always runs); ``work``: a folder kept for the next call (the image files and FFCV's
    dataset files are written once), default a temporary one. ``dct_scaling``: our rows' (``decode.DCT_SCALINGS``).

    The first row is our loader with ``decoder``; ``also_decoders`` (default: ``pil`` when that is
    not the decoder already) adds our loader with those decoders as rows of their own, so the table
    shows what the decoder alone buys; ``forms`` ({label: shard set}) adds our loader over other
    shard sets of the same images (the pixel form: ``imagenet-shards (LABEL)``; ValueError when one's
    split holds another number of samples, before anything runs). If our own loader
    fails, that error propagates. Then the baselines (``baselines.py``), then DALI and FFCV, each a
    subprocess in its environment under ``peers`` (default ``$IMAGENET_SHARDS_PEERS``; ``peers.py``).

    The loaders take turns: each round times ``batches`` batches of every loader after skipping
    ``warmup`` (covering what its workers prefetched while idle), so slow drifts in machine load
    hit all of them alike. Before each turn the process tree must be idle (``wait_until_idle``;
    the peers are part of the tree): the previous loader's workers finish their prefetching on
    their own time, not the next one's."""
    shards = D.split_shards(D.read_manifest(data), data, split)
    others = _other_sets(forms or {}, data, sum(s.num_samples for s in shards), split)
    tmp = Path(work) if work else Path(tempfile.mkdtemp(prefix="bench-loader-"))
    tmp.mkdir(parents=True, exist_ok=True)
    wanted = None if only is None else tuple(only)
    table = _Table(lambda name: wanted is None or any(name.startswith(w) for w in wanted))
    running: list[P.PeerProcess] = []
    try:
        folder = tmp / f"images-{split}"
        _folder_export(shards, folder, progress)
        shard_bytes, file_bytes = _mean_bytes(shards, folder)
        ours = _our_rows(table, data, others, decoder, also_decoders, shard_bytes,
                         dict(split=split, workers=workers, batch_size=batch_size, res=res, dct_scaling=dct_scaling))
        _baseline_rows(table, shards, folder, shard_bytes, file_bytes,
                       dict(res=res, batch_size=batch_size, workers=workers, train=split == "train"))
        setup = dict(folder=str(folder), work=str(tmp), res=res, batch_size=batch_size, workers=workers, seed=seed,
                     train=split == "train", val_resize=val_resize(res))
        running = _peer_rows(table, P.peers_dir(peers), setup, file_bytes, progress)
        runs = _rounds(table, ours, rounds=rounds, batches=batches, warmup=warmup, workers=workers, progress=progress)
    finally:
        for proc in running:
            proc.close()
        if not work:
            shutil.rmtree(tmp, ignore_errors=True)
    rows = comparison_rows(table.order, runs, table.notes, table.remarks, workers=workers)
    for row in rows:
        row["bytes_per_image"] = table.sizes.get(row["name"])
    return rows


class _Table:
    """What ``compare`` gathers per row before timing: the order, timers, bytes per image, notes."""

    def __init__(self, wants: Callable[[str], bool]):
        self.wants = wants
        self.order: list[str] = []
        self.timers: dict[str, Timer] = {}
        self.sizes: dict[str, float | None] = {}
        self.notes: dict[str, str] = {}    # rows that did not run: why
        self.remarks: dict[str, str] = {}  # rows that ran: what to know when reading their figures

    def add(self, name: str, size: float | None, timer: Timer | None = None) -> None:
        self.order.append(name)
        self.sizes[name] = size
        if timer is not None:
            self.timers[name] = timer


def form_label(data: str) -> str:
    """The row label of another shard set of the same images (``bench-loader --also-set``): its form and
    max side (``yuv420, 400 px``: a ``prepare-shards derive`` set), else its form and folder name."""
    m = D.read_manifest(data)
    side = m.get("max_side")
    return f"{manifest_form(m)}, {side} px" if side else f"{manifest_form(m)}, {posixpath.basename(data.rstrip('/'))}"


def _other_sets(forms: dict[str, str], data: str, samples: int, split: str) -> dict[str, tuple[str, float]]:
    """{label: (shard set, bytes per image of its ``split``)} of ``forms``; ValueError (one line) for a
    set whose split holds another number of samples than DATA's ``samples``: not the same images."""
    out = {}
    for label, other in forms.items():
        shards = D.split_shards(D.read_manifest(other), other, split)
        count = sum(s.num_samples for s in shards)
        if count != samples:
            raise ValueError(f"{storage.redact(other)} holds {count} {split} samples and {storage.redact(data)} "
                             f"{samples}: a set compared beside DATA must hold the same images (prepare-shards "
                             f"derive DATA makes one)")
        out[label] = (other, sum(storage.size(s.url) for s in shards) / max(1, count))
    return out


def _our_rows(table: _Table, data: str, others: dict[str, tuple[str, float]], decoder: str, also_decoders,
              shard_bytes: float, common: dict) -> str:
    """Our loader's rows (the first one the reference of the ratios); returns its name."""
    main = dec.resolve_decoder(decoder)
    ours = f"imagenet-shards ({main})"
    table.add(ours, shard_bytes, _timer(our_stream(data, decoder=decoder, **common)[0]))
    also = [d for d in (["pil"] if also_decoders is None else also_decoders) if dec.resolve_decoder(d) != main]
    for d in dict.fromkeys(dec.resolve_decoder(d) for d in also):
        if table.wants(f"imagenet-shards ({d})"):
            table.add(f"imagenet-shards ({d})", shard_bytes, _timer(our_stream(data, decoder=d, **common)[0]))
    for label, (other, size) in others.items():
        table.add(f"imagenet-shards ({label})", size, _timer(our_stream(other, decoder=decoder, **common)[0]))
    return ours


def _baseline_rows(table: _Table, shards, folder: Path, shard_bytes: float, file_bytes: float, common: dict) -> None:
    for b in baselines([s.url for s in shards], folder, **common):
        if not table.wants(b.name):
            continue
        table.add(b.name, file_bytes if "ImageFolder" in b.name else shard_bytes)
        if b.build is None:
            table.notes[b.name] = b.not_run
            continue
        try:
            table.timers[b.name] = _timer(BatchStream(b.build()))
        except Exception as e:  # an optional extra that is installed but broken must not sink the table
            table.notes[b.name] = _failed(e, "to start")


def _peer_rows(table: _Table, root: Path | None, setup: dict, file_bytes: float, progress) -> list[P.PeerProcess]:
    """DALI's and FFCV's rows, each a subprocess started here; returns them (the caller closes them)."""
    running = []
    for peer in P.PEERS:
        if not table.wants(peer.name):
            continue
        table.add(peer.name, None)
        try:
            if root is not None and progress:
                progress(f"starting {peer.name} in its environment under {root}")
            running.append(P.start_peer(peer, root, setup))
            table.timers[peer.name], table.remarks[peer.name] = running[-1].time, running[-1].note
            table.sizes[peer.name] = running[-1].bytes_per_image
            if table.sizes[peer.name] is None and peer.env == "dali":
                table.sizes[peer.name] = file_bytes  # it reads the image files
        except P.PeerNotRun as e:
            table.notes[peer.name] = str(e)
    return running


def _rounds(table: _Table, ours: str, *, rounds: int, batches: int, warmup: int, workers: int,
            progress) -> dict[str, list[dict]]:
    """Every row's timings, the rows taking turns in each round (a failing peer gets a note; ours raises)."""
    per_round_warmup = max(warmup, 4 * max(1, workers) + 2)  # the prefetch depth built while another ran
    runs: dict[str, list[dict]] = {name: [] for name in table.timers}
    for r in range(rounds):
        for name, timer in table.timers.items():
            if name in table.notes:
                continue
            if progress:
                progress(f"round {r + 1}/{rounds}: {name}")
            wait_until_idle()
            try:
                runs[name].append(timer(batches=batches, warmup=warmup if r == 0 else per_round_warmup))
            except P.PeerNotRun as e:
                table.notes[name] = str(e)
            except Exception as e:
                if name == ours:
                    raise
                table.notes[name] = _failed(e, f"in round {r + 1}")
    return runs


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
