"""A real 2-process DDP run (torchrun, gloo, CPU) on a tiny shard set.

Checks: it completes; both ranks end with bit-identical weights; evaluation counts every val
sample exactly once; shard counts not divisible by ranks x workers do not hang; a checkpoint
from 2 processes resumes in 1 (world-size change is allowed, with a warning).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.trainer import TINY, run_cli, write_tiny_shards
from imagenet_shards.train.trainer.state import checkpoint as ckpt
from imagenet_shards.train.trainer.watch.telemetry import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[3]
RANK_RESULT = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from imagenet_shards.train.trainer.cli import config_from_argv
    from imagenet_shards.train.trainer.distributed import shutdown_distributed
    from imagenet_shards.train.trainer.run import train
    config, _, _ = config_from_argv(sys.argv[1:])
    result = train(config)
    Path(config.out, f"result-rank{os.environ['RANK']}.json").write_text(json.dumps(result))
    shutdown_distributed()
""")


def _flags(flags: list, name: str, value) -> list:
    """`flags` with --name set to value (replaced if present)."""
    out = list(flags)
    if name in out:
        out[out.index(name) + 1] = value
    else:
        out += [name, value]
    return [str(x) for x in out]


@pytest.mark.timeout(600)
def test_two_process_gloo_run(tmp_path, capsys):
    # train: 60 samples in 5 shards (13,13,13,13,8); val: 20 in 2 shards (13,7) -> neither divides 2 ranks x 2 workers
    data = write_tiny_shards(tmp_path / "shards", classes=4, train_per_class=15, val_per_class=5,
                             shard_samples=13)
    out = tmp_path / "run"
    script = tmp_path / "rank_result.py"
    script.write_text(RANK_RESULT)
    flags = _flags(_flags(TINY, "--workers", 2), "--batch-size", 4)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(script), "--data", str(data), "--out", str(out), *flags, "--epochs", "2", "--amp", "bf16",
           "--ema", "0.9", "--mixup", "0.2", "--warmup-epochs", "0.5"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "Warning" not in proc.stderr, proc.stderr[-3000:]  # no per-rank FutureWarning/UserWarning from torch

    results = [json.loads((out / f"result-rank{r}.json").read_text()) for r in (0, 1)]
    assert results[0]["weights_sha256"] == results[1]["weights_sha256"]
    assert results[0]["val_samples"] == results[1]["val_samples"] == 4 * 5
    assert results[0]["ema_val_samples"] == 20 and results[0]["val_top1"] == results[1]["val_top1"]
    epochs = [r for r in read_metrics(out) if r["kind"] == "epoch"]
    assert len(epochs) == 2 and all(r["val_samples"] == 20 for r in epochs)
    state = ckpt.load_checkpoint(out / ckpt.LATEST)
    assert state["world_size"] == 2 and len(state["rng"]) == 2 and state["epoch"] == 2
    # each rank ran the same number of full batches: 60 samples / 2 ranks / 4 per batch -> <= 7 steps
    assert state["step"] == 2 * epochs[0]["step"] and 1 <= epochs[0]["step"] <= 7

    # the world size may change on resume: one process continues the 2-process run
    assert run_cli("--data", data, "--out", out, *TINY, "--epochs", "3", "--amp", "bf16", "--ema", "0.9",
                   "--mixup", "0.2", "--warmup-epochs", "0.5", "--resume", "auto") == 0
    printed = capsys.readouterr().out
    assert "warning: resuming a 2-process checkpoint with 1 processes" in printed
    state = ckpt.load_checkpoint(out / ckpt.LATEST)
    assert state["world_size"] == 1 and state["epoch"] == 3


def test_ddp_is_built_without_deprecated_options(tmp_path):
    """A real (one-process, gloo) DDP wrap: no FutureWarning, and no buffer broadcast in forward."""
    import warnings

    import torch
    import torch.distributed as dist

    from imagenet_shards.train.trainer.distributed import DistInfo, wrap_ddp

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ddp = wrap_ddp(torch.nn.BatchNorm1d(3), DistInfo(0, 2, 0, torch.device("cpu")))
        assert not [w for w in caught if issubclass(w.category, FutureWarning)], [str(w.message) for w in caught]
        assert getattr(ddp, "forward_sync_buffers", getattr(ddp, "broadcast_buffers", None)) is False
    finally:
        dist.destroy_process_group()
