"""What a CUDA run sets up before its first step, checked on the CPU: the process-group backend
(NCCL, gloo, or a one-line refusal) and the float32 matmul precision (TF32 only for --amp none)."""

from __future__ import annotations

import pytest
import torch

from imagenet_shards.train.trainer import run
from imagenet_shards.train.trainer.config import TrainConfig
from imagenet_shards.train.trainer.distributed import DistInfo, pick_backend
from tests.fixtures.trainer import TINY, run_cli

CUDA0 = torch.device("cuda", 0)


def test_backend_defaults_overrides_and_refusals():
    assert pick_backend("auto", CUDA0, local_world_size=8, gpus=8) == "nccl"
    assert pick_backend("auto", torch.device("cpu"), local_world_size=2, gpus=0) == "gloo"
    assert pick_backend("gloo", CUDA0, local_world_size=2, gpus=1) == "gloo"  # two ranks share one GPU
    with pytest.raises(RuntimeError) as e:
        pick_backend("auto", CUDA0, local_world_size=2, gpus=1)
    msg = str(e.value)
    assert "2 ranks on this node but 1 GPU(s)" in msg and "--nproc-per-node 1" in msg and "gloo" in msg
    assert "\n" not in msg
    with pytest.raises(RuntimeError, match="needs CUDA"):
        pick_backend("nccl", torch.device("cpu"), local_world_size=2, gpus=0)


def test_a_refused_backend_is_one_line_and_exit_2_before_any_process_group(monkeypatch, tmp_path, capsys):
    # torchrun's environment for rank 0 of 2, but no rendezvous: a refusal must come before one is needed
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "2")):
        monkeypatch.setenv(key, value)
    assert run_cli("--synthetic-data", "--out", tmp_path / "run", *TINY, "--dist-backend", "nccl") == 2
    err = capsys.readouterr().err.strip()
    assert err == "[rank 0] error: --dist-backend nccl needs CUDA (this run is on the CPU: use gloo, the default there)"
    assert not torch.distributed.is_initialized()


class _Stop(Exception):
    pass


@pytest.mark.parametrize("amp, precision", [("bf16", "highest"), ("fp16", "highest"), ("none", "high")])
def test_tf32_only_for_amp_none(monkeypatch, amp, precision):
    """Under AMP the float32 matmuls (the --gpu-decode crop's) stay float32: TF32 would break its
    one-grey-level bound. The settings are made right after the device is known."""
    seen = {}
    monkeypatch.setattr(run, "init_distributed", lambda *a, **k: DistInfo(0, 1, 0, CUDA0))

    def stop(config, info):
        seen["precision"] = torch.get_float32_matmul_precision()
        raise _Stop

    monkeypatch.setattr(run, "check_flags", stop)
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark
    try:
        torch.set_float32_matmul_precision("highest")
        with pytest.raises(_Stop):
            run.train(TrainConfig(data=None, out="unused", synthetic_data=True, amp=amp, workers=1))
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.benchmark = before[1]
    assert seen["precision"] == precision
