"""What a run is asked to do: `TrainConfig`, the checks on it, and the defaults that depend on the node.

A config comes from the command line or from code. Each field that is a train-imagenet flag says so
with `flag(...)`: its default, help and type, stated once, here; trainer/flags.py makes the parser
from them (the flag is `--` + the field's name with dashes; --help lists them in this order).
`local_paths` refuses URLs where only a local path works, before anything is created; `resolve`
fills the node-dependent defaults (`None` fields) once the device is known; `check_flags` rejects
combinations that cannot run. All three raise `TrainError` (exit code 2) with one line saying what
to do.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from imagenet_shards.pipeline import storage
from imagenet_shards.pipeline.console import WORKERS_RULE, worker_count
from imagenet_shards.train.augment import interpolation as interp
from imagenet_shards.train.augment import policies as augment
from imagenet_shards.train.trainer.watch import host
from imagenet_shards.train.trainer.watch.stall import DEFAULT_STOP_DEADLINE, DEFAULT_WARN_AFTER
from imagenet_shards.train.trainer.distributed import DistInfo
from imagenet_shards.train.trainer.schedule import SCHEDULES

AMP_CHOICES = ("bf16", "fp16", "none")
# The loader's augmentation table is the one list of names (None there is "none" here); timm
# "rand-..." strings are admitted too.
AUG_CHOICES = augment.AugChoices(augment.AUG_NAMES)
# Linear warmup (Goyal et al. 2017) for the linear-scaling-rule lr: 2 epochs (FFCV's ResNet-50
# recipes peak at epoch 2), or a quarter of a shorter run.
DEFAULT_WARMUP_EPOCHS = 2.0
# Arguments that take only a local path, and what to do instead of a URL. Everything here is read or
# written with plain file calls (torch.load/save, the atomic writer, the shard cache's LRU folder).
LOCAL_ONLY = {
    "out": "write the run to a local folder and copy it to the bucket afterwards",
    "cache_dir": "the cache is a local copy of remote shards: give a folder on a local disk",
    "weights": "download the file first and pass its local path",
    "resume": "copy the checkpoint to a local path first (or use --resume auto with a local --out)",
}


def positive_int(text: str) -> int:
    """A positive integer flag value."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """A positive number of seconds (a flag value)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def epoch_pair(text: str) -> tuple[int, int]:
    """'a,b' -> (a, b) for --ramp-epochs."""
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two epochs 'a,b', got {text!r}") from None
    if not 0 <= a <= b:
        raise argparse.ArgumentTypeError(f"expected 0 <= a <= b, got {text!r}")
    return a, b


def flag(default=dataclasses.MISSING, *, help: str | None = None, group: str | None = None,
         add: Callable | None = None, **argparse_kwargs):
    """A TrainConfig field that is also a train-imagenet flag (trainer/flags.py reads this).

    `help` may say the default as `{default}` (and `--recipe`'s the known names as `{recipes}`):
    flags.py fills them in, so the value is written once. `group` starts a --help section at this
    field. `argparse_kwargs` go to add_argument (type, choices, metavar, action); without an action
    a False default is a store_true switch, and without a type an int or float default gives one.
    `add(group)` adds a flag that another module defines (storage.add_storage_option). A list
    default is a fresh list for each config."""
    meta = {"flag": {"help": help, "group": group, "add": add, **argparse_kwargs}}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


class TrainError(Exception):
    """A run that cannot start or continue for a reason the user can fix (exit code 2)."""


