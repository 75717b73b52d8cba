"""The process group from torchrun's environment, rank-0-only output, and the few collectives we use.

A run without RANK/WORLD_SIZE in the environment is a single process and never touches
torch.distributed, so every helper here also works without a process group.
"""

from __future__ import annotations

import datetime
import inspect
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: global rank, world size, rank and process count on this node, device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def pick_device(kind: str, local_rank: int = 0) -> torch.device:
    """`auto` is CUDA when available, else CPU; `cuda` without a GPU raises RuntimeError."""
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda was asked for but torch sees no CUDA device "
                               "(use --device cpu, or check the driver with nvidia-smi)")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if kind == "cpu":
        return torch.device("cpu")
    raise ValueError(f"unknown device {kind!r} (expected auto, cuda or cpu)")


BACKENDS = ("auto", "nccl", "gloo")


def pick_backend(backend: str, device: torch.device, local_world_size: int, gpus: int) -> str:
    """The process-group backend: `auto` is NCCL on CUDA and gloo on the CPU. RuntimeError (one line)
    for NCCL without CUDA, and for more NCCL ranks on a node than it has GPUs: NCCL puts no two ranks
    on one GPU (its own error, "Duplicate GPU detected", comes only at the first collective)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown --dist-backend {backend!r} (expected {', '.join(BACKENDS)})")
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl" and device.type != "cuda":
        raise RuntimeError("--dist-backend nccl needs CUDA (this run is on the CPU: use gloo, the default there)")
    if backend == "nccl" and local_world_size > gpus:
        raise RuntimeError(f"{local_world_size} ranks on this node but {gpus} GPU(s): NCCL cannot put two ranks on "
                           f"one GPU; start at most {gpus} per node (torchrun --nproc-per-node {gpus}), or share "
                           f"the GPU with --dist-backend gloo (slow; for tests)")
    return backend


def init_distributed(device_kind: str = "auto", timeout_s: float = 1800.0, backend: str = "auto") -> DistInfo:
    """Join the process group torchrun describes (env://): `backend` as `pick_backend` decides.

    Without WORLD_SIZE in the environment (or with WORLD_SIZE=1) nothing is initialised.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    device = pick_device(device_kind, local_rank)
    if world_size > 1:  # checked before any CUDA state is made: a refusal leaves nothing behind
        backend = pick_backend(backend, device, local_world_size,
                               torch.cuda.device_count() if device.type == "cuda" else 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        kwargs = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend=backend, init_method="env://", rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=device,
                    local_world_size=local_world_size)


def shutdown_distributed() -> None:
    """Leave the process group, if one was joined."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def print0(info: DistInfo, *args, **kwargs) -> None:
    """print() on rank 0 only; the one place non-error output leaves a distributed run."""
    if info.is_main:
        print(*args, **kwargs, flush=True)


def barrier(info: DistInfo) -> None:
    """Wait for every rank (a no-op for one process)."""
    if info.distributed:
        dist.barrier()


def all_reduce_sum(info: DistInfo, values: torch.Tensor) -> torch.Tensor:
    """Sum a tensor across ranks (in place, also returned); a no-op for one process."""
    if info.distributed:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def gather_objects(info: DistInfo, obj) -> list:
    """Every rank's picklable object, in rank order, on every rank."""
    if not info.distributed:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def ddp_options() -> dict:
    """DistributedDataParallel's options, named as the installed torch wants them.

    No buffer sync in forward: DDP would otherwise broadcast every buffer from rank 0 before each
    forward (a collective per step); BatchNorm statistics are averaged at epoch ends instead
    (average_buffers), and all ranks start from the same seeded init (so the one sync at init that
    torch >= 2.13's `forward_sync_buffers=False` keeps is harmless; older torch spells it
    `broadcast_buffers=False`, which 2.13 deprecates with a FutureWarning on every rank).
    gradient_as_bucket_view=True: gradients live in the all-reduce buckets, saving a copy and one
    model's worth of memory."""
    params = inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters
    no_sync = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
    return {no_sync: False, "gradient_as_bucket_view": True}


def wrap_ddp(module: torch.nn.Module, info: DistInfo) -> torch.nn.Module:
    """`module` under DistributedDataParallel with `ddp_options()` (the module itself for one process)."""
    if not info.distributed:
        return module
    ids = [info.device.index] if info.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(module, device_ids=ids, **ddp_options())


def average_buffers(info: DistInfo, module: torch.nn.Module) -> None:
    """Make BatchNorm running statistics identical across ranks (float buffers averaged).

    Under DDP each rank updates its running stats from its own batches, so they drift apart within
    an epoch; averaging them at epoch end (timm's `distribute_bn` "reduce") gives every rank the
    same eval model and lets checkpoints from any rank agree.
    """
    if not info.distributed:
        return
    for buf in module.buffers():
        if buf.is_floating_point():
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            buf.div_(info.world_size)
        else:
            dist.broadcast(buf, src=0)

