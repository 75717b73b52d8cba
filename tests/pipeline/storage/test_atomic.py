"""imagenet_shards.pipeline.storage.atomic, the one atomic writer: a file appears whole under its
final name or not at all, temp files are findable and attributable, modes follow the umask."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys

import pytest

from imagenet_shards.pipeline.storage.atomic import (DiskFull, atomic_open, link_atomic, stale_temps, temp_owner,
                                                     temp_path, write_atomic)


@contextlib.contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_replaces_the_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "state.json"
    write_atomic(target, b"old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert stale_temps(target.parent) == [] and os.listdir(target.parent) == ["state.json"]


def test_an_error_inside_the_block_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "shard.tar"
    target.write_bytes(b"old contents")
    with pytest.raises(RuntimeError, match="worker died"):
        with atomic_open(target) as f:
            f.write(b"half of the new contents")
            raise RuntimeError("worker died")
    assert target.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == ["shard.tar"]


def test_a_failing_rename_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "manifest.json"
    target.write_bytes(b"old")

    def no_rename(src, dst):
        raise OSError(28, "No space left on device (test)")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(DiskFull, match=f"no space left on device writing {target} "):  # names the file
        write_atomic(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["manifest.json"]


def test_a_killed_writer_leaves_the_old_file_and_a_temp_that_names_its_owner(tmp_path):
    target = tmp_path / "shard.tar"
    target.write_bytes(b"old")
    code = ("import sys, time\n"
            "from imagenet_shards.pipeline.storage.atomic import atomic_open\n"
            "with atomic_open(sys.argv[1]) as f:\n"
            "    f.write(b'partial'); f.flush(); print('writing', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.read_bytes() == b"old"
    temps = stale_temps(tmp_path, "shard.tar")
    assert len(temps) == 1 and open(temps[0], "rb").read() == b"partial"
    assert temp_owner(temps[0]) == proc.pid
    assert stale_temps(tmp_path, "other.tar") == []  # the pattern selects by target name


def test_temp_names_sit_beside_the_target_and_carry_this_pid(tmp_path):
    tmp = temp_path(tmp_path / "a.json")
    assert os.path.dirname(tmp) == str(tmp_path) and os.path.basename(tmp).startswith(".a.json.")
    assert temp_owner(tmp) == os.getpid()
    assert temp_path(tmp_path / "a.json") != tmp
    assert temp_owner(str(tmp_path / "a.json")) is None and temp_owner("/x/.a.json.notapid-1.tmp") is None


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_follow_the_umask_like_any_other_file(tmp_path, mask, mode):
    with umask(mask):
        write_atomic(tmp_path / "written", b"x")
        with atomic_open(tmp_path / "opened") as f:
            f.write(b"y")
        link_atomic(tmp_path / "written", tmp_path / "linked")
    assert mode_of(tmp_path / "written") == mode_of(tmp_path / "opened") == mode
    assert mode_of(tmp_path / "linked") == mode


def test_link_atomic_makes_an_identical_file(tmp_path):
    (tmp_path / "src").write_bytes(b"checkpoint")
    (tmp_path / "dst").write_bytes(b"older")
    link_atomic(tmp_path / "src", tmp_path / "dst")
    assert (tmp_path / "dst").read_bytes() == b"checkpoint" and stale_temps(tmp_path) == []
