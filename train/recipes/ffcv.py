"""FFCV's ImageNet table (libffcv/ffcv-imagenet @ 4dd291a): ResNet-50 on 8 GPUs and ResNet-18 on 1
GPU, 16 to 88 epochs. Sources: rn50_configs/rn50_{E}_epochs.yaml and rn18_configs/rn18_{E}_epochs.yaml
(the same keys on the same lines in every file of a family; only epochs and the resolution ramp
change with E), train_imagenet.py for what the keys mean and for the values a file leaves at their
default, and README.md's results table.
"""

from __future__ import annotations

from imagenet_shards.train.recipes.record import SHARDS_MEASURED, Cited, Recipe

REPO = "libffcv/ffcv-imagenet@4dd291a"
SCRIPT = f"{REPO} train_imagenet.py"

# epochs -> (start_ramp, end_ramp, top1, top5, minutes): the yaml files' resolution.start_ramp /
# end_ramp and README.md's table ("Configurations": top_1, top_5, Time (mins))
RN50_TABLE = {
    16: (11, 13, 0.738, 0.908, 14.9),
    24: (17, 20, 0.756, 0.921, 21.7),
    32: (23, 27, 0.766, 0.927, 28.7),
    40: (29, 34, 0.772, 0.932, 35.6),
    56: (41, 48, 0.780, 0.937, 49.4),
    88: (65, 76, 0.784, 0.941, 77.2),
}
RN18_TABLE = {
    16: (11, 13, 0.669, 0.868, 35.0),
    24: (17, 20, 0.688, 0.881, 51.6),
    32: (23, 27, 0.700, 0.889, 68.9),
    40: (29, 34, 0.706, 0.894, 85.5),
    56: (41, 48, 0.713, 0.899, 119.4),
    88: (65, 76, 0.724, 0.903, 187.3),
}

# The ramp's rule across the table: start_ramp = 3/4 x E - 1 and end_ramp = 7/8 x E - 1 give every
# file's values exactly (16 -> 11, 13; 24 -> 17, 20; ... 88 -> 65, 76); floor() for an E that is not a
# multiple of 8 is ours (no config has one).
RAMP_RULE = Cited((0.75, 0.875, -1), f"{REPO} rn50_configs and rn18_configs, all six lengths: start_ramp = "
                                     f"3E/4 - 1, end_ramp = 7E/8 - 1 (floor for E not a multiple of 8: ours)")

CHANGES = (
    "resize filter: FFCV resizes its random crops and the val centre crop with OpenCV's INTER_AREA "
    "(libffcv resize_crop); our loader resamples the same boxes with Pillow's antialiased bilinear "
    "(the crop geometry is FFCV's: RandomResizedCrop scale (0.08, 1), ratio (3/4, 4/3); val: "
    "int(224/256 x shorter side) centred, floored offsets)",
    "sample order: FFCV's loader draws a fresh random order each epoch (OrderOption.RANDOM under DDP, "
    "QUASI_RANDOM on one GPU); ours reads shards in a seeded per-epoch order through a shuffle buffer. "
    "Both see each sample at most once an epoch and drop the last partial batch",
    "BatchNorm across GPUs: FFCV's DDP broadcasts rank 0's BN buffers every forward "
    "(broadcast_buffers default); we do not, and average the BN statistics across ranks at each "
    "epoch end instead (docs/training.md)",
)


def _data(arch: str) -> str:
    if arch == "resnet50":
        return ("FFCV's ResNet-50 dataset: images at most 500 px on the longer side, 50 % stored as JPEG q90, "
                "the rest as raw pixels (README 'Training Details'); prepare-shards' default --resize longer:500 "
                "gives the same size bound, keeping the original JPEGs")
    return ("FFCV's ResNet-18 dataset: at most 400 px, 10 % JPEG (README 'Training Details'); prepare the shards "
            "with prepare-shards --resize longer:400 for the same size bound")


