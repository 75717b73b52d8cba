"""A published recipe (train/recipes: records only) in the trainer: from a recipe, the flags given on
the command line and the world size to a run's config (`resolve`); and from a config to the resolved
recipe as JSON (`describe`: `--show`, RUN_DIR/recipe.json).

Precedence: the trainer's defaults < the recipe's values < explicit flags. A flag that changes one
of the recipe's values is an override, recorded (field -> the recipe's value) in the config, the
start record of metrics.jsonl and recipe.json.

World size (issue 30). The recipe was run on `recipe.world_size` GPUs at `batch_size` per GPU; its
global batch is their product, and its per-GPU batch is what we take a GPU to hold. On W GPUs a
recipe keeps the source's global batch and lr: per-GPU batch = global / W, and where that is not a
whole number or exceeds the source's per-GPU batch, the fewest `--accumulate` N that make it one
(`fit_global_batch`); the note in `recipe_scaling` says so in one line. Only where no N splits it
evenly does the global batch fall short (floor), and the lr follows it. An explicit `--batch-size`
changes the global batch (W x batch x --accumulate) and the peak lr follows it by the recipe's rule:
linear (FFCV and torchvision: lr x global / source global) or sqrt (timm's rule for LAMB); the note
prints this run's and the source's values. An explicit `--lr` is taken as it is. Where the source
states its warmup-start and floor lrs as absolute values (timm), their factors are rescaled so the
absolute values stay. torchvision's EMA decay adjustment
(`ema_adjust`) uses the run's global batch: alpha = min(1, (1 - decay) x global x every / epochs).
"""

from __future__ import annotations

import dataclasses
import math

from imagenet_shards.train.loader.plan import epoch_plan, ra_placement
from imagenet_shards.train.recipes import Recipe, get_recipe
from imagenet_shards.train.trainer.config import TrainError, imagenet_1k_sizes
from imagenet_shards.train.trainer.schedule import default_ramp, run_resolution, schedule_for


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