@dataclass
class TrainConfig:
    """Everything a run depends on; saved in each checkpoint. Field names match the CLI flags.
    `None` means "the default for this node/run" where the comment says so (see `resolve`)."""

    data: str | None = flag(group="data and run", help="prepare-shards output (holds manifest.json): a directory or a "
                            "URL, s3://bucket/prefix, gs://..., https://host/path")
    out: str = flag(metavar="RUN_DIR", help="run directory: metrics.jsonl, checkpoints, profile (a local path, not a "
                                            "URL); required unless --show")
    recipe: str | None = flag(None, metavar="NAME",  # the published recipe this run follows (train/recipes)
                              help="a published recipe (docs/recipes.md): {recipes}; other flags override its values "
                                   "(recorded as overrides)")
    workers: int | None = flag(None, type=worker_count,  # None: host.default_workers for this node
                               help="loader worker processes per rank (default: the node's usable cores / ranks on "
                                    "the node, less 1 for the training thread and, on CUDA, 1 for the pin-memory "
                                    f"thread; printed at start; {WORKERS_RULE})")
    device: str = flag("auto", choices=("auto", "cuda", "cpu"))
    dist_backend: str = flag("auto", choices=("auto", "nccl", "gloo"),  # distributed.pick_backend
                             help="process-group backend under torchrun (default: NCCL on CUDA, gloo on the CPU); "
                                  "gloo on CUDA lets several ranks share one GPU (slow: for tests)")
    seed: int = flag(0, help="seeds the data order, augmentation and init")
    resume: str | None = flag(None, metavar="auto|PATH", help="continue from a checkpoint (a local path); auto = "
                                                              "RUN_DIR/checkpoint-latest.pt if it exists")
    overwrite: bool = flag(False, help="start afresh in a RUN_DIR that holds another run's checkpoints or records: "
                                       "they are moved to RUN_DIR/replaced-<UTC time>/ first (without it such a "
                                       "RUN_DIR is refused; --resume auto continues that run instead)")
    stop_after_epochs: int | None = flag(None, type=positive_int, metavar="N",
                                         help="stop after N epochs in this invocation (the schedule still spans "
                                              "--epochs); continue later with --resume auto")
    checkpoint_every: str | None = flag(None, metavar="DURATION",  # parsed by lifecycle.parse_every
                                        help="also write RUN_DIR/checkpoint-mid.pt mid-epoch every DURATION: 30m, "
                                             "1.5h, 90s, 2000steps, or both (30m,2000steps). Signals (SIGTERM, "
                                             "SIGUSR1, SIGINT) always write one; --resume auto takes the newest")
    stop_check_every: int = flag(8, type=positive_int, metavar="STEPS",  # lifecycle.py
                                 help="under DDP, steps between the ranks' agreements on a pending stop (default "
                                      "{default}: a stop comes within 16 steps of the signal; each agreement is one "
                                      "async all-reduce of two numbers on the CPU)")
    stop_deadline: float = flag(DEFAULT_STOP_DEADLINE, type=positive_seconds, metavar="SECONDS",  # lifecycle.py, watch/stall.py
                                help="a stop (signal) waits at most SECONDS (default {default}: inside Slurm's KillWait "
                                     "and a pod's grace period, 30 s each) for a loader that delivers nothing: then "
                                     "the last completed step's checkpoint is written and the loader workers killed")
    stall_warn: float = flag(DEFAULT_WARN_AFTER, type=positive_seconds, metavar="SECONDS",  # watch/stall.py
                             help="warn, naming the loader worker and its shard, when no batch came for SECONDS "
                                  "(default {default})")
    eval_only: bool = flag(False, help="evaluate --weights or --resume and exit")
    no_val: bool = flag(False, help="train without evaluating (needed for a --data whose val split is missing or "
                                    "empty; no checkpoint-best then)")
    weights: str | None = flag(None, metavar="FILE",
                               help="initial weights: a state dict or one of our checkpoints (a local path)")
    synthetic_data: bool = flag(False, help="train on device-resident random batches: the model-only img/s ceiling "
                                            "(writes RUN_DIR/synthetic.json, no checkpoints)")
    measure_ceiling: int = flag(0, metavar="STEPS",
                                help="after training, run STEPS synthetic steps and print loader efficiency")
    gpu_decode: bool = flag(False, help="decode JPEGs on the GPU (nvJPEG); needs CUDA")
    profile: int = flag(0, metavar="STEPS",
                        help="torch.profiler trace of STEPS steps of the first epoch -> RUN_DIR/profile/")
    limit_batches: int | None = flag(None, type=positive_int, metavar="N",
                                     help="at most N train steps per epoch (quick checks; schedules use N)")
    log_interval: int = flag(50, type=positive_int, metavar="STEPS",
                             help="steps between metrics.jsonl train records (default {default})")
    cache_dir: str | None = flag(None, metavar="DIR",  # local LRU copy of remote shards (loader/cache.py)
                                 help="keep local copies of remote shards in this local folder (LRU; multi-epoch "
                                      "training from a bucket)")
    cache_size: int | None = flag(None, type=storage.positive_size, metavar="SIZE",  # bytes
                                  help="cap of --cache-dir, e.g. 200GB (default: 90%% of that disk)")
    skip_bad_shards: bool = flag(False, help="a shard whose bytes do not match the manifest's digest: count its "
                                             "samples as bad samples and go on, instead of stopping the run")
    storage_option: list = flag([], add=storage.add_storage_option)  # KEY=VALUE for the --data URL; saved as keys only

    arch: str = flag("resnet50", group="model and optimizer", help="torchvision model name (default {default})")
    epochs: int = flag(16, type=positive_int, help="default {default}")
    batch_size: int = flag(256, type=positive_int, help="per process (default {default})")
    lr: float | None = flag(None, type=float,  # None: default_lr(global batch)
                            help="peak lr (default 0.1 x global batch / 256; with --recipe: the recipe's, scaled to "
                                 "this run's global batch)")
    optimizer: str = flag("sgd", choices=("sgd", "lamb"),  # model.OPTIMIZERS
                          help="sgd (fused on CUDA) or lamb (timm's LAMB: global grad-norm clip 1, trust ratio)")
    momentum: float = flag(0.9, help="SGD momentum (default {default})")
    nesterov: bool = flag(False)
    wd: float = flag(5e-5, help="weight decay (default {default})")
    no_bn_wd: bool = flag(False, help="no weight decay on normalization layers")
    # model.WD_EXEMPT; None: "norm" with --no-bn-wd, else "none"
    wd_exempt: str | None = flag(None, choices=("none", "norm", "bn-name", "1d"),
                                 help="parameters without weight decay: none, norm (normalization layers, = "
                                      "--no-bn-wd), bn-name (names containing 'bn', FFCV), 1d (1-d parameters and "
                                      "biases, timm)")
    label_smoothing: float = flag(0.1, help="default {default}")
    loss: str = flag("ce", choices=("ce", "bce"),  # loss.LOSSES
                     help="ce (cross-entropy) or bce (one sigmoid per class, ResNet Strikes Back)")
    bce_target_thresh: float | None = flag(None, type=float, metavar="T",  # timm's
                                           help="bce: targets above T become 1, the rest 0 (RSB: 0.2)")
    accumulate: int = flag(1, type=positive_int, metavar="N",
                           help="one optimizer step per N loader batches (gradients summed): the global batch x N")
    schedule: str = flag("cosine", choices=SCHEDULES,
                         help="cosine/linear/step: after warmup, per iteration; triangle: FFCV's (per iteration); "
                              "step-epochs, cosine-epochs: torchvision's (per epoch); timm-cosine: timm's (per epoch)")
    lr_peak_epoch: float = flag(2.0, help="triangle: epoch of the peak (default {default})")
    lr_start_factor: float = flag(0.0, metavar="F", help="triangle, cosine-epochs, timm-cosine: the lr at the start, "
                                                         "as a fraction of the peak")
    lr_end_factor: float = flag(0.0, metavar="F", help="triangle: the lr at the end; cosine-epochs, timm-cosine: the "
                                                       "floor; fractions of the peak")
    lr_step_epochs: int = flag(30, type=positive_int, help="step-epochs: decay every N epochs")
    lr_gamma: float = flag(0.1, help="step-epochs: the decay factor")
    warmup_epochs: float | None = flag(None, type=float, metavar="W",  # None: default_warmup(epochs)
                                       help=f"linear lr warmup from lr/steps to lr over W epochs (may be fractional; "
                                            f"0: none). Default {DEFAULT_WARMUP_EPOCHS:g}, or a quarter of --epochs "
                                            f"when that is shorter: the default lr follows the linear scaling rule "
                                            f"(0.8 at global batch 2048), which needs a warmup")
    ema: float | None = flag(None, type=float, metavar="DECAY", help="keep and evaluate an EMA of the weights")
    ema_every: int = flag(1, type=positive_int, metavar="N", help="update the EMA after every N-th optimizer step of "
                                                                  "an epoch (torchvision: 32)")
    ema_ramp: bool = flag(True, action=argparse.BooleanOptionalAction,
                          help="decay min(DECAY, (1+n)/(10+n)) over updates n (default {default}); off: constant "
                               "(torchvision)")
    ema_copy_epochs: int = flag(0, metavar="N", help="copy the weights into the EMA instead of averaging in the first "
                                                     "N epochs (torchvision)")
    zero_init_residual: bool = flag(True, action=argparse.BooleanOptionalAction,
                                    help="ResNets: zero-initialise the last BN of each block (default {default}; "
                                         "torchvision's own is off)")
    blurpool: bool = flag(False, action=argparse.BooleanOptionalAction,  # model.apply_blurpool
                          help="FFCV's BlurPool: a [1,2,1]x[1,2,1]/16 blur before every strided conv with >= 16 inputs")
    sync_bn: bool = flag(False, help="SyncBatchNorm under DDP")
    amp: str = flag("bf16", choices=AMP_CHOICES,
                    help="bf16 autocast, fp16 autocast + GradScaler, or fp32 (default {default})")
    channels_last: bool | None = flag(None, action=argparse.BooleanOptionalAction,  # None: on for CUDA, off on the CPU
                                      help="channels_last memory format (default: on with CUDA, off on the CPU)")
    compile: bool = flag(False, help="torch.compile the model (dynamic=False: one graph per train resolution)")

    res: int = flag(176, type=positive_int, group="resolution and augmentation",
                    help="train resolution (start of the ramp; default {default})")
    end_res: int | None = flag(None, type=positive_int, help="progressive resizing: final train resolution")
    ramp_epochs: tuple[int, int] | None = flag(None, type=epoch_pair, metavar="A,B",  # None: schedule.default_ramp
                                               help="ramp from --res at epoch A to --end-res at epoch B (default "
                                                    "70%%,85%% of --epochs)")
    val_res: int = flag(256, type=positive_int, help="val resize, shorter side (default {default})")
    val_crop: int = flag(224, type=positive_int, help="val center crop (default {default})")
    val_crop_ratio: float | None = flag(None, type=float, metavar="R",
                                        help="FFCV's val crop instead: the centred R x shorter side, resized to "
                                             "--val-crop (FFCV: 0.875)")
    train_interpolation: str = flag("bilinear", choices=interp.TRAIN_INTERPOLATIONS,  # augment/interpolation.py
                                    help="the train crops' resize filter: bilinear or bicubic (Pillow's, "
                                         "antialiased), or random: timm's per-image choice of the two (default "
                                         "{default})")
    val_interpolation: str = flag("bilinear", choices=interp.INTERPOLATIONS,
                                  help="the val crops' resize filter (default {default})")
    dct_scaling: str = flag("auto", choices=("auto", "off"),  # loader/decode.py DCT_SCALINGS
                            help="auto: the CPU loader decodes a JPEG crop at 1/2, 1/4 or 1/8 scale when it stays at "
                                 "least the output size, then resamples; off: always at full size, as torchvision "
                                 "and timm do (closer to their pixels, more CPU; docs/recipes.md; --gpu-decode "
                                 "decodes in full either way) (default {default})")
    tta: bool = flag(False, action=argparse.BooleanOptionalAction,
                     help="evaluate logits(x) + logits(flip(x)) (FFCV's test-time augmentation)")
    eval_every: int = flag(1, metavar="N", help="evaluate after every N-th epoch (0: only the last); the last epoch "
                                                "always")
    eval_real: bool = flag(False, action=argparse.BooleanOptionalAction,  # manifests/imagenet-1k/real_labels.json
                           help="also report ReaL top-1 (needs the original val keys and the ImageNet-1k label space)")
    best_metric: str = flag("val_top1", choices=("val_top1", "ema_val_top1", "val_real_top1"),  # a recipe's `metric`
                            help="the figure checkpoint-best, the run summary and report-run follow (default "
                                 "{default}; with --recipe, the one its published top-1 is)")
    aug: str = flag("none", choices=AUG_CHOICES,
                    help="CPU-side policy applied by the loader workers: ra RandAugment, ta TrivialAugment, ta_wide "
                         "(bilinear, torchvision's reference), aa AutoAugment, jitter ColorJitter, or a timm "
                         "RandAugment string such as rand-m6-mstd0.5-inc1 (not with --gpu-decode)")
    ra_reps: int = flag(1, type=positive_int, metavar="R",  # loader/plan.py
                        help="repeated augmentation: ~1/R of the samples an epoch, each R times (torchvision "
                             "--ra-reps), the copies on different ranks or, on fewer than R with --accumulate, in "
                             "different accumulated batches of a step")
    mixup: float = flag(0.0, metavar="ALPHA")
    cutmix: float = flag(0.0, metavar="ALPHA")
    random_erase: float = flag(0.0, metavar="P")
    random_erase_fill: str = flag("noise", choices=("noise", "zero"),  # timm's "pixel" | torchvision's value=0
                                  help="noise: N(0,1) per pixel (timm); zero: 0 after normalization (torchvision)")

    # not flags: set by --recipe (trainer/recipe.py)
    recipe_overrides: dict = field(default_factory=dict)  # field -> the recipe's value a flag replaced
    recipe_scaling: dict = field(default_factory=dict)    # how the recipe was fitted to this world size
    # not a flag: set by `resolve`: field -> {"recipe": its value, "here": this device's, "why": ...}
    device_adaptations: dict = field(default_factory=dict)