def _ffcv(arch: str, epochs: int) -> Recipe:
    # Long (~90 lines) because it is the record itself: one cited value per line, as the source states
    # them; splitting it would scatter one recipe over several functions.
    rn50 = arch == "resnet50"
    table = RN50_TABLE if rn50 else RN18_TABLE
    start_ramp, end_ramp, top1, top5, minutes = table[epochs]
    short = "rn50" if rn50 else "rn18"
    cfg = f"{REPO} {short}_configs/{short}_{epochs}_epochs.yaml"
    line = {  # the keys' line numbers in every yaml file of the family
        "world_size": 5, "lr": 9, "schedule": 10, "arch": 12, "end_ramp": 14, "max_res": 15, "min_res": 16,
        "start_ramp": 17, "batch_size": 19, "bn_wd": 20, "epochs": 22, "label_smoothing": 23, "momentum": 24,
        "optimizer": 25, "weight_decay": 26, "blurpool": 27, "tta": 29, "val_res": 30,
    } if rn50 else {
        "world_size": 6, "log_level": 9, "lr": 11, "peak": 12, "schedule": 13, "arch": 15, "end_ramp": 17,
        "max_res": 18, "min_res": 19, "start_ramp": 20, "batch_size": 22, "bn_wd": 23, "epochs": 25,
        "label_smoothing": 26, "momentum": 27, "optimizer": 28, "weight_decay": 29, "blurpool": 30, "tta": 32,
        "val_res": 33,
    }

    def at(key: str, what: str) -> str:
        return f"{cfg}:{line[key]} {what}"

    hyper = {
        "arch": Cited(arch, at("arch", "model.arch")),
        "epochs": Cited(epochs, at("epochs", "training.epochs")),
        "batch_size": Cited(512 if rn50 else 1024, at("batch_size", "training.batch_size (per GPU)")),
        "optimizer": Cited("sgd", at("optimizer", "training.optimizer; SGD built at train_imagenet.py:207")),
        "lr": Cited(1.7 if rn50 else 0.5, at("lr", "lr.lr (the peak of the cyclic schedule)")),
        "momentum": Cited(0.9, at("momentum", "training.momentum")),
        "nesterov": Cited(False, f"{SCRIPT}:207 ch.optim.SGD(param_groups, lr=1, momentum=momentum): no nesterov"),
        "wd": Cited(1e-4 if rn50 else 5e-5, at("weight_decay", "training.weight_decay")),
        "wd_exempt": Cited("bn-name", f"{SCRIPT}:195-205 no decay for parameters whose name contains 'bn' "
                                      f"({at('bn_wd', 'training.bn_wd: 0')}, a key the script does not read)"),
        "no_bn_wd": Cited(False, "ours: superseded by wd_exempt"),
        "label_smoothing": Cited(0.1, at("label_smoothing", "training.label_smoothing; CrossEntropyLoss at "
                                                            "train_imagenet.py:208")),
        "loss": Cited("ce", f"{SCRIPT}:208 ch.nn.CrossEntropyLoss"),
        "schedule": Cited("triangle", at("schedule", "lr.lr_schedule_type: cyclic") +
                          f"; {SCRIPT}:107-113 get_cyclic_lr, :356-358 interpolated per iteration"),
        "lr_peak_epoch": Cited(2.0, at("peak", "lr.lr_peak_epoch") if not rn50 else
                               f"{SCRIPT}:60 lr.lr_peak_epoch default 2 (the yaml does not set it)"),
        "lr_start_factor": Cited(1e-4, f"{SCRIPT}:112 ys = [1e-4 * lr, lr, 0]"),
        "lr_end_factor": Cited(0.0, f"{SCRIPT}:112 ys = [1e-4 * lr, lr, 0]"),
        "warmup_epochs": Cited(0.0, "ours: the triangle's rising edge is the warmup; no separate one"),
        "res": Cited(160, at("min_res", "resolution.min_res")),
        "end_res": Cited(192, at("max_res", "resolution.max_res")),
        "ramp_epochs": Cited((start_ramp, end_ramp), at("start_ramp", "resolution.start_ramp") + ", " +
                             at("end_ramp", "resolution.end_ramp") + f"; {SCRIPT}:169-185 get_resolution"),
        "val_crop": Cited(256, at("val_res", "validation.resolution (the model sees 256 px)")),
        "val_crop_ratio": Cited(224 / 256, f"{SCRIPT}:94 DEFAULT_CROP_RATIO = 224/256, :265 CenterCropRGBImageDecoder"),
        "val_res": Cited(256, "ours: unused with val_crop_ratio"),
        "tta": Cited(True, at("tta", "validation.lr_tta") + f"; {SCRIPT}:403-404 output += model(flip(images))"),
        "blurpool": Cited(True, at("blurpool", "training.use_blurpool") + f"; {SCRIPT}:115-126, 335-340"),
        "zero_init_residual": Cited(False, f"{SCRIPT}:334 getattr(models, arch)(pretrained=0): torchvision's "
                                           f"default init, no zero-initialised residual BN"),
        "amp": Cited("fp16", f"{SCRIPT}:333 GradScaler(), :367 autocast() (fp16)"),
        "mixup": Cited(0.0, f"{SCRIPT}:223-230 train pipeline: RandomResizedCrop, flip, normalize only"),
        "cutmix": Cited(0.0, f"{SCRIPT}:223-230"),
        "aug": Cited("none", f"{SCRIPT}:223-230"),
        "random_erase": Cited(0.0, f"{SCRIPT}:223-230"),
        "ema": Cited(None, f"{SCRIPT}: no EMA"),
        "ra_reps": Cited(1, f"{SCRIPT}:239-250 plain random order"),
        "eval_every": Cited(1 if rn50 else 0,
                            f"{SCRIPT}:65 logging.log_level default 1: eval after every epoch (:302-308)" if rn50 else
                            at("log_level", "logging.log_level: 0") + f": eval only after the last epoch "
                                                                      f"({SCRIPT}:310)"),
        "sync_bn": Cited(False, f"{SCRIPT}:345-346 plain DDP"),
    }
    return Recipe(
        name=f"ffcv-{short}-{epochs}", family="ffcv",
        title=f"FFCV {'ResNet-50' if rn50 else 'ResNet-18'}, {epochs} epochs",
        source=f"https://github.com/libffcv/ffcv-imagenet ({cfg})",
        world_size=Cited(8 if rn50 else 1, at("world_size", "dist.world_size")),
        scale_rule=Cited("linear", "ours: FFCV's configs fix the GPU count; its README scales by editing the "
                                   "config. Linear scaling of lr with the global batch (Goyal et al. 2017), as "
                                   "torchvision's references do"),
        hyper=hyper,
        published={
            "top1": Cited(top1, f"{REPO} README.md Configurations table, {epochs} epochs {arch}"),
            "top5": Cited(top5, f"{REPO} README.md Configurations table"),
            "minutes": Cited(minutes, f"{REPO} README.md Configurations table, Time (mins)"),
            "hardware": Cited("8 x A100" if rn50 else "1 x A100", f"{REPO} README.md Configurations table, Setup "
                                                                     f"(p4d.24xlarge, 'Training Details')"),
        },
        changes=CHANGES,
        data=_data(arch),
        shards_resize=Cited(f"longer:{500 if rn50 else 400}",
                            f"{REPO} README.md 'Training Details': ResNet-{50 if rn50 else 18} data written at max "
                            f"resolution {500 if rn50 else 400}; {SHARDS_MEASURED}"),
        ramp_rule=RAMP_RULE,
        metric=Cited("val_top1", f"{SCRIPT}:403-404 the val top_1 is of logits(x) + logits(flip(x)) (lr_tta); no EMA: "
                                 f"our val_top1 with flip TTA"),
    )


RECIPES = tuple(_ffcv(arch, e) for arch in ("resnet50", "resnet18") for e in (16, 24, 32, 40, 56, 88))
