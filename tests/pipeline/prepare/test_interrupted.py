"""Ctrl-C (SIGINT to the whole process group, as a terminal sends it) and SIGTERM to a running
prepare-shards with worker processes: one line, "interrupted; rerun the same command to resume",
exit 130 / 143, no traceback from the main process or the workers, no temp file left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagenet_shards.pipeline.interrupts import MESSAGE


def start(src: Path, out: Path, *extra: str) -> subprocess.Popen:
    """prepare-shards in its own process group, with many small shards so that it runs a while."""
    cmd = [sys.executable, "-m", "imagenet_shards.pipeline.prepare.cli",
           "--train", str(src / "ILSVRC2012_img_train.tar"), "--val", str(src / "ILSVRC2012_img_val.tar"), "--devkit", str(src / "ILSVRC2012_devkit_t12.tar.gz"),
           "--out", str(out), "--shard-samples", "2", "--workers", "2", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def signal_mid_run(proc: subprocess.Popen, out: Path, signum: int) -> tuple[str, str]:
    """Send `signum` to the group once the first shard is recorded (workers busy on the next ones)."""
    deadline = time.monotonic() + 120
    while not list((out / "_prepare" / "records").glob("*.json")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    os.killpg(proc.pid, signum)
    return proc.communicate(timeout=120)


def temp_files(out: Path) -> list[Path]:
    return sorted(out.rglob(".*.tmp"))


@pytest.mark.timeout(240)
def test_ctrl_c_to_the_process_group_is_one_line_and_exit_130(synthetic_imagenet, tmp_path):
    out = tmp_path / "out"
    proc = start(synthetic_imagenet, out)
    stdout, stderr = signal_mid_run(proc, out, signal.SIGINT)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == MESSAGE and stderr.count(MESSAGE) == 1  # after the bars
    assert stdout == "" and temp_files(out) == [] and not (out / "manifest.json").exists()


@pytest.mark.timeout(240)
def test_sigterm_is_exit_143_and_leaves_no_temp_file(synthetic_imagenet, tmp_path):
    out = tmp_path / "out"
    proc = start(synthetic_imagenet, out, "--quiet")
    stdout, stderr = signal_mid_run(proc, out, signal.SIGTERM)
    assert proc.returncode == 143 and stderr == MESSAGE + "\n" and stdout == ""
    assert temp_files(out) == []  # the workers' half-written shards were removed on the way out
    assert list((out / "_prepare" / "records").glob("*.json"))  # what was done stays: the rerun resumes
