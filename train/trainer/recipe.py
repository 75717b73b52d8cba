"""A published recipe (train/recipes: records only) in the trainer: from a recipe, the flags given on
the command line and the world size to a run's config (`resolve`); and from a config to the resolved
recipe as JSON (`describe`: `--show`, RUN_DIR/recipe.json).

Precedence: the trainer's defaults < the recipe's values < explicit flags. A flag that changes one
of the recipe's values is an override, recorded (field -> the recipe's value) in the config, the
start record of metrics.jsonl and recipe.json.

World size. The recipe was run on `recipe.world_size` GPUs at `batch_size` per GPU. On W GPUs we
keep the per-GPU batch (so memory and BatchNorm statistics are the source's) and scale the peak lr
with the global batch W x batch x accumulate, by the recipe's rule: linear (FFCV and torchvision:
lr x global / source global) or sqrt (timm's rule for LAMB). With `--accumulate N` chosen so that
W x N is the source's GPU count, the global batch and the lr are the source's exactly. An explicit
`--lr` is taken as it is. Where the source states its warmup-start and floor lrs as absolute values
(timm), their factors are rescaled so the absolute values stay. torchvision's EMA decay adjustment
(`ema_adjust`) uses the run's global batch: alpha = min(1, (1 - decay) x global x every / epochs).
"""

from __future__ import annotations

import dataclasses
import math

from imagenet_shards.train.loader.plan import epoch_plan
from imagenet_shards.train.recipes import Recipe, get_recipe
from imagenet_shards.train.trainer.config import imagenet_1k_sizes
from imagenet_shards.train.trainer.schedule import run_resolution, schedule_for


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-12)
    return a == b


def _plain(value):
    """JSON's shapes (tuples as lists), so the config, metrics.jsonl and recipe.json hold the same values."""
    return list(value) if isinstance(value, tuple) else value


def adjusted_ema_decay(decay: float, *, global_batch: int, every: int, epochs: int) -> float:
    """torchvision's EMA decay adjustment (references/classification/train.py, after pycls):
    1 - min(1, (1 - decay) * global_batch * every / epochs)."""
    return 1.0 - min(1.0, (1.0 - decay) * global_batch * every / epochs)


def resolve(recipe: Recipe, *, defaults: dict, explicit: dict, world_size: int) -> dict:
    """TrainConfig keyword arguments for `recipe` run on `world_size` processes: `defaults` (every
    field's default) < the recipe's values < `explicit` (the flags given), then the world-size scaling."""
    kwargs = dict(defaults)
    kwargs.update({name: cited.value for name, cited in recipe.hyper.items()})
    overrides = {name: _plain(recipe.hyper[name].value) for name, value in explicit.items()
                 if name in recipe.hyper and not _same(value, recipe.hyper[name].value)}
    kwargs.update(explicit)
    source_world = int(recipe.world_size.value)
    source_batch = int(recipe.value("batch_size"))
    batch, accumulate = int(kwargs["batch_size"]), int(kwargs.get("accumulate") or 1)
    global_batch = world_size * batch * accumulate
    source_global = source_world * source_batch
    source_lr = float(recipe.value("lr"))
    ratio = global_batch / source_global
    rule = recipe.scale_rule.value
    if "lr" in explicit:
        lr, how = float(explicit["lr"]), "explicit --lr: not scaled"
    else:
        lr = source_lr * (ratio if rule == "linear" else math.sqrt(ratio))
        kwargs["lr"] = lr
        how = ("the source's global batch and lr" if ratio == 1 else
               f"per-GPU batch kept, lr scaled {rule} with the global batch ({global_batch} / {source_global})")
    if recipe.absolute_lr_bounds and lr != source_lr:
        for name in ("lr_start_factor", "lr_end_factor"):
            if name not in explicit:
                kwargs[name] = recipe.value(name) * source_lr / lr
    scaling = {
        "rule": rule, "how": how, "source_world_size": source_world, "source_batch_per_gpu": source_batch,
        "source_global_batch": source_global, "source_lr": source_lr, "world_size": world_size,
        "batch_per_gpu": batch, "accumulate": accumulate, "global_batch": global_batch, "lr": lr,
        "to_keep_source_global_batch": _accumulate_hint(source_global, world_size, batch),
    }
    if recipe.ema_adjust and kwargs.get("ema"):
        raw = float(kwargs["ema"])
        kwargs["ema"] = adjusted_ema_decay(raw, global_batch=global_batch, every=int(kwargs.get("ema_every") or 1),
                                           epochs=int(kwargs["epochs"]))
        scaling.update(ema_decay=raw, ema_decay_adjusted=kwargs["ema"])
    kwargs.update(recipe=recipe.name, recipe_overrides=overrides, recipe_scaling=scaling)
    return kwargs


