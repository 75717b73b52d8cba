"""What a run is asked to do: `TrainConfig`, the checks on it, and the defaults that depend on the node.

A config comes from the command line (field names match the flags) or from code. `local_paths`
refuses URLs where only a local path works, before anything is created; `resolve` fills the
node-dependent defaults (`None` fields) once the device is known; `check_flags` rejects
combinations that cannot run. All three raise `TrainError` (exit code 2) with one line saying what
to do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from imagenet_shards.pipeline import storage
from imagenet_shards.train.trainer.watch import host
from imagenet_shards.train.trainer.distributed import DistInfo

AMP_CHOICES = ("bf16", "fp16", "none")
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


class TrainError(Exception):
    """A run that cannot start or continue for a reason the user can fix (exit code 2)."""


@dataclass
class TrainConfig:
    """Everything a run depends on; saved in each checkpoint. Field names match the CLI flags.
    `None` means "the default for this node/run" where the comment says so (see `resolve`)."""

    data: str | None
    out: str
    arch: str = "resnet50"
    epochs: int = 16
    batch_size: int = 256                    # per process
    lr: float | None = None                  # None: default_lr(global batch)
    momentum: float = 0.9
    nesterov: bool = False
    wd: float = 5e-5
    no_bn_wd: bool = False
    label_smoothing: float = 0.1
    schedule: str = "cosine"
    warmup_epochs: float | None = None       # None: default_warmup(epochs)
    res: int = 176
    end_res: int | None = None
    ramp_epochs: tuple[int, int] | None = None
    val_res: int = 256
    val_crop: int = 224
    amp: str = "bf16"
    channels_last: bool | None = None        # None: on for CUDA, off on the CPU
    compile: bool = False
    ema: float | None = None
    mixup: float = 0.0
    cutmix: float = 0.0
    aug: str = "none"
    random_erase: float = 0.0
    workers: int | None = None               # None: host.default_workers for this node
    device: str = "auto"
    dist_backend: str = "auto"               # auto: NCCL on CUDA, gloo on the CPU (distributed.pick_backend)
    resume: str | None = None
    eval_only: bool = False
    no_val: bool = False                     # train without evaluating (a shard set without val samples)
    synthetic_data: bool = False
    profile: int = 0
    seed: int = 0
    weights: str | None = None
    gpu_decode: bool = False
    sync_bn: bool = False
    limit_batches: int | None = None
    stop_after_epochs: int | None = None
    measure_ceiling: int = 0
    log_interval: int = 50
    cache_dir: str | None = None             # local LRU copy of remote shards (loader/cache.py)
    cache_size: int | None = None            # its cap in bytes (None: 90% of that disk)
    storage_option: list = field(default_factory=list)  # KEY=VALUE for the --data URL; saved as keys only
    # --- what the published recipes need (docs/recipes.md); the defaults are the behaviour above
    optimizer: str = "sgd"                   # sgd | lamb (model.OPTIMIZERS)
    wd_exempt: str | None = None             # model.WD_EXEMPT; None: "norm" with --no-bn-wd, else "none"
    loss: str = "ce"                         # ce | bce (loss.LOSSES)
    bce_target_thresh: float | None = None   # bce: targets above it become 1, the rest 0 (timm)
    zero_init_residual: bool = True          # ResNets: last BN of each block starts at 0
    blurpool: bool = False                   # FFCV's blur before strided convs (model.apply_blurpool)
    tta: bool = False                        # evaluate logits(x) + logits(flip(x)) (FFCV)
    eval_every: int = 1                      # evaluate after every N-th epoch (0: the last only); always the last
    eval_real: bool = False                  # also ReaL top-1 (manifests/imagenet-1k/real_labels.json)
    val_crop_ratio: float | None = None      # FFCV's val crop: this fraction of the shorter side -> --val-crop px
    lr_peak_epoch: float = 2.0               # --schedule triangle: where the lr peaks
    lr_start_factor: float = 0.0             # triangle/cosine-epochs/timm-cosine: lr at the start, x peak
    lr_end_factor: float = 0.0               # triangle: at the end; the cosines: their floor; x peak
    lr_step_epochs: int = 30                 # --schedule step-epochs
    lr_gamma: float = 0.1                    # --schedule step-epochs
    ema_every: int = 1                       # EMA update after every N-th optimizer step of an epoch
    ema_ramp: bool = True                    # decay min(d, (1+n)/(10+n)) (ours) or constant (torchvision)
    ema_copy_epochs: int = 0                 # copy the weights into the EMA in the first N epochs (torchvision)
    ra_reps: int = 1                         # repeated augmentation: each sample R times an epoch (loader/plan.py)
    random_erase_fill: str = "noise"         # noise (timm "pixel") | zero (torchvision value=0)
    accumulate: int = 1                      # optimizer step every N loader batches (gradients summed)
    recipe: str | None = None                # the published recipe this run follows (train/recipes)
    recipe_overrides: dict = field(default_factory=dict)  # field -> the recipe's value a flag replaced
    recipe_scaling: dict = field(default_factory=dict)    # how the recipe was fitted to this world size
    checkpoint_every: str | None = None      # mid-epoch checkpoints: "30m", "2000steps", "30m,2000steps"
    stop_check_every: int = 8                # steps between the ranks' agreements on a stop (lifecycle.py)


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
    if config.stop_check_every < 1:
        raise TrainError(f"--stop-check-every must be >= 1, got {config.stop_check_every}")
