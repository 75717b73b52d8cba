"""The training step and its parts: model, optimizer, AMP, EMA, one epoch, exact evaluation.

Nothing here reads files beyond `--weights`, parses arguments or decides what to run; the trainer
(`imagenet_shards.train.trainer.run`) wires these together.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torchvision
from tqdm import tqdm

from imagenet_shards.train.trainer.distributed import DistInfo, all_reduce_sum
from imagenet_shards.train.trainer.prefetch import DevicePrefetcher
from imagenet_shards.train.trainer.telemetry import MetricsLog, gpu_memory_gib

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": torch.float32}
# Builders that take zero_init_residual (last BN of each block starts at 0: Goyal et al. 2017).
ZERO_INIT_FAMILIES = ("resnet", "resnext", "wide_resnet")
NORM_TYPES = (torch.nn.modules.batchnorm._NormBase, torch.nn.GroupNorm, torch.nn.LayerNorm,
              torch.nn.LocalResponseNorm)


def classification_models() -> list[str]:
    return sorted(torchvision.models.list_models(module=torchvision.models))


def build_model(arch: str, num_classes: int) -> torch.nn.Module:
    """A randomly initialised torchvision classifier by name; ValueError for an unknown name."""
    names = classification_models()
    if arch not in names:
        raise ValueError(f"unknown --arch {arch!r}; torchvision classification models: {', '.join(names)}")
    kwargs = {"zero_init_residual": True} if arch.startswith(ZERO_INIT_FAMILIES) else {}
    return torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **kwargs)


def strip_wrapper_prefixes(state_dict: dict) -> dict:
    """Drop DDP's `module.` and torch.compile's `_orig_mod.` key prefixes."""
    out = {}
    for key, value in state_dict.items():
        for prefix in ("module.", "_orig_mod."):
            while key.startswith(prefix):
                key = key[len(prefix):]
        out[key] = value
    return out


def load_weights(model: torch.nn.Module, path: str) -> None:
    """Load a state dict (or one of our checkpoints' "model") from `path` into `model`.

    Raises ValueError naming the first mismatching keys/shapes; no downloads ever.
    """
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    if not isinstance(state, dict):
        raise ValueError(f"--weights {path}: not a state dict")
    state = strip_wrapper_prefixes(state)
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or wrong:
        parts = []
        if wrong:
            parts.append("shape mismatch: " + ", ".join(
                f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in wrong[:3]))
        if missing:
            parts.append(f"missing {len(missing)} keys (e.g. {', '.join(missing[:3])})")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} keys (e.g. {', '.join(unexpected[:3])})")
        raise ValueError(f"--weights {path} does not fit this model: " + "; ".join(parts))
    model.load_state_dict(state)


def build_optimizer(model: torch.nn.Module, *, lr: float, momentum: float, nesterov: bool,
                    weight_decay: float, no_bn_wd: bool) -> torch.optim.SGD:
    """SGD; with `no_bn_wd`, normalization-layer weights and biases get no weight decay."""
    norm, other = [], []
    for module in model.modules():
        params = [p for p in module.parameters(recurse=False) if p.requires_grad]
        (norm if no_bn_wd and isinstance(module, NORM_TYPES) else other).extend(params)
    groups = [{"params": other, "weight_decay": weight_decay}]
    if norm:
        groups.append({"params": norm, "weight_decay": 0.0})
    return torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0,
                           weight_decay=weight_decay)


def make_autocast(amp: str, device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    """A zero-argument context-manager factory: nullcontext for `none`, else torch.autocast."""
    if amp not in AMP_DTYPES:
        raise ValueError(f"unknown --amp {amp!r} (expected bf16, fp16 or none)")
    if amp == "none":
        return contextlib.nullcontext
    return functools.partial(torch.autocast, device_type=device.type, dtype=AMP_DTYPES[amp])


def make_grad_scaler(amp: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 (bf16 has fp32's range and needs none)."""
    return torch.amp.GradScaler(device.type) if amp == "fp16" else None


class ModelEma:
    """Exponential moving average of a model's weights, kept in fp32 on the same device.

    decay ramps as min(decay, (1 + n) / (10 + n)) over updates n, so short runs get a useful EMA.
    Float buffers (BN running stats) are averaged like weights; integer buffers are copied.
    """

    def __init__(self, model: torch.nn.Module, decay: float):
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.decay = decay
        self.updates = 0

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        ema_float, model_float = [], []
        for ema_t, t in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema_t.is_floating_point():
                ema_float.append(ema_t)
                model_float.append(t.detach())
            else:
                ema_t.copy_(t)
        torch._foreach_lerp_(ema_float, model_float, 1.0 - decay)

    def state_dict(self) -> dict:
        return {"module": self.module.state_dict(), "decay": self.decay, "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state["module"])
        self.updates = int(state["updates"])


@dataclass
class EpochStats:
    """One epoch of training as seen by this rank (loss/acc already averaged over ranks)."""

    steps: int
    images: int            # global: steps x batch x world size
    seconds: float
    loss: float
    acc: float
    wait_s: float
    img_per_s: float
    steady_img_per_s: float  # excludes the first warm-up steps (worker start-up, autotuning)

    @property
    def data_wait_fraction(self) -> float:
        return self.wait_s / self.seconds if self.seconds > 0 else 0.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Interval:
    """Loss/accuracy sums on the device for the steps since the last log line (no host sync)."""

    def __init__(self, device: torch.device):
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self.correct = torch.zeros((), dtype=torch.int64, device=device)
        self.seen, self.wait_s, self.start = 0, 0.0, time.perf_counter()

    def add(self, loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor, wait_s: float) -> None:
        self.loss += loss.detach().double() * labels.shape[0]
        self.correct += (logits.detach().argmax(1) == labels).sum()
        self.seen += labels.shape[0]
        self.wait_s += wait_s


def train_one_epoch(model: torch.nn.Module, batches: DevicePrefetcher, *, optimizer: torch.optim.Optimizer,
                    scheduler, scaler, autocast, criterion, info: DistInfo, epoch: int, step: int,
                    ema: ModelEma | None = None, ema_source: torch.nn.Module | None = None,
                    metrics: MetricsLog | None = None, log_interval: int = 50, res: int | None = None,
                    limit_batches: int | None = None, profiler=None, desc: str = "train") -> EpochStats:
    """Train over `batches` once (at most `limit_batches` steps).

    Losses stay on the device between log intervals (no per-step host sync); every
    `log_interval` steps one "train_interval" record is written and the bar's postfix updated.
    `step` is the global optimizer step before this epoch.
    """
    model.train()
    total = len(batches) if limit_batches is None else min(limit_batches, len(batches))
    device = info.device
    warmup = min(10, total // 4)  # steps left out of steady_img_per_s
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss, correct, seen
    interval = _Interval(device)
    done, images, wait_s = 0, 0, 0.0
    steady_start, steady_images = None, 0
    bar = tqdm(total=total, desc=desc, disable=not info.is_main, dynamic_ncols=True, leave=False)
    start = time.perf_counter()

    def flush() -> None:
        nonlocal interval
        loss_sum, correct = interval.loss.item(), interval.correct.item()  # the host sync
        now = time.perf_counter()
        span = max(now - interval.start, 1e-9)
        lr = optimizer.param_groups[0]["lr"]
        record = dict(epoch=epoch, step=step + done, lr=lr, loss=loss_sum / interval.seen,
                      acc=correct / interval.seen, img_per_s=interval.seen * info.world_size / span,
                      data_wait_fraction=interval.wait_s / span, gpu_mem_gib=gpu_memory_gib(device),
                      res=res)
        if metrics is not None:
            metrics.log("train_interval", **record)
        bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{lr:.3g}", img_s=f"{record['img_per_s']:.0f}",
                        wait=f"{100 * record['data_wait_fraction']:.0f}%")
        sums.add_(torch.tensor([loss_sum, float(correct), float(interval.seen)], dtype=torch.float64,
                               device=device))
        interval = _Interval(device)

    for batch in batches:
        if done == warmup:
            _sync(device)
            steady_start, steady_images = time.perf_counter(), images
        with autocast():
            logits = model(batch.images)
            loss = criterion(logits, batch.targets)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        if ema is not None:
            ema.update(ema_source)
        if profiler is not None:
            profiler.step()
        interval.add(loss, logits, batch.labels, batch.wait_s)
        wait_s += batch.wait_s
        images += batch.labels.shape[0] * info.world_size
        done += 1
        bar.update(1)
        if done % log_interval == 0 or done == total:
            flush()
        if done >= total:
            break
    if interval.seen:  # the loader ended before len() said it would
        flush()
    bar.close()
    _sync(device)
    end = time.perf_counter()
    seconds = end - start
    loss_sum, correct, seen = all_reduce_sum(info, sums).tolist()
    img_per_s = images / max(seconds, 1e-9)
    steady = img_per_s
    if steady_start is not None and images > steady_images:
        steady = (images - steady_images) / max(end - steady_start, 1e-9)
    return EpochStats(steps=done, images=images, seconds=seconds, loss=loss_sum / max(seen, 1),
                      acc=correct / max(seen, 1), wait_s=wait_s, img_per_s=img_per_s,
                      steady_img_per_s=steady)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: DevicePrefetcher, *, autocast, info: DistInfo,
             desc: str = "val") -> dict:
    """Exact top-1/top-5 and mean loss over every sample all ranks see.

    Ranks may run different numbers of batches, so there is no collective per batch: sums of
    (correct@1, correct@5, loss, samples) are reduced once at the end. Pass the unwrapped module,
    not the DDP wrapper (whose forward may sync buffers every call).
    """
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=info.device)  # correct@1, correct@5, loss
    samples = 0  # on the host: a per-batch host->device copy would sync every batch
    criterion = torch.nn.CrossEntropyLoss(reduction="sum")
    for batch in tqdm(batches, desc=desc, disable=not info.is_main, dynamic_ncols=True, leave=False):
        with autocast():
            logits = model(batch.images)
        logits = logits.float()
        k = min(5, logits.shape[1])
        hits = logits.topk(k, dim=1).indices == batch.labels.view(-1, 1)
        sums += torch.stack([hits[:, 0].sum().double(), hits.any(dim=1).sum().double(),
                             criterion(logits, batch.labels).double()])
        samples += batch.labels.shape[0]
    totals = torch.cat([sums, torch.tensor([float(samples)], dtype=torch.float64, device=info.device)])
    top1, top5, loss, samples = all_reduce_sum(info, totals).tolist()
    samples = int(round(samples))
    return {"top1": top1 / max(samples, 1), "top5": top5 / max(samples, 1),
            "loss": loss / max(samples, 1), "samples": samples}
