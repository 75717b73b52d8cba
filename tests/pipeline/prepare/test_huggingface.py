"""The Hugging Face ILSVRC/imagenet-1k forms (tar.gz and parquet) through the real prepare-shards:
the same images give byte-identical shards and manifest splits as the original archives; labels that
disagree with names are refused; the unlabeled test split comes out with .cls -1."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.tools.synthetic.generate import generate

pytest.importorskip("pyarrow")
SHARD = 9


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hf-src")
    generate(out, classes=4, train_per_class=7, val_per_class=3, seed=5, quirks=False,
             layouts=("ilsvrc", "hf-targz", "hf-parquet"), progress=False)
    return out


def prepare(out: Path, *sources: str) -> int:
    return prepare_main([*sources, "--out", str(out), "--shard-samples", str(SHARD), "--workers", "2", "--quiet"])


def outputs(out: Path) -> dict:
    """sha256 of every shard and the manifest's splits (sources differ by form, by design)."""
    m = json.loads((out / "manifest.json").read_text())
    return {"shards": {sh["url"]: sh["sha256"] for s in m["splits"].values() for sh in s["shards"]},
            "splits": m["splits"], "classes": m["classes"], "rejected": m["rejected"]}


@pytest.fixture(scope="module")
def original(src, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("orig") / "out"
    assert prepare(out, "--train", str(src / "ILSVRC2012_img_train.tar"), "--val", str(src / "ILSVRC2012_img_val.tar"),
                   "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz")) == 0
    return outputs(out)


def test_the_generator_writes_both_hf_forms_with_suffixed_names(src):
    data = src / "hf" / "data"
    assert sorted(p.name for p in data.iterdir()) == ["test_images.tar.gz", "train_images_0.tar.gz",
                                                       "train_images_1.tar.gz", "val_images.tar.gz"]
    with tarfile.open(data / "train_images_0.tar.gz") as t:
        names = [m.name for m in t if m.isfile()]
    assert all(n.startswith("train/n") and n.endswith(".JPEG") and n.count("_n") == 1 for n in names)
    assert sorted(p.name for p in (src / "hf-parquet" / "data").iterdir()) == [
        "test-00000-of-00001.parquet", "train-00000-of-00002.parquet", "train-00001-of-00002.parquet",
        "validation-00000-of-00001.parquet"]


def test_hf_targz_gives_the_same_shards_and_splits_as_the_original_archives(src, original, tmp_path):
    out = tmp_path / "out"
    assert prepare(out, "--train", str(src / "hf/data/train_images_*.tar.gz"),
                   "--val", str(src / "hf/data/val_images.tar.gz")) == 0
    assert outputs(out) == original
    m = json.loads((out / "manifest.json").read_text())
    assert {s["kind"] for s in m["sources"]} == {"hf-tar.gz"}
    assert not (out / "_prepare" / "spill").exists()  # the buckets are gone once the shards are built


def test_the_pixel_form_read_in_one_pass_from_targz_equals_the_archives(src, tmp_path):
    """prepare --pixels over a source read in order (processed as it is read, onepass.py) gives the shards
    it gives from the original archives."""
    pix = ["--pixels", "yuv420", "--max-side", "64"]
    assert prepare(tmp_path / "a", "--train", str(src / "ILSVRC2012_img_train.tar"), "--val",
                   str(src / "ILSVRC2012_img_val.tar"), "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"),
                   *pix) == 0
    assert prepare(tmp_path / "b", "--train", str(src / "hf/data/train_images_*.tar.gz"),
                   "--val", str(src / "hf/data/val_images.tar.gz"), *pix) == 0
    assert outputs(tmp_path / "b") == outputs(tmp_path / "a")
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["form"] == "yuv420"


def test_hf_parquet_repeated_flags_give_the_same_shards(src, original, tmp_path):
    data = src / "hf-parquet" / "data"
    out = tmp_path / "out"
    assert prepare(out, "--train", str(data / "train-00000-of-00002.parquet"),
                   "--train", str(data / "train-00001-of-00002.parquet"),
                   "--val", str(data / "validation-*.parquet")) == 0
    assert outputs(out) == original


def test_the_console_script_takes_a_quoted_glob(src, original, tmp_path):
    out = tmp_path / "out"
    exe = Path(sys.executable).with_name("prepare-shards")
    subprocess.run([str(exe), "--train", "hf-parquet/data/train-*.parquet", "--val", "hf/data/val_images.tar.gz",
                    "--out", str(out), "--shard-samples", str(SHARD), "--quiet"], cwd=src, check=True)
    assert outputs(out) == original