def fit_global_batch(global_batch: int, world_size: int, gpu_max: int, accumulate: int | None = None):
    """(per-GPU batch, accumulate) that make `global_batch` on `world_size` ranks with at most
    `gpu_max` per GPU and forward: the fewest accumulated batches that divide it evenly; where none
    does, the per-GPU batch floor(global / (W x N)) (the global batch then falls short, said by the
    caller). `accumulate` given: that one, the per-GPU batch as above, None where it would exceed
    `gpu_max` or be empty."""
    if accumulate is not None:
        per = global_batch // (world_size * accumulate)
        return (per, accumulate) if 1 <= per <= gpu_max else None
    least = max(1, math.ceil(global_batch / (world_size * gpu_max)))
    for n in range(least, least + 64):
        if global_batch % (world_size * n) == 0:
            return global_batch // (world_size * n), n
    return max(1, global_batch // (world_size * least)), least


def resolve(recipe: Recipe, *, defaults: dict, explicit: dict, world_size: int) -> dict:
    """TrainConfig keyword arguments for `recipe` run on `world_size` processes: `defaults` (every
    field's default) < the recipe's values < `explicit` (the flags given), then the world-size rule
    (the module docstring). Raises TrainError for an --accumulate that cannot hold the source's
    global batch without --batch-size."""
    kwargs = dict(defaults)
    kwargs.update({name: cited.value for name, cited in recipe.hyper.items()})
    overrides = {name: _plain(recipe.hyper[name].value) for name, value in explicit.items()
                 if name in recipe.hyper and not _same(value, recipe.hyper[name].value)}
    kwargs.update(explicit)
    source_world = int(recipe.world_size.value)
    source_batch = int(recipe.value("batch_size"))
    source_global = source_world * source_batch
    source_lr = float(recipe.value("lr"))
    rule = recipe.scale_rule.value
    if "batch_size" in explicit:  # the user's per-GPU batch: the global batch follows it
        batch, accumulate = int(explicit["batch_size"]), int(explicit.get("accumulate") or 1)
    else:  # the source's global batch, split over this world size
        fit = fit_global_batch(source_global, world_size, source_batch, explicit.get("accumulate"))
        if fit is None:
            raise TrainError(f"--accumulate {explicit['accumulate']} on {world_size} GPU(s) cannot keep {recipe.name}'s "
                             f"global batch {source_global} at most {source_batch} per GPU; give --batch-size too "
                             f"(the global batch and lr then follow it)")
        batch, accumulate = fit
    kwargs["batch_size"], kwargs["accumulate"] = batch, accumulate
    global_batch = world_size * batch * accumulate
    ratio = global_batch / source_global
    if "lr" in explicit:
        lr = float(explicit["lr"])
    else:
        lr = source_lr * (ratio if rule == "linear" else math.sqrt(ratio))
        kwargs["lr"] = lr
    if recipe.absolute_lr_bounds and lr != source_lr:
        for name in ("lr_start_factor", "lr_end_factor"):
            if name not in explicit:
                kwargs[name] = recipe.value(name) * source_lr / lr
    split = f"{world_size} x {batch}" + (f" x {accumulate} accumulated" if accumulate > 1 else "")
    source = f"{source_world} GPU(s) x {source_batch} = {source_global}, lr {source_lr:.4g}"
    lr_how = ("explicit --lr: not scaled" if "lr" in explicit else
              "lr kept" if ratio == 1 else f"lr scaled {rule} with the global batch ({global_batch} / {source_global})")
    if "batch_size" in explicit:
        how = f"--batch-size {batch}: global batch {split} = {global_batch}, {lr_how}"
    elif global_batch == source_global:
        how = f"the source's global batch {source_global} as {split}, {lr_how}"
    else:
        how = (f"the source's global batch {source_global} does not split evenly over {world_size} GPU(s) at most "
               f"{source_batch} per GPU: {split} = {global_batch}, {lr_how}")
    note = None
    if (world_size, batch, accumulate) != (source_world, source_batch, 1) or ratio != 1:
        note = (f"{recipe.name} on {world_size} GPU(s): {how}"
                + (f"; BatchNorm sees {batch} per forward (source {source_batch})" if batch != source_batch else "")
                + f" [source: {source}; this run: global batch {global_batch}, lr {lr:.4g}]")
    scaling = {
        "rule": rule, "how": how, "note": note, "source_world_size": source_world,
        "source_batch_per_gpu": source_batch, "source_global_batch": source_global, "source_lr": source_lr,
        "world_size": world_size, "batch_per_gpu": batch, "accumulate": accumulate, "global_batch": global_batch,
        "lr": lr, "keeps_source_global_batch": global_batch == source_global,
    }
    retimed = int(kwargs["epochs"]) != int(recipe.value("epochs", kwargs["epochs"])) and "ramp_epochs" not in explicit
    ramp = scaled_ramp(recipe, int(kwargs["epochs"])) if retimed else None
    if ramp is not None and kwargs.get("end_res") is not None:
        source_ramp = _plain(recipe.value("ramp_epochs"))
        kwargs["ramp_epochs"] = ramp
        scaling["ramp_epochs"] = {"source": source_ramp, "source_epochs": recipe.value("epochs"), "this_run": list(ramp),
                                  "rule": recipe.ramp_rule.source}
        said = (f"resolution ramp {source_ramp[0]},{source_ramp[1]} of {recipe.value('epochs')} epochs -> "
                f"{ramp[0]},{ramp[1]} of {kwargs['epochs']} (the source's configs' rule)")
        scaling["note"] = f"{scaling['note']}; {said}" if scaling["note"] else f"{recipe.name}: {said}"
    if recipe.ema_adjust and kwargs.get("ema"):
        raw = float(kwargs["ema"])
        kwargs["ema"] = adjusted_ema_decay(raw, global_batch=global_batch, every=int(kwargs.get("ema_every") or 1),
                                           epochs=int(kwargs["epochs"]))
        scaling.update(ema_decay=raw, ema_decay_adjusted=kwargs["ema"])
    if "best_metric" not in explicit:  # the figure the source published, where this run computes it
        metric = recipe.metric.value
        computed = {"ema_val_top1": bool(kwargs.get("ema")), "val_real_top1": bool(kwargs.get("eval_real"))}.get(metric, True)
        kwargs["best_metric"] = metric if computed else "val_top1"
    kwargs.update(recipe=recipe.name, recipe_overrides=overrides, recipe_scaling=scaling)
    return kwargs


def scaled_ramp(recipe: Recipe, epochs: int) -> tuple[int, int] | None:
    """The progressive-resize ramp (start, end epoch) the source's own configs would give `epochs`
    (`recipe.ramp_rule`), or None where the recipe has no such rule."""
    if recipe.ramp_rule is None:
        return None
    start, end, offset = recipe.ramp_rule.value
    a = max(0, math.floor(start * epochs) + offset)
    return a, max(a, math.floor(end * epochs) + offset)


def ramp_warning(config) -> str | None:
    """One line when --end-res is set but no epoch of the run trains above --res's resolution
    (the ramp starts at or after the last epoch), else None."""
    if config.end_res is None or config.end_res == config.res:
        return None
    if any(run_resolution(config, e) != config.res for e in range(config.epochs)):
        return None
    ramp = tuple(config.ramp_epochs) if config.ramp_epochs else default_ramp(config.epochs)
    return (f"--end-res {config.end_res} has no effect: the resolution ramp {ramp[0]},{ramp[1]} starts at or after "
            f"the last of {config.epochs} epochs, so every epoch trains at --res {config.res}; set --ramp-epochs A,B "
            f"with A < {config.epochs - 1}")


def shards_note(config, manifest: dict | None) -> str | None:
    """One line when --data was prepared with another prepare-shards --resize than the one that stores
    the recipe's source data (`Recipe.shards_resize` against the manifest's recorded config), else None."""
    recipe = get_recipe(config.recipe) if config.recipe else None
    want = recipe.shards_resize if recipe else None
    if want is None or manifest is None:
        return None
    have = (manifest.get("config") or {}).get("resize")
    counts = (manifest.get("fixed") or {}).get("counts")
    shrunk = None if counts is None else int(counts.get("resized", 0))
    if have == want.value or (want.value == "none" and shrunk == 0):  # no image shrunk: the originals
        return None
    return (f"note: {recipe.name}'s source trained on the images prepare-shards --resize {want.value} stores; "
            f"--data was prepared with --resize {have or '(not recorded)'}"
            + (f" ({shrunk} image(s) shrunk)" if shrunk is not None else "")
            + ": its crops can differ from the source's (docs/recipes.md, 'Shard settings')")


def steps_per_epoch_for(config, *, world_size: int, num_train: int) -> int:
    """Optimizer steps per epoch of `config` on `world_size` ranks over `num_train` samples: the
    loader's own epoch plan (loader/plan.py) for one rank, divided by --accumulate."""
    plans = epoch_plan([num_train], batch_size=config.batch_size, rank=0, world_size=world_size, workers=1,
                       train=True, repeats=max(1, config.ra_reps), accumulate=max(1, config.accumulate))
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
        "published_metric": recipe.metric.value if recipe else None,
        "published_metric_tta": bool(recipe.value("tta", False)) if recipe else None,
        "best_metric": config.best_metric,
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
        "train_interpolation": config.train_interpolation,
        "val_interpolation": config.val_interpolation,
        "dct_scaling": config.dct_scaling,
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
        "ra_placement": ra_placement(world_size=world_size, repeats=config.ra_reps, accumulate=config.accumulate),
        "ema": None if not config.ema else {"decay": config.ema, "every": config.ema_every, "ramp": config.ema_ramp,
                                            "copy_epochs": config.ema_copy_epochs},
        "amp": config.amp,
        "eval_every": config.eval_every,
        "eval_real": config.eval_real,
        "scaling": config.recipe_scaling,
        "overrides": config.recipe_overrides,
        "what_we_changed": list(recipe.changes) if recipe else [],
        "data": recipe.data if recipe else None,
        "shards_resize": recipe.shards_resize.value if recipe and recipe.shards_resize else None,
        "notes": list(recipe.notes) if recipe else [],
        "cites": {name: cited.source for name, cited in recipe.hyper.items()} if recipe else {},
        "published_cites": {name: cited.source for name, cited in recipe.published.items()} if recipe else {},
    }
    if recipe:
        out["cites"]["world_size"] = recipe.world_size.source
        out["cites"]["scale_rule"] = recipe.scale_rule.source
        out["published_cites"]["metric"] = recipe.metric.source
        if recipe.shards_resize:
            out["cites"]["shards_resize"] = recipe.shards_resize.source
    return out
