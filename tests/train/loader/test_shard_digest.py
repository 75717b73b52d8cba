"""The loader checks every shard it reads against the manifest's digest (issue 29 row 4): real shard
sets written by prepare-shards, one `.cls` byte changed in place (size unchanged)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from imagenet_shards.pipeline.format.digest import FAST, hex_of
from imagenet_shards.train import loader as D
from imagenet_shards.train.loader.plan import Piece
from imagenet_shards.train.loader.reading import ShardDigestError
from tests.fixtures.loader import write_shard_set

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

N, PER_SHARD, C = 24, 6, 5  # 4 train shards of 6
BAD = 2  # the shard whose .cls is changed


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> Path:
    return write_shard_set(tmp_path_factory.mktemp("digest") / "out", train=N, val=PER_SHARD, shard_samples=PER_SHARD,
                           num_classes=C, size=(24, 24))


def flip_cls(data: Path, shard: int = BAD, sample: int = 3) -> str:
    """Change the label of one sample of a train shard in place (another valid label, same size); its key."""
    entry = json.loads((data / "manifest.json").read_text())["splits"]["train"]["shards"][shard]
    path = data / entry["url"]
    with tarfile.open(path) as tf:
        m = [m for m in tf.getmembers() if m.name.endswith(".cls")][sample]
    raw = bytearray(path.read_bytes())
    old = raw[m.offset_data]
    raw[m.offset_data] = ord("0") + (old - ord("0") + 1) % C
    path.write_bytes(bytes(raw))
    assert path.stat().st_size == entry["bytes"]
    return m.name[:-4]


@pytest.fixture
def flipped(intact, tmp_path) -> Path:
    data = tmp_path / "set"
    shutil.copytree(intact, data)
    flip_cls(data)
    return data


def bad_url(data: Path) -> str:
    return json.loads((data / "manifest.json").read_text())["splits"]["train"]["shards"][BAD]["url"]


def epoch(data, **kw):
    ld = D.make_loader(str(data), "train", 4, res=16, **kw)
    labels = [lab for _, lab in ld]
    return ld, labels


def test_prepare_records_xxh3_128_of_the_shard_bytes(intact):
    m = json.loads((intact / "manifest.json").read_text())
    for split in m["splits"].values():
        for sh in split["shards"]:
            assert sh[FAST] == hex_of(FAST, (intact / sh["url"]).read_bytes())


@pytest.mark.parametrize("workers", [0, 2])
def test_intact_set_passes(intact, workers):
    ld, labels = epoch(intact, workers=workers)
    assert len(labels) == len(ld) and ld.stats["bad_samples"] == 0


@pytest.mark.parametrize("workers", [0, 2])
def test_a_changed_cls_byte_stops_the_loader_naming_the_shard(flipped, workers):
    with pytest.raises(Exception) as e:
        epoch(flipped, workers=workers)
    msg = str(e.value).strip().splitlines()[-1]
    assert bad_url(flipped).rsplit("/", 1)[-1] in msg and "audit-shards" in msg and FAST in msg
    if workers == 0:
        assert isinstance(e.value, ShardDigestError)


def test_without_the_check_the_changed_label_goes_through(flipped):
    """What the check stops: the label comes out changed, unnoticed (the row's "today")."""
    ld, labels = epoch(flipped, workers=0, verify=False)
    assert ld.stats["bad_samples"] == 0


def test_skip_option_goes_on_and_counts_the_shard(flipped, caplog):
    ld, labels = epoch(flipped, workers=0, bad_shards="skip")
    assert ld.stats["bad_samples"] == PER_SHARD  # every sample of the shard, none silently
    assert len(labels) == len(ld)  # train batches refilled from the other shards
    assert any("do not match the manifest" in r.getMessage() for r in caplog.records)


def test_manifest_without_xxh3_falls_back_to_sha256(flipped):
    m = json.loads((flipped / "manifest.json").read_text())
    for sh in m["splits"]["train"]["shards"]:
        del sh[FAST]
    (flipped / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ShardDigestError, match="sha256"):
        epoch(flipped, workers=0)


def streamed(url, mode="rb"):
    """An opener that hands the tar reader a stream (no mmap), as a remote file would be."""
    return io.BytesIO(Path(url).read_bytes())


@pytest.mark.parametrize("opener", [D.open_url, streamed], ids=["mapped", "streamed"])
def test_skipped_records_of_a_resume_still_pass_through_the_hash(flipped, opener):
    """A resumed epoch passes over the consumed samples (SKIPPED, bytes not used): the changed one
    among them is still caught, because the whole file is hashed."""
    m = D.read_manifest(str(flipped))
    shards = D.split_shards(m, str(flipped), "train")
    from imagenet_shards.pipeline.format.digest import shard_check
    digests = [shard_check(s) for s in m["splits"]["train"]["shards"]]
    pieces = [Piece(BAD, 0, PER_SHARD)]
    with pytest.raises(ShardDigestError):
        list(D.read_pieces(shards, pieces, opener=opener, skip=range(0, PER_SHARD - 1), digests=digests))
    # partly read (a piece that starts mid-shard): a mapped file is still hashed whole; a stream is not
    part = [Piece(BAD, 4, PER_SHARD)]
    if opener is streamed:
        assert len(list(D.read_pieces(shards, part, opener=opener, digests=digests))) == 2
    else:
        with pytest.raises(ShardDigestError):
            list(D.read_pieces(shards, part, opener=opener, digests=digests))


def test_s3_with_and_without_read_ahead_and_the_cache(s3, flipped, tmp_path):
    for p in sorted(flipped.rglob("*")):
        if p.is_file():
            s3.put(f"set/{p.relative_to(flipped)}", p.read_bytes())
    url = s3.url("set")
    shown = bad_url(flipped).rsplit("/", 1)[-1]
    for kw in ({}, {"readahead": None}, {"cache_dir": str(tmp_path / "cache"), "cache_bytes": 1 << 30}):
        with pytest.raises(ShardDigestError, match=shown):
            epoch(url, workers=0, **kw)
    ld, labels = epoch(url, workers=0, bad_shards="skip")
    assert ld.stats["bad_samples"] == PER_SHARD and len(labels) == len(ld)


@pytest.mark.timeout(300)
def test_train_imagenet_stops_in_one_line_exit_2_naming_audit_shards(intact, flipped, tmp_path, capsys):
    """The row's repro: a run on the intact set, the set changed in place, `--resume auto` again."""
    from imagenet_shards.train.trainer.cli import main as train_main

    data = tmp_path / "train-set"
    shutil.copytree(intact, data)
    args = ["--data", str(data), "--out", str(tmp_path / "run"), "--arch", "resnet18", "--res", "16",
            "--val-res", "20", "--val-crop", "16", "--batch-size", "4", "--workers", "0", "--device", "cpu",
            "--amp", "none", "--resume", "auto"]
    assert train_main([*args, "--epochs", "1"]) == 0
    flip_cls(data)
    capsys.readouterr()
    assert train_main([*args, "--epochs", "2"]) == 2  # resumes after epoch 0, reads the changed shard
    err = [line for line in capsys.readouterr().err.splitlines() if "do not match the manifest" in line]
    assert len(err) == 1 and bad_url(data).rsplit("/", 1)[-1] in err[0] and "audit-shards" in err[0]
    assert train_main([*args, "--epochs", "2", "--skip-bad-shards"]) == 0  # the user's choice: go on, counted
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        last = [json.loads(line) for line in f if '"epoch"' in line][-1]
    assert last["epoch"] == 1 and last["bad_samples"] == PER_SHARD  # every sample of the changed shard


@pytest.mark.parametrize("opener", [D.open_url, streamed], ids=["mapped", "streamed"])
def test_skip_mode_keeps_positions_for_a_shard_with_a_damaged_header_too(intact, tmp_path, opener):
    """A header that fails its checksum (size kept) in a shard that also fails its digest: with skip,
    the planned positions come out bad (SKIPPED where the resume skips them); with stop, it stops."""
    data = tmp_path / "set"
    shutil.copytree(intact, data)
    m = D.read_manifest(str(data))
    path = data / m["splits"]["train"]["shards"][BAD]["url"]
    with tarfile.open(path) as tf:
        header = tf.getmembers()[6].offset  # the third sample's first member
    raw = bytearray(path.read_bytes())
    raw[header + 10] ^= 0x20
    path.write_bytes(bytes(raw))
    from imagenet_shards.pipeline.format.digest import shard_check
    shards = D.split_shards(m, str(data), "train")
    digests = [shard_check(s) for s in m["splits"]["train"]["shards"]]
    got = list(D.read_pieces(shards, [Piece(BAD, 0, PER_SHARD)], opener=opener, skip={0}, digests=digests,
                             bad_shards="skip"))
    assert len(got) == PER_SHARD and got[0] is D.SKIPPED
    assert all("do not match the manifest" in r.bad for r in got[1:])
    assert got[-1].key.endswith(f"#{PER_SHARD - 1}")  # past the damage: named by position
    with pytest.raises(ValueError, match="audit-shards"):
        list(D.read_pieces(shards, [Piece(BAD, 0, PER_SHARD)], opener=opener, digests=digests))
