"""train-imagenet on a run folder it cannot write: a read-only --out, and a disk that fills up while
a checkpoint is saved. One `error:` line naming the path and what to do, exit 2, the previous
checkpoint intact. On a real read-only bind mount and a real small tmpfs (root only; skipped with
the reason elsewhere)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from imagenet_shards.train.trainer.state import checkpoint as ckpt
from tests.fixtures.mounts import read_only_view, resize_tmpfs, small_tmpfs
from tests.fixtures.trainer import TINY, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")
RUN = [*TINY, "--epochs", "2", "--limit-batches", "1"]


def one_error_line(capsys) -> str:
    """stderr less progress bars (and the blanks they leave) must be one `error:` line."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.lstrip().startswith(("epoch ", "val"))]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_a_read_only_out_is_one_line_before_the_first_step(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    with read_only_view(tmp_path / "src", tmp_path / "ro") as ro:
        for out in (ro, ro / "run"):
            assert run_cli("--synthetic-data", "--out", out, *RUN) == 2
            err = one_error_line(capsys)
            assert err == f"error: cannot write to --out {out}: read-only file system; give an --out you can write to"
    assert list((tmp_path / "src").iterdir()) == []


@pytest.mark.timeout(300)
def test_disk_full_while_saving_a_checkpoint_keeps_the_previous_one(tiny_shards, tmp_path, capsys):
    with small_tmpfs(tmp_path / "run", 256 * 2**20) as out:
        assert run_cli("--data", tiny_shards, "--out", out, *RUN, "--stop-after-epochs", "1") == 0
        latest = out / ckpt.LATEST
        before = hashlib.sha256(latest.read_bytes()).hexdigest()
        used = shutil.disk_usage(out).used
        resize_tmpfs(out, used + latest.stat().st_size // 2)  # room for half of the next checkpoint
        capsys.readouterr()
        assert run_cli("--data", tiny_shards, "--out", out, *RUN, "--resume", "auto") == 2
        err = one_error_line(capsys)
        assert f"error: no space left on device writing {latest} (" in err
        assert f"the previous checkpoint-latest.pt is intact; free space there (or copy {out} to a disk" in err
        assert err.endswith("then continue with --resume auto")
        assert hashlib.sha256(latest.read_bytes()).hexdigest() == before
        assert ckpt.load_checkpoint(latest)["epoch"] == 1
        assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