def _accumulate_hint(source_global: int, world_size: int, batch: int) -> str | None:
    """The --accumulate that gives the source's global batch here, when one does."""
    per_step = world_size * batch
    if per_step == source_global:
        return None
    if source_global % per_step == 0:
        return f"--accumulate {source_global // per_step}"
    return f"none at --batch-size {batch} on {world_size} GPU(s) (the source's global batch is {source_global})"


def steps_per_epoch_for(config, *, world_size: int, num_train: int) -> int:
    """Optimizer steps per epoch of `config` on `world_size` ranks over `num_train` samples: the
    loader's own epoch plan (loader/plan.py) for one rank, divided by --accumulate."""
    plans = epoch_plan([num_train], batch_size=config.batch_size, rank=0, world_size=world_size, workers=1,
                       train=True, repeats=max(1, config.ra_reps))
    steps = sum(len(p.batch_sizes) for p in plans) // max(1, config.accumulate)
    return min(steps, config.limit_batches) if config.limit_batches else steps


def _wd_rule(config) -> str:
    return config.wd_exempt or ("norm" if config.no_bn_wd else "none")


def describe(config, *, world_size: int, num_train: int | None = None, steps_per_epoch: int | None = None) -> dict:
    """The fully resolved recipe of `config` as JSON-able data, under stable names (docs/recipes.md);
    without `num_train`, for ImageNet-1k's train split."""
    num_train = imagenet_1k_sizes()[1] if num_train is None else num_train
    recipe = get_recipe(config.recipe) if config.recipe else None
    steps = steps_per_epoch or steps_per_epoch_for(config, world_size=world_size, num_train=num_train)
    schedule = schedule_for(config, max(1, steps))
    lr = config.lr
    wd_rule = _wd_rule(config)
    out = {
        "recipe": config.recipe,
        "title": recipe.title if recipe else None,
        "family": recipe.family if recipe else None,
        "source": recipe.source if recipe else None,
        "published_top1": recipe.published["top1"].value if recipe else None,
        "published_top5": recipe.published["top5"].value if recipe else None,
        "published_real_top1": recipe.published["real_top1"].value if recipe and "real_top1" in recipe.published else None,
        "published_minutes": recipe.published["minutes"].value if recipe else None,
        "published_hardware": recipe.published["hardware"].value if recipe else None,
        "arch": config.arch,
        "epochs": config.epochs,
        "batch_size_per_gpu": config.batch_size,
        "world_size": world_size,
        "accumulate": config.accumulate,
        "global_batch": config.batch_size * world_size * config.accumulate,
        "train_samples": num_train,
        "steps_per_epoch": steps,
        "lr_peak": lr,
        "lr_schedule": {k: v for k, v in dataclasses.asdict(schedule).items() if k != "steps_per_epoch"},
        "lr_at_epoch": schedule.lr_at_epochs(lr) if lr is not None else None,
        "res_at_epoch": [run_resolution(config, e) for e in range(config.epochs)],
        "val_res": config.val_crop,
        "val_resize": None if config.val_crop_ratio else config.val_res,
        "val_crop_ratio": config.val_crop_ratio if config.val_crop_ratio else config.val_crop / config.val_res,
        "val_crop_mode": "ffcv-ratio" if config.val_crop_ratio else "resize-then-crop",
        "tta": config.tta,
        "blurpool": config.blurpool,
        "zero_init_residual": config.zero_init_residual,
        "label_smoothing": config.label_smoothing,
        "weight_decay": config.wd,
        "wd_exempt": wd_rule,
        "bn_weight_decay": config.wd if wd_rule == "none" else 0.0,
        "optimizer": ({"name": "sgd", "momentum": config.momentum, "nesterov": config.nesterov}
                      if config.optimizer == "sgd" else {"name": "lamb", "betas": [0.9, 0.999], "eps": 1e-6,
                                                        "max_grad_norm": 1.0}),
        "loss": {"name": config.loss, "bce_target_thresh": config.bce_target_thresh if config.loss == "bce" else None},
        "mixup": config.mixup,
        "cutmix": config.cutmix,
        "aug": config.aug,
        "random_erase": config.random_erase,
        "random_erase_fill": config.random_erase_fill,
        "ra_reps": config.ra_reps,
        "ema": None if not config.ema else {"decay": config.ema, "every": config.ema_every, "ramp": config.ema_ramp,
                                            "copy_epochs": config.ema_copy_epochs},
        "amp": config.amp,
        "eval_every": config.eval_every,
        "eval_real": config.eval_real,
        "scaling": config.recipe_scaling,
        "overrides": config.recipe_overrides,
        "what_we_changed": list(recipe.changes) if recipe else [],
        "data": recipe.data if recipe else None,
        "notes": list(recipe.notes) if recipe else [],
        "cites": {name: cited.source for name, cited in recipe.hyper.items()} if recipe else {},
        "published_cites": {name: cited.source for name, cited in recipe.published.items()} if recipe else {},
    }
    if recipe:
        out["cites"]["world_size"] = recipe.world_size.source
        out["cites"]["scale_rule"] = recipe.scale_rule.source
    return out
