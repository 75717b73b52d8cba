"""The training step: AMP, one epoch of steps, and exact evaluation.

Nothing here reads files, parses arguments or decides what to run; the trainer
(`imagenet_shards.train.trainer.run`) wires these together. The step never waits on the device:
losses are summed on it between log intervals, fp16's inf check stays on it (fused SGD), and the
host syncs only at a log line, at the warm-up mark, at a mid-epoch checkpoint and at the epoch end.
"""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass
from typing import Callable

import torch
from tqdm import tqdm

from imagenet_shards.train.trainer.distributed import DistInfo, all_reduce_sum
from imagenet_shards.train.trainer.prefetch import DevicePrefetcher
from imagenet_shards.train.trainer.model import ModelEma, ema_due
from imagenet_shards.train.trainer.state.lifecycle import StopOverdue
from imagenet_shards.train.trainer.watch.telemetry import MetricsLog, gpu_memory_gib, process_cpu_seconds

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": torch.float32}


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


def _found_inf(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
    """1 on the device if the step `scaler.step` just took was skipped (inf/NaN gradients), else 0;
    read between step() and update() without a host sync. None where GradScaler keeps it elsewhere."""
    try:
        found = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
    except (AttributeError, KeyError):
        return None
    return sum(t.float() for t in found.values()) if found else None


@dataclass
class EpochStats:
    """One epoch of training as seen by this rank (loss/acc already averaged over ranks)."""

    steps: int
    images: int              # global: steps x batch x world size
    seconds: float
    loss: float
    acc: float
    wait_s: float
    img_per_s: float
    steady_img_per_s: float  # excludes the first warm-up steps (worker start-up, autotuning)
    first_step_seconds: float = 0.0  # epoch start to the end of step 1: start-up (and compile) time
    main_cpu_seconds: float | None = None  # CPU time of this process (all its threads, no workers)
    amp_scale: float | None = None         # fp16: GradScaler's scale at the end
    amp_skipped_steps: int | None = None   # fp16: steps skipped for inf/NaN gradients
    stopped: bool = False                  # ended early on the lifecycle's stop decision
    overdue: bool = False                  # ... past its deadline, waiting for a batch (StopOverdue)

    @property
    def data_wait_fraction(self) -> float:
        return self.wait_s / self.seconds if self.seconds > 0 else 0.0

    @property
    def main_cpu_fraction(self) -> float | None:
        """Cores' worth of CPU the main process used (near 1.0: the main thread is a bottleneck)."""
        if self.main_cpu_seconds is None or self.seconds <= 0:
            return None
        return self.main_cpu_seconds / self.seconds


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Sums:
    """The epoch's loss and correct-prediction sums so far, on the device (no host sync per step);
    `read()` brings them to the host (at a log line, a checkpoint, the epoch end). One running sum
    per epoch, added to step by step, so an epoch resumed from a checkpoint's sums adds the same
    numbers in the same order: its loss and accuracy come out bit-identical."""

    def __init__(self, device: torch.device, start=(0.0, 0, 0)):
        self.loss = torch.tensor(float(start[0]), dtype=torch.float64, device=device)
        self.correct = torch.tensor(int(start[1]), dtype=torch.int64, device=device)
        self.seen = int(start[2])

    def add(self, loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> None:
        self.loss += loss.detach().double() * labels.shape[0]
        self.correct += (logits.detach().argmax(1) == labels).sum()
        self.seen += labels.shape[0]

    def read(self) -> list:
        """[loss sum, correct, seen] as host numbers (the host sync)."""
        return [self.loss.item(), int(self.correct.item()), self.seen]

    def copy(self) -> "_Sums":
        """The sums now (device copies: no host sync), e.g. at an optimizer step's end."""
        out = _Sums.__new__(_Sums)
        out.loss, out.correct, out.seen = self.loss.clone(), self.correct.clone(), self.seen
        return out


class _Interval:
    """Host-side marks of the last log line: the sums then, and the time and data wait since."""

    def __init__(self, sums: list):
        self.sums, self.wait_s, self.start = list(sums), 0.0, time.perf_counter()


@dataclass
class StepRecord:
    """How an optimizer step is taken, the same for every epoch of a run: what `train_one_epoch` uses.

    With `accumulate` N each optimizer step sums the gradients of N loader batches (each loss
    divided by N; DDP syncs only on the last). The EMA updates after the optimizer steps `ema_due`
    picks (every `ema_every`-th of the epoch). Every `log_interval` steps of the epoch one
    "train_interval" record goes to `metrics`. After each step `lifecycle.after_step` may ask for a
    mid-epoch checkpoint and to stop. `limit_batches` caps the optimizer steps of an epoch."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    scaler: torch.amp.GradScaler | None
    autocast: Callable[[], contextlib.AbstractContextManager]
    criterion: Callable
    info: DistInfo
    ema: ModelEma | None = None
    ema_source: torch.nn.Module | None = None
    metrics: MetricsLog | None = None
    log_interval: int = 50
    accumulate: int = 1
    ema_every: int = 1
    steps_per_epoch: int | None = None
    limit_batches: int | None = None
    lifecycle: object = None


class _Log:
    """The epoch's log lines: a "train_interval" record and the bar's postfix per `log_interval`."""

    def __init__(self, how: StepRecord, *, epoch: int, res: int | None, bar, sums: list):
        self.how, self.epoch, self.res, self.bar = how, epoch, res, bar
        self.interval = _Interval(sums)

    def flush(self, running: _Sums, step: int) -> list:
        """Read the sums (the host sync), log the interval since the last line; returns the sums."""
        how, info = self.how, self.how.info
        now_sums = running.read()
        loss_sum, correct, seen = (a - b for a, b in zip(now_sums, self.interval.sums))
        span = max(time.perf_counter() - self.interval.start, 1e-9)
        lr = how.optimizer.param_groups[0]["lr"]
        if seen:
            record = dict(epoch=self.epoch, step=step, lr=lr, loss=loss_sum / seen, acc=correct / seen,
                          img_per_s=seen * info.world_size / span, data_wait_fraction=self.interval.wait_s / span,
                          gpu_mem_gib=gpu_memory_gib(info.device), res=self.res)
            if how.metrics is not None:
                how.metrics.log("train_interval", **record)
            self.bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{lr:.3g}", img_s=f"{record['img_per_s']:.0f}",
                                 wait=f"{100 * record['data_wait_fraction']:.0f}%")
        self.interval = _Interval(now_sums)
        return now_sums


class _StepStart:
    """What a step's forwards change besides the weights: the model's buffers (BatchNorm running
    statistics) and the torch (and CUDA) random state (dropout). Taken at each step's start under
    --accumulate on one process, and put back before the checkpoint a stop past its deadline writes
    inside a step, so that checkpoint is the last completed step's (an exact resume)."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.device = device
        self.buffers = [b for b in model.buffers()]
        self.saved = [b.detach().clone() for b in self.buffers]
        self.rng: tuple = ()

    def take(self) -> None:
        with torch.no_grad():
            if self.buffers:
                torch._foreach_copy_(self.saved, self.buffers)
        cuda = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        self.rng = (torch.get_rng_state(), cuda)

    def put_back(self) -> None:
        with torch.no_grad():
            if self.buffers:
                torch._foreach_copy_(self.buffers, self.saved)
        torch.set_rng_state(self.rng[0])
        if self.rng[1] is not None:
            torch.cuda.set_rng_state(self.rng[1], self.device)


def _forward_backward(how: StepRecord, batch, last_micro: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One loader batch's forward and backward (DDP's gradient sync only on an optimizer step's last
    batch); returns (loss, logits)."""
    no_sync = getattr(how.model, "no_sync", None)
    with (no_sync() if no_sync is not None and not last_micro else contextlib.nullcontext()):
        with how.autocast():
            logits = how.model(batch.images)
            loss = how.criterion(logits, batch.targets)
        scaled = loss / how.accumulate if how.accumulate > 1 else loss
        if how.scaler is not None:
            how.scaler.scale(scaled).backward()
        else:
            scaled.backward()
    return loss, logits


def _optimizer_step(how: StepRecord, skipped: torch.Tensor | None, *, step: int, epoch: int,
                    steps_per_epoch: int, profiler) -> None:
    """The optimizer step after the gradients are in (fp16: counting a skipped step on the device),
    then the schedule, the EMA when due and the profiler. `step`: global steps done before it."""
    if how.scaler is not None:
        how.scaler.step(how.optimizer)
        found = _found_inf(how.scaler, how.optimizer)
        if found is not None:
            skipped += found
        how.scaler.update()
    else:
        how.optimizer.step()
    if how.scheduler is not None:
        how.scheduler.step()
    if how.ema is not None and ema_due(step, epoch=epoch, steps_per_epoch=steps_per_epoch, every=how.ema_every):
        how.ema.update(how.ema_source, epoch)
    if profiler is not None:
        profiler.step()


def train_one_epoch(batches: DevicePrefetcher, how: StepRecord, *, epoch: int, step: int, res: int | None = None,
                    desc: str = "train", epoch_step: int = 0, sums: list | None = None, profiler=None,
                    checkpoint: Callable[[int, list], None] | None = None) -> EpochStats:
    """Train over `batches` once, each step as `how` says (at most `how.limit_batches` optimizer
    steps of the epoch).

    Losses stay on the device between log intervals (no per-step host sync). `step` is the global
    optimizer step before this call. A resumed epoch passes `epoch_step` (its steps already done;
    `batches` then yields the rest) and `sums` (the loss sums at that point). When the lifecycle
    asks for a mid-epoch checkpoint, `checkpoint(epoch steps done, sums)` writes it; when it says
    stop, the epoch ends (`EpochStats.stopped`). A stop past its deadline while waiting for a batch
    (`StopOverdue` out of the loader) ends it too (`EpochStats.overdue`), with the checkpoint of the
    last completed step (its sums: a copy kept at each step's end under `accumulate`; the model's
    buffers and the torch random state: taken at each step's start, `_StepStart`). The batch
    iterator is closed at the end, also when the epoch ends early (so the loader stops and counts
    what it saw).
    (Over 80 lines: one loop whose host syncs, at the warm-up mark, step 1, a log line, a
    checkpoint and the end, are the point; split further, their order would be hard to see.)
    """
    info, device = how.info, how.info.device
    how.model.train()
    accumulate = max(1, how.accumulate)
    total = len(batches) // accumulate
    if how.limit_batches is not None:
        total = min(how.limit_batches - epoch_step, total)
    steps_per_epoch = how.steps_per_epoch or epoch_step + total
    warmup = min(10, total // 4)  # steps left out of steady_img_per_s
    running = _Sums(device, sums or (0.0, 0, 0))
    skipped = torch.zeros((), dtype=torch.float32, device=device) if how.scaler is not None else None
    done, images, wait_s, first_step, stopped, overdue = 0, 0, 0.0, 0.0, False, False
    at_step = running  # the sums at the last optimizer step's end
    steady_start, steady_images = None, 0
    bar = tqdm(total=epoch_step + total, initial=epoch_step, desc=desc, disable=not info.is_main,
               dynamic_ncols=True, leave=False)
    log = _Log(how, epoch=epoch, res=res, bar=bar, sums=sums or (0.0, 0, 0))
    cpu_start = process_cpu_seconds()
    start = time.perf_counter()
    it = iter(batches)
    micro = 0
    # under DDP a stop past its deadline writes no checkpoint (the other ranks wait in a collective)
    step_start = _StepStart(how.model, device) if accumulate > 1 and checkpoint is not None \
        and not info.distributed else None
    try:
        for batch in it:
            if done == warmup and micro == 0:
                _sync(device)
                steady_start, steady_images = time.perf_counter(), images
            if micro == 0:
                how.optimizer.zero_grad(set_to_none=True)
                if step_start is not None:
                    step_start.take()
            micro += 1
            loss, logits = _forward_backward(how, batch, last_micro=micro == accumulate)
            running.add(loss, logits, batch.labels)
            log.interval.wait_s += batch.wait_s
            wait_s += batch.wait_s
            images += batch.labels.shape[0] * info.world_size
            if micro < accumulate:
                continue
            micro = 0
            _optimizer_step(how, skipped, step=step + done, epoch=epoch, steps_per_epoch=steps_per_epoch,
                            profiler=profiler)
            done += 1
            if accumulate > 1:
                at_step = running.copy()
            if done == 1:
                _sync(device)
                first_step = time.perf_counter() - start
            bar.update(1)
            if (epoch_step + done) % how.log_interval == 0 or done == total:
                log.flush(running, step + done)
            if done >= total:
                break
            decision = how.lifecycle.after_step(step + done) if how.lifecycle is not None else None
            if decision is not None:  # a mid-epoch checkpoint (never at the epoch's last step: its end saves)
                if checkpoint is not None:
                    checkpoint(epoch_step + done, running.read())
                if decision.stop:
                    stopped = True
                    break
    except StopOverdue:  # raised out of the wait for a batch: the model is as the last step left it
        stopped = overdue = True
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
        bar.close()
    if overdue and done and checkpoint is not None:
        if micro and step_start is not None:  # the partial step's forwards moved BatchNorm and the RNG
            step_start.put_back()
        checkpoint(epoch_step + done, at_step.read())
    if running.seen != log.interval.sums[2]:  # the loader ended before len() said it would
        log.flush(running, step + done)
    _sync(device)
    end = time.perf_counter()
    cpu_end = process_cpu_seconds()
    seconds = end - start
    totals = torch.tensor([running.loss.item(), float(running.correct.item()), float(running.seen)],
                          dtype=torch.float64, device=device)
    # past the deadline the other ranks may be waiting for this one in a collective: no reduce then
    loss_sum, correct, seen = (totals if overdue else all_reduce_sum(info, totals)).tolist()
    img_per_s = images / max(seconds, 1e-9)
    steady = img_per_s
    if steady_start is not None and images > steady_images:
        steady = (images - steady_images) / max(end - steady_start, 1e-9)
    return EpochStats(steps=done, images=images, seconds=seconds, loss=loss_sum / max(seen, 1),
                      acc=correct / max(seen, 1), wait_s=wait_s, img_per_s=img_per_s,
                      steady_img_per_s=steady, first_step_seconds=first_step,
                      main_cpu_seconds=None if cpu_start is None or cpu_end is None else cpu_end - cpu_start,
                      amp_scale=float(how.scaler.get_scale()) if how.scaler is not None else None,
                      amp_skipped_steps=int(skipped.item()) if skipped is not None else None,
                      stopped=stopped, overdue=overdue)


def tta_logits(model: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """FFCV's flip test-time augmentation (train_imagenet.py:402-404): the logits of the images plus
    the logits of their horizontal mirror images (a sum, not a mean: top-k is the same)."""
    return model(images) + model(torch.flip(images, dims=[3]))


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: DevicePrefetcher, *, autocast, info: DistInfo,
             desc: str = "val", tta: bool = False, real=None) -> dict:
    """Exact top-1/top-5 and mean loss over every sample all ranks see (with `tta`, of
    `tta_logits`); with `real` (a `real.RealLabels`, batches carrying keys) also ReaL top-1
    (`real_top1` over the `real_samples` images ReaL labels).

    Ranks may run different numbers of batches, so there is no collective per batch: sums of
    (correct@1, correct@5, loss, samples) are reduced once at the end. Pass the unwrapped module,
    not the DDP wrapper (whose forward may sync buffers every call).
    """
    from imagenet_shards.train.trainer.real import real_hits
    model.eval()
    sums = torch.zeros(5, dtype=torch.float64, device=info.device)  # correct@1, correct@5, loss, ReaL hits, ReaL n
    samples = 0  # on the host: a per-batch host->device copy would sync every batch
    criterion = torch.nn.CrossEntropyLoss(reduction="sum")
    with tqdm(batches, desc=desc, disable=not info.is_main, dynamic_ncols=True, leave=False) as bar:
        for batch in bar:
            with autocast():
                logits = tta_logits(model, batch.images) if tta else model(batch.images)
            logits = logits.float()
            k = min(5, logits.shape[1])
            hits = logits.topk(k, dim=1).indices == batch.labels.view(-1, 1)
            real_hit = real_n = torch.zeros((), dtype=torch.float64, device=info.device)
            if real is not None:
                targets = real.targets(batch.keys).to(info.device, non_blocking=True)
                real_hit, real_n = real_hits(logits, targets)
            sums += torch.stack([hits[:, 0].sum().double(), hits.any(dim=1).sum().double(),
                                 criterion(logits, batch.labels).double(), real_hit.double(), real_n.double()])
            samples += batch.labels.shape[0]
    totals = torch.cat([sums, torch.tensor([float(samples)], dtype=torch.float64, device=info.device)])
    top1, top5, loss, real_hit, real_n, samples = all_reduce_sum(info, totals).tolist()
    samples = int(round(samples))
    result = {"top1": top1 / max(samples, 1), "top5": top5 / max(samples, 1),
              "loss": loss / max(samples, 1), "samples": samples}
    if real is not None:
        result.update(real_top1=real_hit / max(real_n, 1), real_samples=int(round(real_n)))
    return result
