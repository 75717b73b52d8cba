"""`Run`: one training run's parts, metrics, lifecycle and config, and the four things its loop does
with them: `train_epoch`, `evaluate`, `save_mid` (what the lifecycle asks for inside an epoch) and
`end_epoch` (statistics, the epoch record, the epoch-end checkpoint, the stop check).

`run.train` builds the parts, opens a `Run` (`Run.open`: the device side of the loaders, a
mid-epoch checkpoint's position, the start record) and loops over the epochs; nothing here parses
arguments or picks a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from imagenet_shards.train.augment.device import DeviceAugment
from imagenet_shards.train.loader import activity
from imagenet_shards.train.loader.plan import ra_placement
from imagenet_shards.train.report.verdict import for_run
from imagenet_shards.train.trainer.build import Parts
from imagenet_shards.train.trainer.config import TrainConfig, TrainError
from imagenet_shards.train.trainer.distributed import DistInfo, average_buffers, print0
from imagenet_shards.train.trainer.engine import AMP_DTYPES, EpochStats, StepRecord, evaluate, make_autocast, train_one_epoch
from imagenet_shards.train.trainer.loss import make_criterion
from imagenet_shards.train.trainer.prefetch import DevicePrefetcher
from imagenet_shards.train.trainer.real import RealLabelsError
from imagenet_shards.train.trainer.schedule import run_resolution
from imagenet_shards.train.trainer.state import checkpoint as ckpt
from imagenet_shards.train.trainer.state.lifecycle import Lifecycle, Stopped, stop_line
from imagenet_shards.train.trainer.state.restore import resume_epoch
from imagenet_shards.train.trainer.state.resume import noted_changes
from imagenet_shards.train.trainer.watch import ceiling, host
from imagenet_shards.train.trainer.watch.memory import MemoryWatch, epoch_memory
from imagenet_shards.train.trainer.watch.stall import StallWatch
from imagenet_shards.train.trainer.watch.telemetry import (MetricsLog, epoch_fingerprint, gpu_memory_gib,
                                                           make_profiler, process_memory, supersede)

LOADER_STATS = ("samples", "batches", "bad_samples", "duplicated", "wait_s", "decode_s", "crop_s",
                "hardware_decodes", "host_decodes")


def describe(result: dict) -> str:
    """An epoch (or evaluation) record as its one printed line."""
    parts = []
    if "train_loss" in result:
        parts.append(f"train loss {result['train_loss']:.4f} acc {100 * result['train_acc']:.2f}%")
    for prefix in ("val", "ema_val"):
        if f"{prefix}_top1" in result:
            parts.append(f"{prefix.replace('_', ' ')} top1 {100 * result[f'{prefix}_top1']:.2f}% "
                         f"top5 {100 * result[f'{prefix}_top5']:.2f}% ({result[f'{prefix}_samples']} images)")
    if "steady_img_per_s" in result:
        parts.append(f"{result['steady_img_per_s']:.1f} img/s, data-wait "
                     f"{100 * result['data_wait_fraction']:.1f}%, res {result['res']}")
    return " | ".join(parts)


def eval_due(config: TrainConfig, epoch: int) -> bool:
    """--eval-every N: after every N-th epoch (0: none but the last), and always after the last."""
    return epoch + 1 == config.epochs or (config.eval_every > 0 and (epoch + 1) % config.eval_every == 0)


def loader_stats(loader, batches: int) -> dict:
    """The loader's counts for the epoch: from its position after the `batches` batches trained on
    (an interrupted epoch's earlier part included) where it keeps one, else its own stats."""
    stats = dict(getattr(loader, "stats", None) or {})
    if ckpt.supports_positions(loader):
        pos = loader.position(batches)
        stats.update(samples=pos["samples"], batches=pos["batches"], bad_samples=pos["bad_samples"],
                     duplicated=pos["duplicated"])
    return {k: stats[k] for k in LOADER_STATS if k in stats}


def _recipe_record(config: TrainConfig, info: DistInfo, out: Path, parts: Parts, num_train: int) -> dict:
    """The start record's recipe fields; with --recipe, RUN_DIR/recipe.json (what --show prints,
    resolved for this run's world size and data) written by rank 0."""
    adapted = {"device_adaptations": config.device_adaptations} if config.device_adaptations else {}
    if not config.recipe:
        return adapted
    from imagenet_shards.train.trainer.recipe import describe as describe_recipe
    from imagenet_shards.pipeline.storage.atomic import write_atomic
    resolved = {**describe_recipe(config, world_size=info.world_size, num_train=num_train,
                                  steps_per_epoch=parts.steps_per_epoch), **adapted}
    if info.is_main:
        write_atomic(out / "recipe.json", (json.dumps(resolved, indent=1, sort_keys=True) + "\n").encode())
    return {"recipe": config.recipe, "recipe_overrides": config.recipe_overrides,
            "recipe_scaling": config.recipe_scaling, **adapted}


def _ra_record(config: TrainConfig, info: DistInfo) -> dict:
    """The start record's repeated-augmentation placement (loader/plan.py ``ra_placement``), with --ra-reps > 1."""
    if config.ra_reps <= 1:
        return {}
    return {"ra_placement": ra_placement(world_size=info.world_size, repeats=config.ra_reps,
                                         accumulate=config.accumulate)}


def summary_line(config: TrainConfig, result: dict, best: float | None) -> str | None:
    """The run's figure in one line: `best_metric` now and at its best (checkpoint-best), beside the
    recipe's published top-1 (which is that metric); None when the run never evaluated it."""
    last = result.get(config.best_metric)
    if last is None and best is None:
        return None
    text = f"{config.best_metric}: {100 * last:.2f} % at the end" if last is not None else f"{config.best_metric}:"
    if best is not None:
        text += f", best {100 * best:.2f} % (checkpoint-best)"
    if config.recipe:
        from imagenet_shards.train.recipes import get_recipe
        text += f"; {config.recipe} published {100 * get_recipe(config.recipe).published['top1'].value:.3g} % as this metric"
    return text


def _print_recipe(config: TrainConfig, info: DistInfo, lr: float) -> None:
    sc = config.recipe_scaling
    print0(info, f"recipe {config.recipe}: source {sc.get('source_world_size')} GPU(s) x {sc.get('source_batch_per_gpu')}"
                 f" = {sc.get('source_global_batch')}, lr {sc.get('source_lr'):.4g}; this run {info.world_size} x "
                 f"{config.batch_size} x {config.accumulate} = {sc.get('global_batch')}, lr {lr:.4g} "
                 f"({sc.get('how')})"
                 + (f"; overrides: {', '.join(sorted(config.recipe_overrides))}" if config.recipe_overrides else ""))


class Run:
    """One run between its start record and its final one (`open` makes it; `close` ends the
    metrics). `step` is the global optimizer step done; `best_top1` the best val top-1 so far."""

    def __init__(self, config: TrainConfig, info: DistInfo, parts: Parts, life: Lifecycle, *, step: int,
                 best_top1: float | None, start_epoch: int, real=None, data_id: str | None = None):
        self.config, self.info, self.parts, self.life = config, info, parts, life
        self.step, self.best_top1, self.start_epoch = step, best_top1, start_epoch
        self.real, self.data_id = real, data_id
        self.out = Path(config.out)
        self.dtype = AMP_DTYPES[config.amp]
        self.autocast = make_autocast(config.amp, info.device)
        self.criterion = make_criterion(config.loss, label_smoothing=config.label_smoothing,
                                        bce_target_threshold=config.bce_target_thresh)
        augment = DeviceAugment(num_classes=parts.num_classes, mixup=config.mixup, cutmix=config.cutmix,
                                random_erase=config.random_erase, erase_fill=config.random_erase_fill)
        self.train_batches = DevicePrefetcher(parts.train_loader, info.device, dtype=self.dtype,
                                              channels_last=config.channels_last, aug=augment, seed=config.seed,
                                              rank=info.rank, keep=max(16, config.accumulate + 2))
        self.val_batches = None if parts.val_loader is None else DevicePrefetcher(
            parts.val_loader, info.device, dtype=self.dtype, channels_last=config.channels_last, aug=None)
        self.end = config.epochs if not config.stop_after_epochs else min(
            config.epochs, start_epoch + config.stop_after_epochs)
        self.cores_per_rank = max(1, host.usable_cores() // max(1, info.local_world_size))
        self.metrics: MetricsLog | None = None
        self.memory_watch = MemoryWatch()
        self.profiler = None
        self.res = self.res_at(start_epoch)   # the resolution of the epoch training (or last trained)
        self.continuing = False          # the first epoch continues a mid-epoch checkpoint
        self._epoch_step, self._sums = 0, None
        self._saved: list = []           # this epoch's mid-epoch checkpoint costs
        self._at = (0, 0, 0)             # (epoch, its first step, global step then) of the epoch training

    @classmethod
    def open(cls, config: TrainConfig, info: DistInfo, parts: Parts, life: Lifecycle, *, state: dict | None,
             state_path: Path | None, num_train: int = 0, **kw) -> "Run":
        """A run at its start: the mid-epoch checkpoint's position taken up, the killed run's records
        past the checkpoint marked superseded, the metrics opened and the start record written."""
        run = cls(config, info, parts, life, **kw)
        print0(info, f"{config.arch} on {info.device} x{info.world_size}: {parts.num_classes} classes, global batch "
                     f"{config.batch_size * info.world_size}, lr {parts.lr:.4g} (warmup {config.warmup_epochs:g} "
                     f"epochs), {parts.steps_per_epoch} steps/epoch, amp {config.amp}, channels_last "
                     f"{'on' if config.channels_last else 'off'}")
        if config.recipe:
            _print_recipe(config, info, parts.lr)
        resumed = run._continue(state) if state and state.get("epoch_step") and not config.eval_only else {}
        if state is not None and not config.eval_only:
            resumed = {"from": str(state_path), "epoch": int(state["epoch"]), "epoch_step": run._epoch_step,
                       "step": run.step, **resumed}
            if info.is_main:  # the killed run's records past the checkpoint (its step numbers) are replaced
                resumed["superseded_records"] = supersede(run.out, int(state["step"]))
        elif config.resume == "auto" and not config.eval_only:
            # a killed run that left no checkpoint: this run starts from step 0, so all its records are replaced
            resumed = {"from": None, "epoch": 0, "epoch_step": 0, "step": 0}
            if info.is_main:
                resumed["superseded_records"] = supersede(run.out, 0)
        run.metrics = MetricsLog(run.out, enabled=info.is_main,
                                 purge_step=int(state["step"]) if state is not None else 0 if resumed else None)
        run.metrics.log("start", workers=config.workers, world_size=info.world_size,
                        cores_per_rank=run.cores_per_rank, batch_size=config.batch_size, arch=config.arch,
                        device=info.device.type, global_batch=config.batch_size * info.world_size * config.accumulate,
                        lr_peak=parts.lr, best_metric=config.best_metric, **_recipe_record(config, info, run.out, parts, num_train),
                        **_ra_record(config, info),
                        **({"resumed": resumed} if resumed else {}))
        print0(info, f"metrics: {run.out / 'metrics.jsonl'}; " + (
            f"TensorBoard events: {run.metrics.tensorboard_dir} (tensorboard --logdir {run.out})"
            if run.metrics.tensorboard_dir else "TensorBoard events: off (pip install -e '.[tensorboard]' to write them)")
            + f"; one-page report: report-run {run.out}")
        if not config.eval_only:
            try:
                run.profiler = make_profiler(config.profile, run.out / "profile", info.rank, info.device.type == "cuda")
            except BaseException:
                run.close()
                raise
        return run

    def _continue(self, state: dict) -> dict:
        """The loader, prefetcher and schedule where a mid-epoch checkpoint left the epoch; returns
        what changed, for the start record."""
        config, info = self.config, self.info
        self.train_batches.set_epoch(self.start_epoch)
        self.parts.train_loader.set_resolution(self.res_at(self.start_epoch))
        self._epoch_step, self._sums, self.step, resumed = resume_epoch(state, config, info, self.parts,
                                                                        self.train_batches)
        self.continuing = True
        if not resumed["exact"]:
            print0(info, f"note: continuing epoch {self.start_epoch + 1} on another layout "
                         f"({', '.join(f'{k} {a} -> {b}' for k, (a, b) in resumed['changed'].items())}): its "
                         f"{resumed['samples_left']} unused samples in {resumed['steps_left']} steps, each once; "
                         f"later epochs as this layout plans them")
        for text in resumed["settings_changed"]:
            print0(info, f"note: {text}: the continuation may differ from an uninterrupted run in the last bits")
        resumed["noted"] = noted_changes(state.get("config") or {}, ckpt.plain(ckpt.saved_config(config)))
        for text in resumed["noted"]:
            print0(info, f"note: {text}")
        return resumed

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()

    def watch(self) -> StallWatch:
        """The stall watch over this run's loaders while the epochs run (warnings, the stop deadline)."""
        prefix = f"[rank {self.info.rank}] " if self.info.distributed else ""
        return StallWatch(self.life, {"train": self.parts.train_loader, "val": self.parts.val_loader},
                          warn_after=self.config.stall_warn, prefix=prefix,
                          min_wait=self.config.stop_deadline if self.info.distributed else 0.0)

    def res_at(self, epoch: int) -> int:
        return run_resolution(self.config, epoch)

    def step_record(self) -> StepRecord:
        config, parts = self.config, self.parts
        return StepRecord(model=parts.model, optimizer=parts.optimizer, scheduler=parts.scheduler,
                          scaler=parts.scaler, autocast=self.autocast, criterion=self.criterion, info=self.info,
                          ema=parts.ema, ema_source=parts.raw, metrics=self.metrics,
                          log_interval=config.log_interval, accumulate=config.accumulate,
                          ema_every=config.ema_every, steps_per_epoch=parts.steps_per_epoch,
                          limit_batches=config.limit_batches, lifecycle=self.life)

    # ------------------------------------------------------------------ the loop's four steps

    def train_epoch(self, epoch: int) -> EpochStats:
        """Train epoch `epoch` (the rest of it, continuing a mid-epoch checkpoint); `Stopped` when the
        lifecycle stopped it (its checkpoint written)."""
        config, parts = self.config, self.parts
        self.res = self.res_at(epoch)
        parts.train_loader.set_resolution(self.res)
        if not (self.continuing and epoch == self.start_epoch):
            self.train_batches.set_epoch(epoch)
            self._epoch_step, self._sums = 0, None
        first_step = self._epoch_step
        self._at, self._saved = (epoch, first_step, self.step), []
        profiler = self.profiler if epoch == self.start_epoch else None
        with profiler if profiler is not None else contextlib.nullcontext():
            last = train_one_epoch(self.train_batches, self.step_record(), epoch=epoch, step=self.step,
                                   res=self.res, desc=f"epoch {epoch + 1}/{config.epochs}",
                                   epoch_step=first_step, sums=self._sums, profiler=profiler,
                                   checkpoint=self.save_mid)
        self.step += last.steps
        overdue = None
        if last.overdue:  # the stop deadline passed waiting for a batch: its checkpoint is written
            killed = activity.kill_workers(parts.train_loader)
            overdue = f"{self.life.overdue_reason}; {len(killed)} loader worker(s) killed"
        if last.stopped:
            raise self._stopped(epoch=epoch, epoch_step=first_step + last.steps,
                                cost=self._saved[-1] if self._saved else None, overdue=overdue,
                                mid_supported=ckpt.supports_positions(parts.train_loader)
                                and not (overdue and self.info.distributed))
        return last

    def save_mid(self, done: int, sums: list) -> None:
        """The mid-epoch checkpoint the lifecycle asked for, `done` steps into the epoch training."""
        config, parts = self.config, self.parts
        if config.synthetic_data or not ckpt.supports_positions(parts.train_loader):
            return
        if self.life.overdue and self.info.distributed:  # the other ranks wait in a collective: no gather
            return
        epoch, first_step, base = self._at
        batches = (done - first_step) * config.accumulate  # loader batches of this iteration
        local = ckpt.local_state(parts, self.train_batches, batches, sums)
        cost = ckpt.save_mid(config, self.info, parts, epoch=epoch, epoch_step=done, step=base + done - first_step,
                             local=local, loader_plan=parts.train_loader.plan_state(), best_top1=self.best_top1,
                             data_id=self.data_id)
        self.life.saved()
        self._saved.append(cost)
        if cost is not None:
            self.metrics.log("checkpoint", at="mid_epoch", epoch=epoch, epoch_step=done,
                             step=base + done - first_step, **cost)

    def evaluate(self, epoch: int) -> dict:
        """Val top-1/top-5/loss of the model and, with one, its EMA ({} without val data)."""
        if self.val_batches is None:
            return {}
        self.val_batches.set_epoch(epoch)
        kw = dict(autocast=self.autocast, info=self.info, tta=self.config.tta, real=self.real)
        try:
            result = {f"val_{k}": v for k, v in evaluate(self.parts.raw, self.val_batches, **kw).items()}
            if self.parts.ema is not None:
                result.update({f"ema_val_{k}": v for k, v in evaluate(self.parts.ema.module, self.val_batches,
                                                                       desc="val ema", **kw).items()})
        except RealLabelsError as e:  # a val key the start-up check (first key only) did not see
            raise TrainError(str(e)) from None
        return result

    def end_epoch(self, epoch: int, last: EpochStats) -> dict:
        """After epoch `epoch` trained: BN statistics averaged, evaluation when due, the epoch record,
        the memory check, the epoch-end checkpoint; `Stopped` when a signal came. Returns the record."""
        config, info, parts = self.config, self.info, self.parts
        trained = last.steps * config.accumulate  # loader batches this iteration trained on
        loader = loader_stats(parts.train_loader, trained)
        memory = epoch_memory()
        average_buffers(info, parts.raw)
        if parts.ema is not None:
            average_buffers(info, parts.ema.module)
        result = self._epoch_record(epoch, last, loader, memory)
        result["data_fingerprint"] = epoch_fingerprint(
            info, parts.train_loader, trained, parts.val_loader if eval_due(config, epoch) else None)
        self.metrics.log("epoch", **result)
        print0(info, f"epoch {epoch + 1}/{config.epochs} " + describe(result))
        growth = self.memory_watch.observe(epoch, memory)
        if growth:
            self.metrics.log("memory_warning", epoch=epoch, step=self.step, line=growth)
            print0(info, growth)
        cost = None
        if not config.synthetic_data:
            self.best_top1, cost = ckpt.save(config, info, parts, epoch + 1, self.step, result, self.best_top1,
                                             self.data_id)
            self.life.saved()
            if cost is not None:
                self.metrics.log("checkpoint", at="epoch_end", epoch=epoch + 1, epoch_step=0, step=self.step, **cost)
        if self.life.at_epoch_end() and epoch + 1 < self.end:
            raise self._stopped(epoch=epoch + 1, epoch_step=0, cost=cost, mid_supported=True)
        return result

    def _epoch_record(self, epoch: int, last: EpochStats, loader: dict, memory: dict) -> dict:
        """The "epoch" record: position, lr, training figures, memory, loader counts, evaluation."""
        amp = {"amp_scale": last.amp_scale, "amp_skipped_steps": last.amp_skipped_steps} \
            if last.amp_scale is not None else {}
        return dict(epoch=epoch, step=self.step, res=self.res, lr=self.parts.optimizer.param_groups[0]["lr"],
                    train_loss=last.loss, train_acc=last.acc, img_per_s=last.img_per_s,
                    steady_img_per_s=last.steady_img_per_s, data_wait_fraction=last.data_wait_fraction,
                    epoch_seconds=last.seconds, first_step_seconds=last.first_step_seconds,
                    main_cpu_fraction=last.main_cpu_fraction, gpu_mem_gib=gpu_memory_gib(self.info.device),
                    **process_memory(), **memory, bad_samples=loader.get("bad_samples"), loader=loader, **amp,
                    **(self.evaluate(epoch) if eval_due(self.config, epoch) else {}))

    def _stopped(self, *, epoch: int, epoch_step: int, cost: dict | None, mid_supported: bool,
                 overdue: str | None = None) -> Stopped:
        """The `Stopped` a signal ends the run with, and its `stopped` record (what a requeue script reads)."""
        life = self.life
        line = stop_line(life.signal, epoch=epoch, epoch_step=epoch_step, step=self.step, cost=cost,
                         mid_supported=mid_supported, steps_per_epoch=self.parts.steps_per_epoch, out=self.out,
                         overdue=overdue)
        self.metrics.log("stopped", signal=life.signal, exit_code=life.code, epoch=epoch, epoch_step=epoch_step,
                         step=self.step, checkpoint=cost["path"] if cost else None, line=line,
                         **({"overdue": overdue} if overdue else {}))
        return Stopped(line, life.code)

    # ------------------------------------------------------------------ the ends

    def eval_only(self) -> dict:
        """--eval-only: one evaluation, its record and line."""
        result = self.evaluate(self.start_epoch)
        self.metrics.log("eval", epoch=self.start_epoch, step=self.step, **result)
        print0(self.info, "eval: " + describe(result))
        return result

    def finish(self, result: dict, last: EpochStats | None) -> dict:
        """The final record: the last epoch's, the weights' sha256, the loader efficiency against the
        ceiling and the loader verdict."""
        config, info = self.config, self.info
        result["weights_sha256"] = ckpt.state_dict_sha256(self.parts.raw)
        if last is not None:
            result.update(ceiling.report_efficiency(config, info, self.parts, last, res=self.res, step=self.step,
                                                    dtype=self.dtype, autocast=self.autocast,
                                                    criterion=self.criterion, metrics=self.metrics))
        verdict = for_run(result.get("data_wait_fraction"), real_img_per_s=result.get("steady_img_per_s"),
                          ceiling_img_per_s=result.get("ceiling_img_per_s"), workers=config.workers,
                          cores=self.cores_per_rank)
        result["loader_verdict"] = verdict.line
        result.update(best_metric=config.best_metric, best_metric_value=self.best_top1)
        self.metrics.log("final", **result)
        line = summary_line(config, result, self.best_top1)
        if line:
            print0(info, line)
        print0(info, f"loader: {verdict.line}")
        return result
