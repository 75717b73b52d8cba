"""Disk full while prepare-shards writes: one line naming the file being written and what to do
(free space, or --staging elsewhere), exit 2, no temp file left. On a real small tmpfs (root only; skipped with the reason elsewhere)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagenet_shards.pipeline.prepare.cli import main as prepare_main
from imagenet_shards.pipeline.storage.atomic import DiskFull, write_atomic
from tests.fixtures.mounts import small_tmpfs

ROOM = 160_000  # the job state fits, the first val shard (~16 x 25 KB) does not


def val_args(src: Path, out: str, *extra: str) -> list[str]:
    return ["--val", str(src / "ILSVRC2012_img_val.tar"), "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"),
            "--splits", "val", "--shard-samples", "16", "--out", out, "--quiet", "--workers", "2", *extra]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.strip()


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))


def test_the_atomic_writer_names_the_file_and_the_room_left(tmp_path):
    with small_tmpfs(tmp_path / "small", 64 * 1024) as small:
        with pytest.raises(DiskFull, match=rf"no space left on device writing {small}/big.bin \(.* free there\)"):
            write_atomic(small / "big.bin", b"x" * 200_000)
        assert list(small.iterdir()) == []  # the temp file went first


def test_a_full_out_disk_is_one_line(synthetic_imagenet, tmp_path, capsys):
    with small_tmpfs(tmp_path / "out", ROOM) as out:
        assert prepare_main(val_args(synthetic_imagenet, str(out))) == 2
        err = one_error_line(capsys)
        assert f"no space left on device writing {out}/val/imagenet1k-validation-00000" in err
        assert "free space on that disk, or give an --out on a disk with room" in err
        assert "rerunning the same command resumes" in err
        assert leftovers(out) == [] and not (out / "manifest.json").exists()


@pytest.mark.timeout(120)
def test_a_full_staging_disk_says_give_staging_elsewhere(synthetic_imagenet, s3, tmp_path, capsys):
    with small_tmpfs(tmp_path / "staging", ROOM) as staging:
        assert prepare_main(val_args(synthetic_imagenet, s3.url("shards"), "--staging", str(staging))) == 2
        err = one_error_line(capsys)
        assert f"no space left on device writing {staging}/val/imagenet1k-validation-00000" in err
        assert "give --staging DIR on a disk with room" in err and leftovers(staging) == []
    assert not [k for k in s3.keys("shards/") if k.endswith(".tar")]
