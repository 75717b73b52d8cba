"""The per-shard xxh3_128 digest: its bytes (docs/format.md), written by prepare-shards and parts +
finalize (adopt: tests/pipeline/prepare/test_adopt.py), and checked by audit-shards where present."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from imagenet_shards.pipeline.audit.run import audit
from imagenet_shards.pipeline.format.digest import FAST, hex_of, shard_check
from imagenet_shards.pipeline.format.manifest import dumps
from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from tests.fixtures.loader import write_shard_set


def test_xxh3_128_is_the_canonical_big_endian_hex():
    # XXH3_128bits of the empty input (xxHash's own test vector): high 64 bits first
    assert hex_of(FAST, b"") == "99aa06d3014798d86001c324468d497f"
    import xxhash

    assert hex_of(FAST, b"abc") == xxhash.xxh3_128(b"abc").digest().hex() == f"{xxhash.xxh3_128_intdigest(b'abc'):032x}"


def test_shard_check_prefers_xxh3_then_sha256_then_nothing():
    sha, fast = "a" * 64, "b" * 32
    assert shard_check({"sha256": sha, FAST: fast}) == (FAST, fast)
    assert shard_check({"sha256": sha}) == ("sha256", sha)
    assert shard_check({"sha256": sha, FAST: "not hex"}) == ("sha256", sha)
    assert shard_check({}) is None


def digests_match(out: Path) -> int:
    m = json.loads((out / "manifest.json").read_text())
    n = 0
    for split in m["splits"].values():
        for sh in split["shards"]:
            path = Path(sh["url"]) if Path(sh["url"]).is_absolute() else out / sh["url"]
            assert sh[FAST] == hex_of(FAST, path.read_bytes()), sh["url"]
            n += 1
    return n


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    return write_shard_set(tmp_path_factory.mktemp("d") / "out", train=12, val=4, shard_samples=4, num_classes=3,
                           size=(24, 24))


def test_prepare_writes_it(prepared):
    assert digests_match(prepared) == 4


def test_parts_and_finalize_write_it(tmp_path):
    src = tmp_path / "src"
    write_shard_set(src / "ref", train=12, shard_samples=4, num_classes=3, size=(24, 24))  # for its images
    folder = tmp_path / "folder"
    for p in (src / "ref" / "train").glob("*.tar"):
        with tarfile.open(p) as tf:
            for m in tf.getmembers():
                if m.name.endswith(".jpg"):
                    key = m.name[:-4]
                    d = folder / key.split("_")[0]
                    d.mkdir(parents=True, exist_ok=True)
                    (d / f"{key}.JPEG").write_bytes(tf.extractfile(m).read())
    out = tmp_path / "out"
    args = ["--train", str(folder), "--splits", "train", "--shard-samples", "4", "--out", str(out), "--workers", "1",
            "--quiet"]
    assert prepare_main([*args, "--part", "0/2"]) == 0 and not (out / "manifest.json").exists()
    assert prepare_main([*args, "--part", "1/2"]) == 0
    (out / "manifest.json").unlink()
    assert prepare_main(["finalize", str(out)]) == 0
    assert digests_match(out) == 3


def test_audit_checks_it_where_present_and_refuses_a_malformed_one(prepared, tmp_path):
    data = tmp_path / "set"
    shutil.copytree(prepared, data)
    m = json.loads((data / "manifest.json").read_text())
    sh = m["splits"]["train"]["shards"][1]
    sh[FAST] = "0" * 32  # only this digest disagrees: the bytes and sha256 are intact
    (data / "manifest.json").write_text(dumps(m))
    r = audit(data, workers=1, progress=False)
    assert [(p.kind, p.shard) for p in r.errors] == [("shard_xxh3_128", sh["url"])]
    sh[FAST] = "xyz"
    (data / "manifest.json").write_text(dumps(m))
    assert "manifest_schema" in {p.kind for p in audit(data, workers=1, progress=False).errors}
    del sh[FAST]  # optional: a manifest without it audits clean
    (data / "manifest.json").write_text(dumps(m))
    assert audit(data, workers=1, progress=False).ok