def imagenet_1k_sizes() -> tuple[int, int]:
    """(classes, train samples) of ImageNet-1k, from manifests/imagenet-1k (its class table and split
    sizes): what --show assumes without data, and what sizes a --synthetic-data run without --data."""
    from imagenet_shards.pipeline.format.classes import imagenet_1k_classes, imagenet_1k_facts

    return len(imagenet_1k_classes()), int(imagenet_1k_facts()["splits"]["train"]["num_samples"])


def default_warmup(epochs: int) -> float:
    """Warmup epochs when --warmup-epochs is not given: 2, or a quarter of a shorter run."""
    return min(DEFAULT_WARMUP_EPOCHS, epochs / 4)


def local_paths(config: TrainConfig) -> TrainConfig:
    """`config` with file:// URLs of the local-only arguments turned into paths; TrainError for any
    other URL there (checked before anything is created: `--out s3://b/r` must not make ./s3:/b/r)."""
    changes = {}
    for name, instead in LOCAL_ONLY.items():
        value = getattr(config, name)
        if value is None or (name == "resume" and value == "auto"):
            continue
        path = storage.local_path(value)
        if path is None:
            flag = "--" + name.replace("_", "-")
            raise TrainError(f"{flag} takes a local path, not a URL ({storage.redact(value)}): {instead}")
        if path != value:
            changes[name] = path
    return dataclasses.replace(config, **changes) if changes else config


