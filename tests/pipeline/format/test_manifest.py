"""The one manifest reader/validator: what it accepts, the one-line error for each way a manifest is wrong,
and the split's shard list."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from imagenet_shards.pipeline.format.manifest import (FORMAT, FORMAT_VERSION, ManifestError, ManifestMissing, Shard,
                                                      dumps, read_manifest, split_shards)


@pytest.fixture
def data(synthetic_shards, tmp_path):
    """A private copy of the session's shard set (the session's own is read-only)."""
    dst = tmp_path / "data"
    shutil.copytree(synthetic_shards, dst)
    return dst


def write(d, obj) -> None:
    (d / "manifest.json").write_text(obj if isinstance(obj, str) else dumps(obj))


def test_reads_what_prepare_shards_wrote(synthetic_shards):
    text = (synthetic_shards / "manifest.json").read_text()
    for data in (synthetic_shards, str(synthetic_shards), f"file://{synthetic_shards}"):
        assert read_manifest(data) == json.loads(text)


def one_line_error(data, match: str, kind=ManifestError) -> str:
    with pytest.raises(kind, match=match) as e:
        read_manifest(data)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_missing(tmp_path):
    msg = one_line_error(tmp_path, "no manifest.json in", ManifestMissing)
    assert "prepare-shards" in msg
    with pytest.raises(FileNotFoundError):  # also what callers that only know OSError catch
        read_manifest(tmp_path / "nope")


@pytest.mark.parametrize("case,match", [
    ("truncated", "is not valid JSON .*rerun prepare-shards"),
    ("binary", "is not valid JSON"),
    ("a list", "is not an imagenet-shards manifest"),
    ("other format", "is not an imagenet-shards manifest"),
    ("newer version", f"has format_version 2; this tool reads {FORMAT_VERSION}"),
    ("no splits", "has no splits"),
    ("empty splits", "has no splits"),
])
def test_each_fault_is_one_line(data, case, match):
    m = json.loads((data / "manifest.json").read_text())
    if case == "binary":
        (data / "manifest.json").write_bytes(b"\xff\xfe{")
    else:
        write(data, {"truncated": dumps(m)[:100], "a list": [m], "other format": {**m, "format": "wids"},
                     "newer version": {**m, "format_version": 2},
                     "no splits": {k: v for k, v in m.items() if k != "splits"},
                     "empty splits": {**m, "splits": {}}}[case])
    assert str(data / "manifest.json") in one_line_error(data, match)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_unreadable(data):
    os.chmod(data / "manifest.json", 0)
    try:
        one_line_error(data, "cannot read .*manifest.json: Permission denied")
    finally:
        os.chmod(data / "manifest.json", 0o644)


def test_split_shards_resolves_urls_against_data(synthetic_shards):
    m = read_manifest(synthetic_shards)
    for base, join in ((str(synthetic_shards), os.path.join), ("s3://bucket/set", lambda b, r: f"{b}/{r}")):
        shards = split_shards(m, base, "val")
        assert shards == [Shard(join(base, e["url"]), e["num_samples"]) for e in m["splits"]["val"]["shards"]]
    m = {"format": FORMAT, "splits": {"train": {"shards": [{"url": "https://elsewhere/a.tar", "num_samples": 3}]}}}
    assert split_shards(m, "/data", "train") == [Shard("https://elsewhere/a.tar", 3)]  # an absolute url wins


@pytest.mark.parametrize("entry,match", [
    ({"num_samples": 3}, "malformed shard entry .*'url'"),
    ({"url": "a.tar"}, "malformed shard entry .*'num_samples'"),
    ({"url": "a.tar", "num_samples": "many"}, "malformed shard entry"),
    ({"url": 7, "num_samples": 3}, "malformed shard entry"),
    ({"url": "a.tar", "num_samples": -1}, "negative num_samples"),
    ("a.tar", "malformed shard entry"),
])
def test_split_shards_refuses_malformed_entries(entry, match):
    m = {"splits": {"train": {"shards": [{"url": "ok.tar", "num_samples": 1}, entry]}}}
    with pytest.raises(ManifestError, match=match):
        split_shards(m, "/data", "train")
    with pytest.raises(ManifestError, match=r"split 'val' is not in the manifest \(has: train\)"):
        split_shards(m, "/data", "val")
    with pytest.raises(ManifestError, match="malformed shard entry"):
        split_shards({"splits": {"train": {}}}, "/data", "train")
