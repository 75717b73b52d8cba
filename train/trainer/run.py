"""`train(config)`: the whole run, from the manifest to the last checkpoint.

Before the first step: URLs where only local paths work are refused, node defaults resolved, flags
checked, every listed shard checked for presence and size, and /dev/shm checked for room. Then per
epoch: set resolution and epoch on the loader -> train -> average BN statistics across ranks ->
evaluate (model, then EMA) -> metrics record -> checkpoint-latest (and -best).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

import torch

from imagenet_shards.pipeline import storage
from imagenet_shards.train.report.verdict import for_run
from imagenet_shards.train.trainer import ceiling, host, midepoch, preflight
from imagenet_shards.train.trainer import checkpoint as ckpt
from imagenet_shards.train.trainer.build import Parts, batch_bytes, build, read_dataset
from imagenet_shards.train.trainer.config import TrainConfig, TrainError, check_flags, local_paths, resolve
from imagenet_shards.train.trainer.distributed import DistInfo, average_buffers, gather_objects, init_distributed, print0
from imagenet_shards.train.trainer.engine import AMP_DTYPES, EpochStats, evaluate, make_autocast, train_one_epoch
from imagenet_shards.train.trainer.lifecycle import Lifecycle, Stopped, parse_every
from imagenet_shards.train.trainer.loss import make_criterion
from imagenet_shards.train.trainer.memory import MemoryWatch, epoch_memory
from imagenet_shards.train.trainer.real import RealLabelsError
from imagenet_shards.train.trainer.prefetch import DeviceAugment, DevicePrefetcher, LoaderError
from imagenet_shards.train.trainer.schedule import run_resolution
from imagenet_shards.train.trainer.resume import data_identity, describe_position
from imagenet_shards.train.trainer.telemetry import MetricsLog, gpu_memory_gib, make_profiler, process_memory, supersede

__all__ = ["TrainConfig", "TrainError", "train"]

LOADER_STATS = ("samples", "batches", "bad_samples", "duplicated", "wait_s", "decode_s", "crop_s",
                "hardware_decodes", "host_decodes")


def _describe(result: dict) -> str:
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


def _check_data(config: TrainConfig, info: DistInfo, manifest: dict | None) -> None:
    """A run folder rank 0 can write, shards present with their recorded sizes, and room in
    /dev/shm, on every node; all ranks stop together with the first problem any node found
    (TrainError), before the first step."""
    problem = ckpt.out_problem(config.out) if info.is_main else None
    if problem is None and manifest is not None and info.local_rank == 0:  # one check per node (own copies)
        splits = ["val"] if config.eval_only else ["train"] if config.no_val else ["train", "val"]
        shards = preflight.listed_shards(manifest, config.data, splits)
        try:
            found = preflight.shard_problems(shards)
        except OSError as e:
            problem = f"cannot check the shards of --data {storage.redact(config.data)}: {storage.redact(e)}"
        else:
            problem = preflight.describe(found, len(shards), config.data) if found else None
    if problem is None and manifest is not None:
        val = batch_bytes(config, manifest, "val") if "val" in manifest["splits"] else 0
        problem = host.shm_error(free=host.shm_free_bytes(), workers=config.workers,
                                 batch_bytes=batch_bytes(config, manifest), local_ranks=info.local_world_size,
                                 val_batch_bytes=val)
    problems = [p for p in gather_objects(info, problem) if p]
    if problems:
        raise TrainError(problems[0])


def _recipe_record(config: TrainConfig, info: DistInfo, out: Path, parts: Parts, num_train: int) -> dict:
    """The start record's recipe fields; with --recipe, RUN_DIR/recipe.json (what --show prints,
    resolved for this run's world size and data) written by rank 0."""
    if not config.recipe:
        return {}
    from imagenet_shards.train.trainer.recipe import describe
    from imagenet_shards.pipeline.storage.atomic import write_atomic
    resolved = describe(config, world_size=info.world_size, num_train=num_train,
                        steps_per_epoch=parts.steps_per_epoch)
    if info.is_main:
        write_atomic(out / "recipe.json", (json.dumps(resolved, indent=1, sort_keys=True) + "\n").encode())
    return {"recipe": config.recipe, "recipe_overrides": config.recipe_overrides,
            "recipe_scaling": config.recipe_scaling}