def resolve(config: TrainConfig, info: DistInfo, cores: int | None = None) -> tuple[TrainConfig, list[str]]:
    """Fill the `None` defaults for this node and device; returns the config and one line per
    default chosen from the machine (for the log)."""
    notes = []
    changes: dict = {}
    cuda = info.device.type == "cuda"
    if config.workers is None:
        cores = host.usable_cores() if cores is None else cores
        changes["workers"] = host.default_workers(cores, info.local_world_size, cuda)
        minus = "the training and pin-memory threads" if cuda else "the training thread"
        notes.append(f"--workers {changes['workers']} per rank (default: {cores} usable cores / "
                     f"{info.local_world_size} rank(s) on this node, less {minus}; set --workers to change)")
    if config.channels_last is None:
        changes["channels_last"] = cuda
    if config.warmup_epochs is None:
        changes["warmup_epochs"] = default_warmup(config.epochs)
    if config.amp == "fp16" and not cuda and config.recipe and "amp" not in config.recipe_overrides:
        # measured (issue 29, CPU): fp16 autocast 0.8-0.9 img/s against 63-78 with bf16 or none; bf16 is
        # the CPU's own default and, like fp16, reduced-precision autocast (no GradScaler needed)
        changes["amp"] = "bf16"
        changes["device_adaptations"] = {**config.device_adaptations, "amp": {
            "recipe": "fp16", "here": "bf16", "why": f"no fast fp16 on {info.device.type}"}}
        notes.append(f"note: recipe {config.recipe}'s --amp fp16 runs as bf16 here (no fast fp16 on the "
                     f"{info.device.type}: ~1 img/s against ~70); recorded as a device adaptation (the start "
                     f"record's and recipe.json's device_adaptations)")
    return dataclasses.replace(config, **changes), notes


