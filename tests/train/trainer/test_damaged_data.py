"""A damaged or missing shard, and URLs given where only a local path works: one `error:` line and
exit 2, before the first step (issue 15), on a copy of the tiny shard set.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from imagenet_shards.train.trainer.watch.telemetry import read_metrics
from tests.fixtures.loader import rehash_shards
from tests.fixtures.servers import serve_http
from tests.fixtures.trainer import TINY, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def shards(tiny_shards, tmp_path) -> Path:
    """A private copy: the module's tiny shard set is shared and never written to."""
    return Path(shutil.copytree(tiny_shards, tmp_path / "shards"))


def _shard(data: Path, split: str, i: int = 0) -> Path:
    manifest = json.loads((data / "manifest.json").read_text())
    return data / manifest["splits"][split]["shards"][i]["url"]


def _one_error_line(capsys) -> str:
    """stderr less progress bars (and the blanks they leave) must be one `error:` line."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.lstrip().startswith("epoch ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_truncated_train_shard_stops_before_the_first_step(shards, tmp_path, capsys):
    shard = _shard(shards, "train", 1)
    shard.write_bytes(shard.read_bytes()[:-1536])
    out = tmp_path / "run"
    assert run_cli("--data", shards, "--out", out, *TINY, "--epochs", "1") == 2
    err = _one_error_line(capsys)
    assert shard.name in err and "the manifest records" in err and "audit-shards" in err
    assert not out.exists()  # nothing ran, nothing written


def test_missing_val_shard_stops_before_the_first_step(shards, tmp_path, capsys):
    shard = _shard(shards, "val", 1)
    shard.unlink()
    out = tmp_path / "run"
    assert run_cli("--data", shards, "--out", out, *TINY, "--epochs", "1") == 2
    err = _one_error_line(capsys)
    assert shard.name in err and "missing" in err and "audit-shards" in err
    assert not out.exists()


@pytest.mark.timeout(120)
def test_missing_val_shard_over_http_stops_before_the_first_step(shards, tmp_path, capsys):
    shard = _shard(shards, "val", 0)
    shard.unlink()
    out = tmp_path / "run"
    with serve_http(shards) as base:  # no listings: one HEAD per shard, the 404 found before training
        assert run_cli("--data", base, "--out", out, *TINY, "--epochs", "1") == 2
    err = _one_error_line(capsys)
    assert shard.name in err and "missing" in err and "127.0.0.1" in err
    assert not out.exists()


@pytest.mark.timeout(300)
def test_damaged_shard_of_the_right_size_is_one_line_from_the_workers(shards, tmp_path, capsys):
    """A shard with its recorded size but a broken tar header passes the start-up check; the
    worker's error then ends the run with one line (not the worker's traceback)."""
    shard = _shard(shards, "train", 0)
    data = bytearray(shard.read_bytes())
    data[148:156] = b"0000000\0"  # the first header's checksum
    shard.write_bytes(bytes(data))
    out = tmp_path / "run"
    assert run_cli("--data", shards, "--out", out, *TINY, "--workers", "2", "--epochs", "1") == 2
    err = _one_error_line(capsys)
    assert shard.name in err and "invalid tar header" in err and "audit-shards" in err


@pytest.mark.parametrize("flag", ["--out", "--cache-dir", "--weights", "--resume"])
def test_url_for_a_local_only_argument_is_refused(shards, tmp_path, capsys, monkeypatch, flag):
    monkeypatch.chdir(tmp_path)
    args = ["--data", shards, *TINY, "--epochs", "1"]
    args += ["--out", "s3://bucket/run"] if flag == "--out" else ["--out", tmp_path / "run", flag, "s3://bucket/x"]
    assert run_cli(*args) == 2
    err = _one_error_line(capsys)
    assert f"{flag} takes a local path, not a URL" in err
    assert not (tmp_path / "s3:").exists() and not (tmp_path / "run").exists()


def test_file_url_for_out_is_a_local_path(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli("--synthetic-data", "--out", f"file://{out}", *TINY, "--epochs", "1", "--limit-batches", "1") == 0
    assert read_metrics(out)[-1]["kind"] == "final"




def test_a_shard_set_without_val_needs_no_val(tmp_path, capsys):
    """prepare-shards --splits train writes a manifest without a val split: training on it would
    evaluate on nothing, so it is refused unless --no-val (then it trains, keeps no best checkpoint)."""
    from imagenet_shards.pipeline.prepare.run import Config, prepare
    from imagenet_shards.pipeline.tools.synthetic.generate import generate

    generate(tmp_path / "src", classes=2, train_per_class=8, val_per_class=1, quirks=False, progress=False)
    data = tmp_path / "train-only"
    prepare(out=str(data), train=tmp_path / "src" / "ILSVRC2012_img_train.tar", workers=1, progress=False,
            config=Config(resize="longer:48", splits=("train",)))
    out = tmp_path / "run"
    assert run_cli("--data", data, "--out", out, *TINY, "--epochs", "1") == 2
    err = _one_error_line(capsys)
    assert "has no val split" in err and "--no-val" in err and not out.exists()
    assert run_cli("--data", data, "--out", out, *TINY, "--epochs", "1", "--limit-batches", "1", "--no-val") == 0
    epoch = next(r for r in read_metrics(out) if r["kind"] == "epoch")
    assert "val_top1" not in epoch and (out / "checkpoint-latest.pt").exists()
    assert not (out / "checkpoint-best.pt").exists()
    assert run_cli("--data", data, "--out", out, *TINY, "--eval-only", "--resume", "auto", "--no-val") == 2
    assert "drop --no-val" in _one_error_line(capsys)


def test_bad_samples_are_counted_and_warned_about_above_the_bars(shards, tmp_path, capsys):
    """With --limit-batches, the train epoch still counts its bad samples (none here). A bad val
    sample's warning goes through tqdm (its own line, not into the bar); torch's per-loader "will
    create 2 worker processes ... suggested max 1" UserWarning is replaced by one line of the trainer's."""
    import os
    import tarfile
    import warnings

    shard = _shard(shards, "val", 0)
    with tarfile.open(shard) as t:
        jpg = next(m for m in t.getmembers() if m.name.endswith(".jpg"))
    with open(shard, "r+b") as f:  # same size: only decoding finds it
        f.seek(jpg.offset_data)
        f.write(b"\0" * jpg.size)
    rehash_shards(shards)  # only the sample is bad: the shard's digests are its bytes' (else the loader stops)
    flags = [f for f in TINY if f not in ("--workers", "0")] + ["--workers", "2"]
    out = tmp_path / "run"
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})  # one usable core: 2 workers are more than torch suggests
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert run_cli("--data", shards, "--out", out, *flags, "--epochs", "1", "--limit-batches", "2") == 0
    finally:
        os.sched_setaffinity(0, cores)
    epoch = next(r for r in read_metrics(out) if r["kind"] == "epoch")
    assert isinstance(epoch["bad_samples"], int) and epoch["bad_samples"] == 0
    assert epoch["loader"]["batches"] >= 2 and epoch["val_samples"] == 19  # 20 less the bad one
    captured = capsys.readouterr()
    lines = captured.err.replace("\r", "\n").splitlines()
    assert any(line.startswith(f"skipped bad sample '{jpg.name[:-4]}'") for line in lines), captured.err
    assert not [w for w in caught if "worker processes" in str(w.message)]
    assert captured.out.count("--workers 2 per rank x 1 rank(s) = 2 loader processes on 1 usable cores") == 1