def _loader_stats(loader, batches: int) -> dict:
    """The loader's counts for the epoch: from its position after the `batches` batches trained on
    (an interrupted epoch's earlier part included) where it keeps one, else its own stats."""
    stats = dict(getattr(loader, "stats", None) or {})
    if midepoch.supports_positions(loader):
        pos = loader.position(batches)
        stats.update(samples=pos["samples"], batches=pos["batches"], bad_samples=pos["bad_samples"],
                     duplicated=pos["duplicated"])
    return {k: stats[k] for k in LOADER_STATS if k in stats}


def _stopped(metrics: MetricsLog, life: Lifecycle, *, epoch: int, epoch_step: int, step: int, cost: dict | None,
             **kw) -> Stopped:
    """The `Stopped` a signal ends the run with, and its `stopped` record (what a requeue script reads)."""
    line = midepoch.stop_line(life.signal, epoch=epoch, epoch_step=epoch_step, step=step, cost=cost, **kw)
    metrics.log("stopped", signal=life.signal, exit_code=life.code, epoch=epoch, epoch_step=epoch_step, step=step,
                checkpoint=cost["path"] if cost else None, line=line)
    return Stopped(line, life.code)


def train(config: TrainConfig) -> dict:
    """Run training (or evaluation) as configured; returns the last epoch's metrics plus
    `weights_sha256` and, when a ceiling is known, `loader_efficiency`.

    Raises TrainError for problems the user can fix (no manifest, wrong checkpoint, no CUDA,
    a damaged shard set...).
    """
    config = local_paths(config)
    if config.data and config.storage_option:
        storage.apply_storage_options(config.data, config.storage_option)
    try:
        info = init_distributed(config.device, backend=config.dist_backend)
    except (RuntimeError, ValueError) as e:
        raise TrainError(str(e)) from None
    config, notes = resolve(config, info)
    if info.device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed shapes per epoch: autotune the convolutions
        if config.amp == "none":  # TF32 where --amp none; not under AMP (the --gpu-decode crop's matmuls stay fp32)
            torch.set_float32_matmul_precision("high")
    check_flags(config, info)
    manifest, num_classes, num_train = read_dataset(config)
    _check_data(config, info, None if config.synthetic_data else manifest)
    real = _real_labels(config, manifest)
    if not config.synthetic_data:
        for note in notes + [host.workers_note(config.workers, host.usable_cores(), info.local_world_size)]:
            if note:
                print0(info, note)
    out = Path(config.out)
    if info.is_main:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # out_problem found it writable a moment ago
            raise TrainError(f"cannot create --out {out}: {e.strerror or e}") from None
    every_steps, every_seconds = parse_every(config.checkpoint_every) if config.checkpoint_every else (None, None)
    with Lifecycle(info, every_steps=every_steps, every_seconds=every_seconds,
                   agree_every=config.stop_check_every) as life, warnings.catch_warnings():
        # said once above (host.workers_note), not per loader, epoch and rank
        warnings.filterwarnings("ignore", message=r"This DataLoader will create \d+ worker processes",
                                category=UserWarning)
        data_id = data_identity(manifest)
        state, state_path, resume_notes = ckpt.resume_state(config, num_classes, data_id)
        for note in resume_notes:
            print0(info, note)
        start_epoch = state["epoch"] if state else 0

        def res_at(epoch: int) -> int:
            return run_resolution(config, epoch)

        parts = build(config, info, num_classes, num_train, res_at(start_epoch))
        step, best_top1 = 0, None
        if state is not None:
            step = ckpt.restore(parts, state, state_path, config, info)
            best_top1 = state.get("best_top1")
            print0(info, f"resumed from {state_path} at {describe_position(state)}")
        elif config.resume == "auto":
            print0(info, f"--resume auto: no checkpoint in {out} yet, starting from scratch")
        try:
            return _run(config, info, parts, start_epoch=start_epoch, step=step, best_top1=best_top1,
                        res_at=res_at, real=real, num_train=num_train, life=life, state=state,
                        state_path=state_path, data_id=data_id)
        except LoaderError as e:
            hint = "" if "audit-shards" in str(e) else f"; run audit-shards {storage.redact(config.data)}"
            raise TrainError(f"{e}{hint}") from None