def _targz(path: Path, members: dict[str, bytes]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    path.write_bytes(gzip.compress(buf.getvalue()))


def _one_jpeg(src: Path) -> bytes:
    with tarfile.open(src / "ILSVRC2012_img_val.tar") as t:
        return t.extractfile(next(m for m in t if m.isfile())).read()


def test_a_name_whose_wnid_disagrees_with_its_label_suffix_is_refused(src, tmp_path, capsys):
    bad = tmp_path / "train_images_0.tar.gz"
    _targz(bad, {"n01440764_1_n01440764.JPEG": _one_jpeg(src), "n01440764_2_n01443537.JPEG": _one_jpeg(src)})
    assert prepare(tmp_path / "out", "--train", str(bad), "--splits", "train") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "n01440764_2_n01443537.JPEG" in err and "disagree" in err
    assert not (tmp_path / "out").exists()


def test_a_parquet_label_that_disagrees_with_the_name_is_refused(src, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    jpg = _one_jpeg(src)
    image = pa.array([{"bytes": jpg, "path": "n01440764_1_n01440764.JPEG"},
                      {"bytes": jpg, "path": "n01440764_2_n01440764.JPEG"}],
                     type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    bad = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(pa.table({"image": image, "label": pa.array([0, 1], type=pa.int64())}), bad)
    assert prepare(tmp_path / "out", "--train", str(bad), "--splits", "train") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "n01440764_2_n01440764.JPEG" in err and "label says n01443537" in err


def test_the_unlabeled_test_split_comes_out_with_label_minus_one(src, tmp_path):
    import webdataset as wds

    out = tmp_path / "out"
    assert prepare(out, "--train", str(src / "hf/data/train_images_*.tar.gz"),
                   "--val", str(src / "hf/data/val_images.tar.gz"), "--test", str(src / "hf/data/test_images.tar.gz"),
                   "--splits", "train,val,test") == 0
    m = json.loads((out / "manifest.json").read_text())
    test = m["splits"]["test"]
    assert test["num_samples"] == 4 and test["class_counts"] == {} and test["num_rejected"] == 0
    samples = list(wds.WebDataset([str(out / sh["url"]) for sh in test["shards"]], shardshuffle=False))
    assert sorted(s["__key__"] for s in samples) == [f"ILSVRC2012_test_{i:08d}" for i in range(1, 5)]
    assert {s["cls"] for s in samples} == {b"-1"}
    assert {json.loads(s["json"])["wnid"] for s in samples} == {None}
    info = json.loads((out / "_info.json").read_text())
    assert info["splits"]["test"]["num_samples"] == 4
    # the audit and the inspector know the test split is unlabeled by design
    from imagenet_shards.pipeline.audit.cli import main as audit_main
    from imagenet_shards.pipeline.tools.inspect_shards import main as inspect_main

    assert audit_main([str(out), "--deep", "--quiet", "--workers", "1"]) == 0
    assert inspect_main([str(out), "--split", "test", "--n", "4", "--out", str(tmp_path / "grid.png")]) == 0


def test_the_audit_refuses_a_labeled_sample_in_the_test_split(src, tmp_path, capsys):
    from imagenet_shards.pipeline.audit.checks import check_sample
    from imagenet_shards.pipeline.audit.observe import SampleObservation

    meta = {"label": 3, "wnid": "n01440764", "filename": "ILSVRC2012_test_00000001.JPEG", "width": 1, "height": 1,
            "orig_width": 1, "orig_height": 1, "fixes": []}
    s = SampleObservation(key="ILSVRC2012_test_00000001", exts=["cls", "jpg", "json"], cls=b"3",
                          json=json.dumps(meta).encode(), jpg_head=b"\xff\xd8\xff")
    kinds = {p.kind for p in check_sample(s, "test", [{"wnid": "n01440764"}] * 4, "test/x.tar")}
    assert {"cls_invalid", "json_invalid"} <= kinds


def test_a_glob_that_matches_nothing_is_a_one_line_error(tmp_path, capsys):
    assert prepare(tmp_path / "out", "--train", str(tmp_path / "nothing-*.parquet"), "--splits", "train") == 2
    assert capsys.readouterr().err.startswith("error: no file matches")
