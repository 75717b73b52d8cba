"""`train(config)`: the whole run, from the manifest to the last checkpoint.

Before the first step: URLs where only local paths work are refused, node defaults resolved, flags
checked, every listed shard checked for presence and size, and /dev/shm checked for room. Then per
epoch: set resolution and epoch on the loader -> train -> average BN statistics across ranks ->
evaluate (model, then EMA) -> metrics record -> checkpoint-latest (and -best).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from imagenet_shards.pipeline import storage
from imagenet_shards.train.trainer.build import batch_bytes, build, read_dataset
from imagenet_shards.train.trainer.config import TrainConfig, TrainError, check_flags, local_paths, resolve
from imagenet_shards.train.trainer.distributed import DistInfo, gather_objects, init_distributed, print0
from imagenet_shards.train.trainer.prefetch import LoaderError
from imagenet_shards.train.trainer.recipe import shards_note
from imagenet_shards.train.trainer.runner import Run
from imagenet_shards.train.trainer.schedule import run_resolution
from imagenet_shards.train.trainer.state import checkpoint as ckpt
from imagenet_shards.train.trainer.state.lifecycle import Lifecycle, parse_every
from imagenet_shards.train.trainer.state.restore import restore
from imagenet_shards.train.trainer.state.resume import (data_identity, describe_position, fresh_start_problem,
                                                         resume_state, set_aside)
from imagenet_shards.train.trainer.watch import host, preflight

__all__ = ["TrainConfig", "TrainError", "train"]


def _check_data(config: TrainConfig, info: DistInfo, manifest: dict | None) -> None:
    """A run folder rank 0 can write, shards present with their recorded sizes, and room in
    /dev/shm, on every node; all ranks stop together with the first problem any node found
    (TrainError), before the first step."""
    problem = (ckpt.out_problem(config.out) or fresh_start_problem(config)) if info.is_main else None
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
        for note in notes + [host.workers_note(config.workers, host.usable_cores(), info.local_world_size),
                             shards_note(config, manifest)]:
            if note:
                print0(info, note)
    out = Path(config.out)
    if info.is_main:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # out_problem found it writable a moment ago
            raise TrainError(f"cannot create --out {out}: {e.strerror or e}") from None
        stale = ckpt.remove_stale_temps(out)
        if stale:
            print0(info, f"removed {len(stale)} temp file(s) a killed run left in {out} ({', '.join(stale)})")
        aside = set_aside(out) if config.overwrite else None
        if aside is not None:
            print0(info, f"--overwrite: the earlier run's checkpoints and records in {out} moved to {aside}/ "
                         f"(delete it when you no longer need them)")
    every_steps, every_seconds = parse_every(config.checkpoint_every) if config.checkpoint_every else (None, None)
    with Lifecycle(info, every_steps=every_steps, every_seconds=every_seconds, agree_every=config.stop_check_every,
                   stop_deadline=config.stop_deadline) as life, warnings.catch_warnings():
        # said once above (host.workers_note), not per loader, epoch and rank
        warnings.filterwarnings("ignore", message=r"This DataLoader will create \d+ worker processes",
                                category=UserWarning)
        data_id = data_identity(manifest)
        state, state_path, resume_notes = resume_state(config, num_classes, data_id)
        for note in resume_notes:
            print0(info, note)
        start_epoch = state["epoch"] if state else 0
        parts = build(config, info, num_classes, num_train, run_resolution(config, start_epoch))
        step, best_top1 = 0, None
        if state is not None:
            step = restore(parts, state, state_path, config, info)
            best_top1 = state.get("best_top1")
            print0(info, f"resumed from {state_path} at {describe_position(state)}")
        elif config.resume == "auto":
            print0(info, f"--resume auto: no checkpoint in {out} yet, starting from scratch")
        if state is not None and not config.eval_only and not state.get("epoch_step") and start_epoch >= config.epochs:
            # a finished run resumed (a requeue after the end): nothing to train, no second start/final record
            print0(info, f"{state_path} is the end of the run's last epoch ({start_epoch} of --epochs "
                         f"{config.epochs}): nothing left to train (a larger --epochs extends the run)")
            return {**(state.get("metrics") or {}), "weights_sha256": ckpt.state_dict_sha256(parts.raw)}
        try:
            run = Run.open(config, info, parts, life, state=state, state_path=state_path, num_train=num_train,
                           step=step, best_top1=best_top1, start_epoch=start_epoch, real=real, data_id=data_id)
            try:
                return _loop(run)
            finally:
                run.close()
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


def _loop(run: Run) -> dict:
    """The epochs: train, then the epoch's end (evaluation, record, checkpoint); then the final
    record. While the epochs run a signal is the lifecycle's (a checkpoint, then `Stopped`); before
    and after them, the command's own policy (stop at once)."""
    if run.config.eval_only:
        return run.eval_only()
    result: dict = {}
    last = None
    with run.life.deferred(), run.watch():
        for epoch in range(run.start_epoch, run.end):
            last = run.train_epoch(epoch)
            result = run.end_epoch(epoch, last)
    return run.finish(result, last)