def _real_labels(config: TrainConfig, manifest: dict | None):
    """The ReaL table for --eval-real, once the shard set is known to fit it (TrainError if not)."""
    if not config.eval_real:
        return None
    from imagenet_shards.train.trainer import real
    try:
        real.check_shard_set(config.data, manifest)
        return real.RealLabels()
    except real.RealLabelsError as e:
        raise TrainError(str(e)) from None


def _eval_due(config: TrainConfig, epoch: int) -> bool:
    """--eval-every N: after every N-th epoch (0: none but the last), and always after the last."""
    return epoch + 1 == config.epochs or (config.eval_every > 0 and (epoch + 1) % config.eval_every == 0)


def _run(config: TrainConfig, info: DistInfo, parts: Parts, *, start_epoch: int, step: int,
         best_top1: float | None, res_at, life: Lifecycle, real=None, num_train: int = 0,
         state: dict | None = None, state_path: Path | None = None, data_id: str | None = None) -> dict:
    out = Path(config.out)
    dtype = AMP_DTYPES[config.amp]
    augment = DeviceAugment(num_classes=parts.num_classes, mixup=config.mixup, cutmix=config.cutmix,
                            random_erase=config.random_erase, erase_fill=config.random_erase_fill)
    train_batches = DevicePrefetcher(parts.train_loader, info.device, dtype=dtype,
                                     channels_last=config.channels_last, aug=augment, seed=config.seed,
                                     rank=info.rank)
    val_batches = None if parts.val_loader is None else DevicePrefetcher(
        parts.val_loader, info.device, dtype=dtype, channels_last=config.channels_last, aug=None)
    autocast = make_autocast(config.amp, info.device)
    criterion = make_criterion(config.loss, label_smoothing=config.label_smoothing,
                               bce_target_threshold=config.bce_target_thresh)
    print0(info, f"{config.arch} on {info.device} x{info.world_size}: {parts.num_classes} classes, global batch "
                 f"{config.batch_size * info.world_size}, lr {parts.lr:.4g} (warmup {config.warmup_epochs:g} "
                 f"epochs), {parts.steps_per_epoch} steps/epoch, amp {config.amp}, channels_last "
                 f"{'on' if config.channels_last else 'off'}")

    def run_eval(epoch: int) -> dict:
        if val_batches is None:
            return {}
        val_batches.set_epoch(epoch)
        kw = dict(autocast=autocast, info=info, tta=config.tta, real=real)
        try:
            result = {f"val_{k}": v for k, v in evaluate(parts.raw, val_batches, **kw).items()}
            if parts.ema is not None:
                result.update({f"ema_val_{k}": v for k, v in evaluate(parts.ema.module, val_batches, desc="val ema",
                                                                       **kw).items()})
        except RealLabelsError as e:  # a val key the start-up check (first key only) did not see
            raise TrainError(str(e)) from None
        return result

    if config.recipe:
        sc = config.recipe_scaling
        hint = sc.get("to_keep_source_global_batch")
        print0(info, f"recipe {config.recipe}: source {sc.get('source_world_size')} GPU(s) x {sc.get('source_batch_per_gpu')}"
                     f" = {sc.get('source_global_batch')}, lr {sc.get('source_lr'):.4g}; this run {info.world_size} x "
                     f"{config.batch_size} x {config.accumulate} = {sc.get('global_batch')}, lr {parts.lr:.4g} "
                     f"({sc.get('how')})" + (f"; for the source's global batch: {hint}" if hint else "")
                     + (f"; overrides: {', '.join(sorted(config.recipe_overrides))}" if config.recipe_overrides else ""))
    resumed: dict = {}
    mid = bool(state and state.get("epoch_step")) and not config.eval_only
    epoch_step, sums = 0, None
    if mid:  # the loader, prefetcher and schedule where the checkpoint left the epoch
        train_batches.set_epoch(start_epoch)
        parts.train_loader.set_resolution(res_at(start_epoch))
        epoch_step, sums, step, resumed = midepoch.resume_epoch(state, config, info, parts, train_batches)
        if not resumed["exact"]:
            print0(info, f"note: continuing epoch {start_epoch + 1} on another layout "
                         f"({', '.join(f'{k} {a} -> {b}' for k, (a, b) in resumed['changed'].items())}): its "
                         f"{resumed['samples_left']} unused samples in {resumed['steps_left']} steps, each once; "
                         f"later epochs as this layout plans them")
        for text in resumed["settings_changed"]:
            print0(info, f"note: {text}: the continuation may differ from an uninterrupted run in the last bits")
    if state is not None and not config.eval_only:
        resumed = {"from": str(state_path), "epoch": int(state["epoch"]), "epoch_step": epoch_step, "step": step,
                   **resumed}
        if info.is_main:  # the killed run's records past the checkpoint (its step numbers) are replaced
            resumed["superseded_records"] = supersede(out, int(state["step"]))
    metrics = MetricsLog(out, enabled=info.is_main, purge_step=int(state["step"]) if state is not None else None)
    cores_per_rank = max(1, host.usable_cores() // max(1, info.local_world_size))
    metrics.log("start", workers=config.workers, world_size=info.world_size, cores_per_rank=cores_per_rank,
                batch_size=config.batch_size, arch=config.arch, device=info.device.type,
                global_batch=config.batch_size * info.world_size * config.accumulate, lr_peak=parts.lr,
                **_recipe_record(config, info, out, parts, num_train), **({"resumed": resumed} if resumed else {}))
    print0(info, f"metrics: {out / 'metrics.jsonl'}; " + (
        f"TensorBoard events: {metrics.tensorboard_dir} (tensorboard --logdir {out})" if metrics.tensorboard_dir
        else "TensorBoard events: off (pip install -e '.[tensorboard]' to write them)")
        + f"; one-page report: report-run {out}")
    try:
        if config.eval_only:
            result = run_eval(start_epoch)
            metrics.log("eval", epoch=start_epoch, step=step, **result)
            print0(info, "eval: " + _describe(result))
            return result
        result: dict = {}
        last: EpochStats | None = None
        res = res_at(start_epoch)
        profiler = make_profiler(config.profile, out / "profile", info.rank, info.device.type == "cuda")
        memory_watch = MemoryWatch()
        end_epoch = config.epochs
        if config.stop_after_epochs:
            end_epoch = min(end_epoch, start_epoch + config.stop_after_epochs)
        with life.deferred():
            for epoch in range(start_epoch, end_epoch):
                res = res_at(epoch)
                parts.train_loader.set_resolution(res)
                if not (mid and epoch == start_epoch):
                    train_batches.set_epoch(epoch)
                    epoch_step, sums = 0, None
                first_step = epoch_step
                profiling = profiler is not None and epoch == start_epoch
                saved: list = []

                def save_mid(done: int, now_sums: list, epoch=epoch, first_step=first_step, base=step) -> None:
                    if config.synthetic_data or not midepoch.supports_positions(parts.train_loader):
                        return
                    batches = (done - first_step) * config.accumulate  # loader batches of this iteration
                    local = midepoch.local_state(parts, train_batches, batches, now_sums)
                    cost = ckpt.save_mid(config, info, parts, epoch=epoch, epoch_step=done,
                                         step=base + done - first_step, local=local,
                                         loader_plan=parts.train_loader.plan_state(), best_top1=best_top1,
                                         data_id=data_id)
                    life.saved()
                    saved.append(cost)
                    if cost is not None:
                        metrics.log("checkpoint", at="mid_epoch", epoch=epoch, epoch_step=done,
                                    step=base + done - first_step, **cost)

                with profiler if profiling else contextlib.nullcontext():
                    last = train_one_epoch(
                        parts.model, train_batches, optimizer=parts.optimizer, scheduler=parts.scheduler,
                        scaler=parts.scaler, autocast=autocast, criterion=criterion, info=info, epoch=epoch,
                        step=step, ema=parts.ema, ema_source=parts.raw, metrics=metrics,
                        log_interval=config.log_interval, res=res, limit_batches=config.limit_batches,
                        profiler=profiler if profiling else None, desc=f"epoch {epoch + 1}/{config.epochs}",
                        accumulate=config.accumulate, ema_every=config.ema_every,
                        steps_per_epoch=parts.steps_per_epoch, epoch_step=first_step, sums=sums, lifecycle=life,
                        checkpoint=save_mid)
                step += last.steps
                if last.stopped:
                    raise _stopped(metrics, life, epoch=epoch, epoch_step=first_step + last.steps, step=step,
                                   cost=saved[-1] if saved else None, mid_supported=midepoch.supports_positions(
                                       parts.train_loader), steps_per_epoch=parts.steps_per_epoch, out=out)
                trained = last.steps * config.accumulate  # loader batches this iteration trained on
                loader = _loader_stats(parts.train_loader, trained)
                memory = epoch_memory()
                average_buffers(info, parts.raw)
                if parts.ema is not None:
                    average_buffers(info, parts.ema.module)
                result = dict(epoch=epoch, step=step, res=res, lr=parts.optimizer.param_groups[0]["lr"],
                              train_loss=last.loss, train_acc=last.acc, img_per_s=last.img_per_s,
                              steady_img_per_s=last.steady_img_per_s, data_wait_fraction=last.data_wait_fraction,
                              epoch_seconds=last.seconds, first_step_seconds=last.first_step_seconds,
                              main_cpu_fraction=last.main_cpu_fraction, gpu_mem_gib=gpu_memory_gib(info.device),
                              **process_memory(), **memory, bad_samples=loader.get("bad_samples"), loader=loader,
                              **({"amp_scale": last.amp_scale, "amp_skipped_steps": last.amp_skipped_steps}
                                 if last.amp_scale is not None else {}),
                              **(run_eval(epoch) if _eval_due(config, epoch) else {}))
                result["data_fingerprint"] = midepoch.epoch_fingerprint(
                    info, parts.train_loader, trained, parts.val_loader if _eval_due(config, epoch) else None)
                metrics.log("epoch", **result)
                print0(info, f"epoch {epoch + 1}/{config.epochs} " + _describe(result))
                growth = memory_watch.observe(epoch, memory)
                if growth:
                    metrics.log("memory_warning", epoch=epoch, step=step, line=growth)
                    print0(info, growth)
                cost = None
                if not config.synthetic_data:
                    best_top1, cost = ckpt.save(config, info, parts, epoch + 1, step, result, best_top1, data_id)
                    life.saved()
                    if cost is not None:
                        metrics.log("checkpoint", at="epoch_end", epoch=epoch + 1, epoch_step=0, step=step, **cost)
                if life.at_epoch_end() and epoch + 1 < end_epoch:
                    raise _stopped(metrics, life, epoch=epoch + 1, epoch_step=0, step=step, cost=cost,
                                   mid_supported=True, steps_per_epoch=parts.steps_per_epoch, out=out)
        result["weights_sha256"] = ckpt.state_dict_sha256(parts.raw)
        if last is not None:
            result.update(ceiling.report_efficiency(config, info, parts, last, res=res, step=step, dtype=dtype,
                                                    autocast=autocast, criterion=criterion, metrics=metrics))
        verdict = for_run(result.get("data_wait_fraction"), real_img_per_s=result.get("steady_img_per_s"),
                          ceiling_img_per_s=result.get("ceiling_img_per_s"), workers=config.workers,
                          cores=cores_per_rank)
        result["loader_verdict"] = verdict.line
        metrics.log("final", **result)
        print0(info, f"loader: {verdict.line}")
        return result
    finally:
        metrics.close()