def check_flags(config: TrainConfig, info: DistInfo) -> None:
    """TrainError for flag combinations that cannot run on this device."""
    if config.gpu_decode and info.device.type != "cuda":
        raise TrainError("--gpu-decode needs CUDA (this run is on the CPU; drop --gpu-decode)")
    if config.eval_only and not (config.weights or config.resume):
        raise TrainError("--eval-only needs --weights FILE or --resume auto|PATH")
    if config.eval_only and config.no_val:
        raise TrainError("--eval-only evaluates on the val split: drop --no-val")
    if config.amp not in AMP_CHOICES:
        raise TrainError(f"unknown --amp {config.amp!r} (expected bf16, fp16 or none)")
    if not config.data and not config.synthetic_data:
        raise TrainError("--data DIR is needed (a prepare-shards output with manifest.json), or --synthetic-data")
    if config.gpu_decode and config.aug != "none":
        raise TrainError(f"--aug {config.aug} is a CPU-side policy that --gpu-decode does not apply; "
                         f"drop one of them")
    if config.workers is not None and config.workers < 0:
        raise TrainError(f"--workers must be >= 0, got {config.workers}")
    if config.gpu_decode:
        unsupported = [flag for flag, on in (("--ra-reps", config.ra_reps > 1), ("--val-crop-ratio", config.val_crop_ratio),
                                             ("--eval-real", config.eval_real)) if on]
        if unsupported:
            raise TrainError(f"--gpu-decode's loader does not do {', '.join(unsupported)}; drop one of them")
    if config.eval_real and config.synthetic_data:
        raise TrainError("--eval-real needs --data (a val split with the original val keys), not --synthetic-data")
    needs = {"ema_val_top1": ("--ema", config.ema), "val_real_top1": ("--eval-real", config.eval_real)}.get(config.best_metric)
    if needs and not needs[1]:
        raise TrainError(f"--best-metric {config.best_metric} needs {needs[0]} (or choose --best-metric val_top1)")
    if config.checkpoint_every:
        from imagenet_shards.train.trainer.state.lifecycle import parse_every
        try:
            parse_every(config.checkpoint_every)
        except ValueError as e:
            raise TrainError(str(e)) from None
        if config.gpu_decode or config.synthetic_data:
            flag = "--gpu-decode" if config.gpu_decode else "--synthetic-data"
            raise TrainError(f"--checkpoint-every needs the CPU loader's position; {flag} runs checkpoint at "
                             f"epoch ends only (drop one of them)")
    if config.overwrite and (config.resume or config.eval_only):
        raise TrainError("--overwrite starts a new run; it does not go with --resume or --eval-only (drop one)")
    if config.stop_check_every < 1:
        raise TrainError(f"--stop-check-every must be >= 1, got {config.stop_check_every}")
    for name in ("stop_deadline", "stall_warn"):
        if not getattr(config, name) > 0:
            raise TrainError(f"--{name.replace('_', '-')} must be a positive number of seconds, got {getattr(config, name)}")
