"""train-imagenet on a run folder it cannot write: a read-only --out, and a disk that fills up while
a checkpoint is saved. One `error:` line naming the path and what to do, exit 2, the previous
checkpoint intact. On a real read-only bind mount and a real small tmpfs (root only; skipped with
the reason elsewhere)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from imagenet_shards.train.trainer.state import checkpoint as ckpt
from tests.fixtures.mounts import read_only_view, resize_tmpfs, small_tmpfs
from tests.fixtures.trainer import TINY, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[4]
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


@pytest.mark.timeout(300)
def test_a_run_folder_with_another_runs_checkpoints_is_refused_unless_overwrite(tiny_shards, tmp_path, capsys):
    """A requeue that forgot --resume loses nothing: one line naming both ways on, exit 2, every file as
    it was; --overwrite moves the earlier run's files aside (nothing mixed, nothing deleted)."""
    out = tmp_path / "run"
    args = ["--data", tiny_shards, "--out", out, *TINY, "--epochs", "1", "--limit-batches", "1"]
    assert run_cli(*args) == 0
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.is_file()}
    assert ckpt.LATEST in before and "metrics.jsonl" in before
    capsys.readouterr()
    assert run_cli(*args) == 2
    err = one_error_line(capsys)
    assert f"--out {out} holds another run's checkpoints (checkpoint-latest.pt" in err, err
    assert "--resume auto" in err and "--overwrite" in err, err
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.is_file()} == before

    assert run_cli(*args, "--overwrite") == 0
    said = capsys.readouterr().out
    aside = [p for p in out.iterdir() if p.name.startswith("replaced-")]
    assert len(aside) == 1 and f"moved to {aside[0]}/" in said, said
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in aside[0].iterdir() if p.is_file()} == before
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records].count("start") == 1  # the new run's records only
    assert ckpt.load_checkpoint(out / ckpt.LATEST)["epoch"] == 1
    assert run_cli(*args, "--overwrite", "--resume", "auto") == 2  # they contradict each other
    assert "--overwrite starts a new run" in one_error_line(capsys)


KILL_IN_SECOND_SAVE = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from imagenet_shards.pipeline.storage.atomic import atomic_open
    from imagenet_shards.train.trainer.cli import main
    from imagenet_shards.train.trainer.state import checkpoint as ckpt

    def killed_mid_write(path, state):  # the epoch-2 save: after its previous <- latest link, mid-write
        path = Path(path)
        if path.name == ckpt.LATEST and path.exists():
            with atomic_open(path) as f:
                f.write(b"half a checkpoint")
                f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
        return real_save(path, state)

    real_save, ckpt.save_checkpoint = ckpt.save_checkpoint, killed_mid_write
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.timeout(300)
def test_sigkill_between_the_previous_link_and_the_new_latest_leaves_no_temp_file(tiny_shards, tmp_path, capsys):
    """A real SIGKILL after `previous <- latest` is linked and before the new latest is renamed in
    leaves the two one file and a temp file; the next run removes the temp (one line), and its saves
    leave no temp file and two distinct checkpoints (issue 29 row 6)."""
    out = tmp_path / "run"
    args = ["--data", tiny_shards, "--out", out, *TINY, "--epochs", "3", "--limit-batches", "1"]
    script = tmp_path / "kill_in_second_save.py"
    script.write_text(KILL_IN_SECOND_SAVE)
    proc = subprocess.run([sys.executable, str(script), *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=240)
    assert proc.returncode == -signal.SIGKILL, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert os.path.samefile(out / ckpt.LATEST, out / ckpt.PREVIOUS)  # the state the kill left
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")]

    assert run_cli(*args, "--resume", "auto") == 0
    said = capsys.readouterr().out
    assert f"removed 1 temp file(s) a killed run left in {out} (.checkpoint-latest.pt." in said, said
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []
    assert not os.path.samefile(out / ckpt.LATEST, out / ckpt.PREVIOUS)
    assert ckpt.load_checkpoint(out / ckpt.LATEST)["epoch"] == 3
    assert ckpt.load_checkpoint(out / ckpt.PREVIOUS)["epoch"] == 2


@pytest.mark.timeout(300)
def test_resuming_a_finished_run_trains_nothing_and_appends_no_second_final(tiny_shards, tmp_path, capsys):
    """A requeue after the run's end (issue 29 row 12): one line, exit 0, metrics.jsonl untouched."""
    out = tmp_path / "run"
    args = ["--data", tiny_shards, "--out", out, *TINY, "--epochs", "1", "--limit-batches", "1"]
    assert run_cli(*args) == 0
    before = (out / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert run_cli(*args, "--resume", "auto") == 0
    assert "nothing left to train" in capsys.readouterr().out
    assert (out / "metrics.jsonl").read_bytes() == before  # no second start or final record
    assert [json.loads(line)["kind"] for line in before.decode().splitlines()].count("final") == 1


@pytest.mark.timeout(300)
def test_a_mid_epoch_checkpoint_is_removed_by_the_next_epoch_end(tiny_shards, tmp_path):
    """checkpoint-mid.pt, once an epoch end is written after it, is only disk (issue 29 row 12)."""
    out = tmp_path / "run"
    assert run_cli("--data", tiny_shards, "--out", out, *TINY, "--epochs", "2", "--limit-batches", "3",
                   "--checkpoint-every", "1steps") == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "checkpoint" and r["at"] == "mid_epoch" for r in records)
    assert not (out / ckpt.MID).exists()
    assert ckpt.load_checkpoint(out / ckpt.LATEST)["epoch"] == 2
