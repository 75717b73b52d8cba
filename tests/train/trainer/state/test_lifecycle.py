"""Ctrl-C (SIGINT to the whole process group, as a terminal sends it) and SIGTERM to a training run
with DataLoader workers: the workers ignore it, the trainer finishes its step, writes a mid-epoch
checkpoint and prints one line; exit 130 / 143, no traceback from the trainer or its workers, no
process of the group left, no temp file. (Resuming from it exactly: test_preemption.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagenet_shards.train.trainer.state import checkpoint as ckpt
from tests.fixtures.trainer import TINY


def start(data: Path, out: Path, *extra: str) -> subprocess.Popen:
    flags = [f for f in TINY if f not in ("--workers", "0")] + ["--workers", "2", "--log-interval", "1"]
    return subprocess.Popen([sys.executable, "-m", "imagenet_shards.train", "--data", str(data), "--out", str(out),
                             *flags, "--epochs", "50", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def signal_mid_epoch(proc: subprocess.Popen, out: Path, signum: int) -> tuple[str, str]:
    """Send `signum` to the group once a training step is logged (the workers are then decoding)."""
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and '"train_interval"' in metrics.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.killpg(proc.pid, signum)
    stdout, stderr = proc.communicate(timeout=120)
    return stdout, stderr


def group_is_gone(pgid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum,code,resume", [
    (signal.SIGINT, 130, ()),
    pytest.param(signal.SIGTERM, 143, ("--resume", "auto"), marks=pytest.mark.slow)])
def test_a_signal_to_the_process_group_is_one_line_and_its_exit_code(tiny_shards, tmp_path, signum, code, resume):
    out = tmp_path / "run"
    proc = start(tiny_shards, out, *resume)
    _, stderr = signal_mid_epoch(proc, out, signum)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "Error" not in stderr and "Exception" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]  # after the epoch bar
    assert last.startswith(f"stopped by {signal.Signals(signum).name} "), stderr
    # mid-epoch as a rule; at an epoch end if the signal came during its last step or its evaluation
    saved = out / (ckpt.MID if " at epoch " in last else ckpt.LATEST)
    assert f"checkpoint {saved} written (" in last and saved.exists(), last
    assert last.endswith("to continue, run the same command with --resume auto") and stderr.count("stopped by") == 1
    assert group_is_gone(proc.pid)  # the DataLoader workers exited too
    assert not list(out.glob(".*.tmp"))
