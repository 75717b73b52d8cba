"""Memory that creeps: each epoch records the main process's RSS and its loader workers' PSS, the
watch warns once past +10 % over the second epoch, and a run with persistent workers reading
through the shard cache stays flat (<= +5 % from epoch 2 on): 3 epochs of training by default, 15
with evaluation in the slow variant."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagenet_shards.train.trainer.watch.memory import MemoryWatch, child_pids, epoch_memory
from imagenet_shards.train.trainer.watch.telemetry import read_metrics
from tests.fixtures.servers import serve_http
from tests.fixtures.trainer import TINY

FLAT = 0.05


def test_the_watch_compares_with_the_second_epoch_and_warns_once():
    watch = MemoryWatch()
    seen = [watch.observe(e, {"main_rss_gib": main, "workers": 2, "workers_pss_gib": workers})
            for e, (main, workers) in enumerate([(0.5, 0.1), (1.0, 0.4), (1.09, 0.43), (1.05, 0.45), (1.3, 0.9)])]
    assert seen[:3] == [None, None, None]  # epoch 1 fills caches; +9 % and +7.5 % are within 10 %
    assert seen[3] == ("warning: memory grew from epoch 2 to epoch 4: the loader workers' PSS 0.40 -> 0.45 GiB "
                       "(+12 %); memory that keeps growing ends in the OOM killer: look for references kept per "
                       "step or epoch (docs/training.md, 'Memory')")
    assert seen[4] is None  # once per run
    watch = MemoryWatch()
    more = [watch.observe(e, {"main_rss_gib": 1.0, "workers": n, "workers_pss_gib": pss})
            for e, (n, pss) in enumerate([(2, 0.2), (2, 0.4), (4, 0.8), (4, 0.82), (4, 0.95)])]
    assert more[:4] == [None] * 4 and "from epoch 3 to epoch 5" in more[4]  # the val workers started at epoch 3


def _hold(mib: int, ready, done) -> None:
    block = bytearray(os.urandom(mib << 20))  # private, touched pages
    ready.set()
    done.wait(60)
    del block


def test_epoch_memory_counts_what_child_processes_hold():
    before = epoch_memory()
    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(64, ready, done))
    child.start()
    try:
        assert ready.wait(60)
        now = epoch_memory()
        assert child.pid in child_pids() and now["workers"] == before["workers"] + 1
        assert now["workers_pss_gib"] - before["workers_pss_gib"] >= 60 / 1024  # its 64 MiB, counted once
        assert now["main_rss_gib"] > 0.01
    finally:
        done.set()
        child.join()


def _run_from_http(data: Path, out: Path, epochs: int, *extra: str) -> list[dict]:
    """train-imagenet in its own process (its memory is the run's alone) over HTTP with --cache-dir,
    persistent workers; returns its epoch records."""
    flags = [f for f in TINY if f not in ("--workers", "0")] + ["--workers", "2", *extra]
    with serve_http(data) as base:
        proc = subprocess.run([sys.executable, "-m", "imagenet_shards.train", "--data", base, "--out", str(out),
                               *flags, "--epochs", str(epochs), "--cache-dir", str(out.parent / "cache")],
                              capture_output=True, text=True, timeout=1500,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "memory grew" not in proc.stdout, proc.stdout
    return [r for r in read_metrics(out) if r["kind"] == "epoch"]


def _assert_flat(epochs: list[dict], workers: int) -> None:
    base, last = epochs[1], epochs[-1]
    assert base["workers"] == last["workers"] == workers  # persistent: alive across epochs
    for key in ("main_rss_gib", "workers_pss_gib"):
        growth = last[key] / base[key] - 1
        assert growth <= FLAT, (key, [e[key] for e in epochs])


@pytest.mark.timeout(600)
def test_a_short_run_with_persistent_workers_and_the_shard_cache_stays_flat(tiny_shards, tmp_path):
    """The small variant: train only (2 workers), 3 epochs."""
    epochs = _run_from_http(tiny_shards, tmp_path / "run", 3, "--no-val")
    assert len(epochs) == 3 and all(e["main_rss_gib"] > 0 and e["workers_pss_gib"] > 0 for e in epochs)
    assert list((tmp_path / "cache").iterdir())  # the shards were read through the cache
    _assert_flat(epochs, workers=2)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_fifteen_epochs_with_persistent_workers_and_the_shard_cache_stay_flat(tiny_shards, tmp_path):
    epochs = _run_from_http(tiny_shards, tmp_path / "run", 15)
    assert len(epochs) == 15
    _assert_flat(epochs, workers=4)  # 2 train + 2 val workers
    (tmp_path / "memory.json").write_text(json.dumps([{k: e[k] for k in ("epoch", "main_rss_gib", "workers_pss_gib")}
                                                      for e in epochs]))
