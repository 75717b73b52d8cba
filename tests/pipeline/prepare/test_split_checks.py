"""A split asked for must be the split it claims to be: an empty or wrong --val, a val source that
holds other images than the devkit's ground truth lists, and a split whose every image is rejected
are one-line errors (exit 2) with no manifest, unless --allow-partial-val (recorded)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from imagenet_shards.pipeline.prepare.cli import main as prepare_main


def val_tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return path


def val_members(src: Path) -> list[tuple[str, bytes]]:
    with tarfile.open(src / "ILSVRC2012_img_val.tar") as t:
        return [(m.name, t.extractfile(m).read()) for m in t.getmembers()]


def prepare_val(src: Path, val: Path, out: Path, *extra: str) -> int:
    return prepare_main(["--val", str(val), "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"), "--splits", "val",
                         "--out", str(out), "--quiet", "--workers", "1", *extra])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.strip()


def test_the_train_archive_or_an_empty_tar_as_val_is_an_error(synthetic_imagenet, tmp_path, capsys):
    src = synthetic_imagenet
    assert prepare_main(["--train", str(src / "ILSVRC2012_img_train.tar"), "--val", str(src / "ILSVRC2012_img_train.tar"),
                         "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"), "--out", str(tmp_path / "a"),
                         "--quiet"]) == 2
    err = one_error_line(capsys)
    assert "--val ILSVRC2012_img_train.tar holds 6 images and the devkit's ground truth names none" in err
    assert "the train archive?" in err and not (tmp_path / "a").exists()
    assert prepare_val(src, val_tar(tmp_path / "empty.tar", []), tmp_path / "b") == 2
    assert "--val empty.tar holds no images" in one_error_line(capsys) and not (tmp_path / "b").exists()


def test_a_partial_val_archive_needs_allow_partial_val_which_is_recorded(synthetic_imagenet, tmp_path, capsys):
    src = synthetic_imagenet
    members = val_members(src)
    half = val_tar(tmp_path / "half.tar", members[: len(members) // 2])
    assert prepare_val(src, half, tmp_path / "a") == 2
    err = one_error_line(capsys)
    assert f"holds {len(members) // 2} images, but the devkit's ground truth lists {len(members)}" in err
    assert "--allow-partial-val" in err and not (tmp_path / "a").exists()

    assert prepare_val(src, half, tmp_path / "b", "--allow-partial-val") == 0
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert m["config"]["allow_partial_val"] is True
    val = next(s for s in m["sources"] if s["split"] == "val")
    assert val["ground_truth_images"] == len(members) and val["ground_truth_listed"] == len(members) // 2
    assert m["splits"]["val"]["images_in"] == len(members) // 2


def test_a_full_val_archive_records_nothing_new(synthetic_imagenet, tmp_path):
    src = synthetic_imagenet
    assert prepare_val(src, src / "ILSVRC2012_img_val.tar", tmp_path / "a") == 0
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert "allow_partial_val" not in m["config"] and "ground_truth_images" not in m["sources"][0]


def test_a_split_whose_every_image_is_rejected_writes_no_manifest(synthetic_imagenet, tmp_path, capsys):
    """Every val image listed by the devkit, every one of them empty: all rejected after reading."""
    src = synthetic_imagenet
    empty = val_tar(tmp_path / "val.tar", [(name, b"") for name, _ in val_members(src)])
    out = tmp_path / "out"
    assert prepare_val(src, empty, out) == 2
    err = one_error_line(capsys)
    assert "the val split has 0 samples: all" in err and "empty" in err and "no manifest was written" in err
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("splits", ["test"])
def test_an_empty_test_source_is_an_error(tmp_path, capsys, splits):
    empty = val_tar(tmp_path / "test.tar", [])
    assert prepare_main(["--test", str(empty), "--splits", splits, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "--test test.tar holds no images" in one_error_line(capsys) and not (tmp_path / "o").exists()
