"""torchvision's ResNet-50 recipes: the classic 90-epoch step recipe behind ResNet50_Weights.IMAGENET1K_V1
(76.130 %) and the "new training recipe" behind IMAGENET1K_V2 (80.858 %).

Sources: pytorch/vision references/classification/train.py (its argument defaults: the v1 recipe is
`train.py --model resnet50` with them; the stored version cited is @bde124ee, whose defaults the current
script keeps) and the v2 command that ResNet50_Weights.IMAGENET1K_V2's "recipe" meta points to
(github.com/pytorch/vision/issues/3995#issuecomment-1013906621, repeated in the blog post "How to Train
State-Of-The-Art Models Using TorchVision's Latest Primitives"), read together with the current
train.py's defaults for what the command leaves out (--lr-warmup-decay 0.01, --lr-min 0.0,
--model-ema-steps 32, --model-ema-decay 0.99998, --val-crop-size 224, --interpolation bilinear) and
its EMA and scheduler code. Published accuracies: torchvision/models/resnet.py (0.29.1) lines 357-392.
"""

from __future__ import annotations

from imagenet_shards.train.recipes.record import FULL_DECODE_MEASURED, SHARDS_MEASURED, Cited, Recipe

TV = "pytorch/vision references/classification"
V1_SCRIPT = "pytorch/vision@bde124ee references/classification/train.py"
V2_CMD = ("the IMAGENET1K_V2 recipe command (pytorch/vision#3995 comment 1013906621: torchrun --nproc_per_node=8 "
          "train.py --model resnet50 --batch-size 128 --lr 0.5 --lr-scheduler cosineannealinglr --lr-warmup-epochs 5 "
          "--lr-warmup-method linear --auto-augment ta_wide --epochs 600 --random-erase 0.1 --weight-decay 0.00002 "
          "--norm-weight-decay 0.0 --label-smoothing 0.1 --mixup-alpha 0.2 --cutmix-alpha 1.0 --train-crop-size 176 "
          "--model-ema --val-resize-size 232 --ra-sampler --ra-reps 4)")
TRAIN = f"{TV}/train.py"
# how both scripts decode: ImageFolder's default loader, each JPEG in full (no draft), then the transforms
FULL_DECODE_SOURCE = ("ImageFolder's default loader (torchvision/datasets/folder.py pil_loader: "
                      "Image.open(f).convert('RGB'), no draft) decodes each JPEG at full size before the crop")
WEIGHTS = "torchvision/models/resnet.py (torchvision 0.29.1)"

COMMON_CHANGES = (
    "sample order: torchvision's DistributedSampler permutes the samples each epoch; ours reads shards in a "
    "seeded per-epoch order through a shuffle buffer (prepare-shards has already shuffled samples across shards)",
    "last batch: torchvision's train DataLoader keeps the last partial batch of each rank (no drop_last); ours "
    "drops it (fewer than batch-size samples per rank and epoch) so that every rank runs the same full batches",
)

V1 = Recipe(
    name="tv-rn50-v1", family="torchvision", title="torchvision ResNet-50 v1 (90 epochs, step lr)",
    source=f"https://github.com/pytorch/vision/tree/main/references/classification ({V1_SCRIPT})",
    world_size=Cited(8, f"{TV}/README.md@212ff516: 'Except otherwise noted, all models have been trained on 8x V100 GPUs'"),
    scale_rule=Cited("linear", "Goyal et al. 2017's rule, which torchvision's recipes apply (README: lr 0.1 for "
                               "batch 256 = 8 x 32; the v2 recipe's 0.5 at 1024)"),
    hyper={
        "arch": Cited("resnet50", "README: train.py --model resnet50"),
        "epochs": Cited(90, f"{V1_SCRIPT} parse_args --epochs default 90"),
        "batch_size": Cited(32, f"{V1_SCRIPT} parse_args -b/--batch-size default 32 (per GPU)"),
        "optimizer": Cited("sgd", f"{V1_SCRIPT} main: torch.optim.SGD(model.parameters(), ...)"),
        "lr": Cited(0.1, f"{V1_SCRIPT} parse_args --lr default 0.1"),
        "momentum": Cited(0.9, f"{V1_SCRIPT} parse_args --momentum default 0.9"),
        "nesterov": Cited(False, f"{V1_SCRIPT} main: SGD without nesterov"),
        "wd": Cited(1e-4, f"{V1_SCRIPT} parse_args --wd default 1e-4"),
        "wd_exempt": Cited("none", f"{V1_SCRIPT} main: SGD(model.parameters(), weight_decay=...): every parameter "
                                   f"decayed, BatchNorm included"),
        "no_bn_wd": Cited(False, "ours: superseded by wd_exempt"),
        "label_smoothing": Cited(0.0, f"{V1_SCRIPT} main: nn.CrossEntropyLoss() (no smoothing)"),
        "loss": Cited("ce", f"{V1_SCRIPT} main: nn.CrossEntropyLoss()"),
        "schedule": Cited("step-epochs", f"{V1_SCRIPT} main: StepLR(step_size=--lr-step-size, gamma=--lr-gamma), "
                                         f"stepped once per epoch"),
        "lr_step_epochs": Cited(30, f"{V1_SCRIPT} parse_args --lr-step-size default 30"),
        "lr_gamma": Cited(0.1, f"{V1_SCRIPT} parse_args --lr-gamma default 0.1"),
        "warmup_epochs": Cited(0.0, f"{V1_SCRIPT}: no warmup"),
        "res": Cited(224, f"{V1_SCRIPT} load_data: RandomResizedCrop(224)"),
        "dct_scaling": Cited("off", f"{V1_SCRIPT} load_data: {FULL_DECODE_SOURCE}; {FULL_DECODE_MEASURED}"),
        "end_res": Cited(None, f"{V1_SCRIPT}: one train resolution"),
        "ramp_epochs": Cited(None, f"{V1_SCRIPT}: one train resolution"),
        "val_res": Cited(256, f"{V1_SCRIPT} load_data: Resize(256)"),
        "val_crop": Cited(224, f"{V1_SCRIPT} load_data: CenterCrop(224)"),
        "val_crop_ratio": Cited(None, "torchvision's Resize + CenterCrop, not FFCV's ratio crop"),
        "tta": Cited(False, f"{V1_SCRIPT} evaluate: one forward"),
        "blurpool": Cited(False, "torchvision's resnet50"),
        "zero_init_residual": Cited(False, f"{V1_SCRIPT} main: torchvision.models.__dict__[args.model](pretrained=...) "
                                           f"with the model's default zero_init_residual=False"),
        "amp": Cited("none", f"{V1_SCRIPT}: fp32 (apex only with --apex)"),
        "mixup": Cited(0.0, f"{V1_SCRIPT} load_data"), "cutmix": Cited(0.0, f"{V1_SCRIPT} load_data"),
        "aug": Cited("none", f"{V1_SCRIPT} load_data: crop and flip only"),
        "random_erase": Cited(0.0, f"{V1_SCRIPT} load_data"),
        "ema": Cited(None, f"{V1_SCRIPT}: no EMA"),
        "ra_reps": Cited(1, f"{V1_SCRIPT} load_data: DistributedSampler"),
        "eval_every": Cited(1, f"{V1_SCRIPT} main: evaluate after every epoch"),
        "sync_bn": Cited(False, f"{V1_SCRIPT} parse_args --sync-bn off"),
    },
    published={
        "top1": Cited(0.7613, f"{WEIGHTS}:366 ResNet50_Weights.IMAGENET1K_V1 acc@1 76.130"),
        "top5": Cited(0.92862, f"{WEIGHTS}:367 acc@5 92.862"),
        "minutes": Cited(None, "not published"),
        "hardware": Cited("8 x V100", f"{TV}/README.md@212ff516"),
    },
    changes=COMMON_CHANGES + (
        "provenance: the IMAGENET1K_V1 weights predate the current script ('reproduce closely the results of the "
        "paper using a simple training recipe', resnet.py:372); the record is train.py's defaults, which is what "
        "the README's ResNet command runs",
    ),
    data="the original ImageNet JPEGs (prepare-shards' default --resize longer:500 shrinks about 15 % of the train "
         "images; use --resize none to keep every original)",
    shards_resize=Cited("none", f"{V1_SCRIPT} load_data: torchvision.datasets.ImageFolder over the original JPEGs; "
                                f"{SHARDS_MEASURED}"),
    metric=Cited("val_top1", f"{WEIGHTS}:366 acc@1 of the released weights: one model, single crop, no EMA"),
)

V2 = Recipe(
    name="tv-rn50-v2", family="torchvision", title="torchvision ResNet-50 v2 (600 epochs, the new training recipe)",
    source="https://github.com/pytorch/vision/issues/3995#issuecomment-1013906621",
    world_size=Cited(8, f"{V2_CMD}: --nproc_per_node=8"),
    scale_rule=Cited("linear", "Goyal et al. 2017's rule (torchvision's recipes keep lr / global batch: 0.1 per 256 "
                               "in v1, 0.5 per 1024 here)"),
    hyper={
        "arch": Cited("resnet50", f"{V2_CMD}: --model resnet50"),
        "epochs": Cited(600, f"{V2_CMD}: --epochs 600"),
        "dct_scaling": Cited("off", f"{TRAIN} load_data: {FULL_DECODE_SOURCE}; {FULL_DECODE_MEASURED}"),
        "batch_size": Cited(128, f"{V2_CMD}: --batch-size 128 (per GPU)"),
        "optimizer": Cited("sgd", f"{TRAIN} get_args_parser --opt default sgd"),
        "lr": Cited(0.5, f"{V2_CMD}: --lr 0.5"),
        "momentum": Cited(0.9, f"{TRAIN} get_args_parser --momentum default 0.9"),
        "nesterov": Cited(False, f"{TRAIN} main: nesterov='nesterov' in opt_name (opt 'sgd')"),
        "wd": Cited(2e-5, f"{V2_CMD}: --weight-decay 0.00002"),
        "wd_exempt": Cited("norm", f"{V2_CMD}: --norm-weight-decay 0.0 (utils.set_weight_decay: normalization layers' "
                                   f"parameters; biases keep the weight decay, --bias-weight-decay unset)"),
        "no_bn_wd": Cited(False, "ours: superseded by wd_exempt"),
        "label_smoothing": Cited(0.1, f"{V2_CMD}: --label-smoothing 0.1"),
        "loss": Cited("ce", f"{TRAIN} main: nn.CrossEntropyLoss(label_smoothing=...) on the mixed soft targets"),
        "schedule": Cited("cosine-epochs", f"{V2_CMD}: --lr-scheduler cosineannealinglr --lr-warmup-method linear; "
                                           f"{TRAIN} main: SequentialLR(LinearLR(start_factor=--lr-warmup-decay, "
                                           f"total_iters=W), CosineAnnealingLR(T_max=epochs - W, eta_min=--lr-min)), "
                                           f"stepped once per epoch"),
        "warmup_epochs": Cited(5.0, f"{V2_CMD}: --lr-warmup-epochs 5"),
        "lr_start_factor": Cited(0.01, f"{TRAIN} get_args_parser --lr-warmup-decay default 0.01"),
        "lr_end_factor": Cited(0.0, f"{TRAIN} get_args_parser --lr-min default 0.0"),
        "res": Cited(176, f"{V2_CMD}: --train-crop-size 176"),
        "end_res": Cited(None, "one train resolution"),
        "ramp_epochs": Cited(None, "one train resolution"),
        "val_res": Cited(232, f"{V2_CMD}: --val-resize-size 232; {WEIGHTS}:377 resize_size=232"),
        "val_crop": Cited(224, f"{TRAIN} get_args_parser --val-crop-size default 224"),
        "val_crop_ratio": Cited(None, "torchvision's Resize + CenterCrop"),
        "tta": Cited(False, f"{TRAIN} evaluate: one forward"),
        "blurpool": Cited(False, "torchvision's resnet50"),
        "zero_init_residual": Cited(False, f"{TRAIN} main: torchvision.models.get_model(args.model, weights=None): "
                                           f"zero_init_residual=False"),
        "amp": Cited("none", f"{V2_CMD}: no --amp (fp32; TF32 on Ampere)"),
        "mixup": Cited(0.2, f"{V2_CMD}: --mixup-alpha 0.2"),
        "cutmix": Cited(1.0, f"{V2_CMD}: --cutmix-alpha 1.0 (RandomChoice of the two per batch, p=1.0 each)"),
        "aug": Cited("ta_wide", f"{V2_CMD}: --auto-augment ta_wide; {TV}/presets.py@080836e5: "
                                f"TrivialAugmentWide(interpolation=bilinear)"),
        "random_erase": Cited(0.1, f"{V2_CMD}: --random-erase 0.1"),
        "random_erase_fill": Cited("zero", f"{TV}/presets.py@080836e5: transforms.RandomErasing(p) after Normalize "
                                           f"(value=0)"),
        "ema": Cited(0.99998, f"{V2_CMD}: --model-ema; {TRAIN} get_args_parser --model-ema-decay default 0.99998 "
                              f"(adjusted, see ema_adjust)"),
        "ema_every": Cited(32, f"{TRAIN} get_args_parser --model-ema-steps default 32; train_one_epoch: "
                               f"update when i % model_ema_steps == 0"),
        "ema_ramp": Cited(False, f"{TRAIN}: utils.ExponentialMovingAverage, constant decay"),
        "ema_copy_epochs": Cited(5, f"{TRAIN} train_one_epoch: 'if epoch < args.lr_warmup_epochs: "
                                    f"model_ema.n_averaged.fill_(0)' (copy the weights during the warmup)"),
        "ra_reps": Cited(4, f"{V2_CMD}: --ra-sampler --ra-reps 4; {TV}/sampler.py@775e7604 RASampler"),
        "eval_every": Cited(1, f"{TRAIN} main: evaluate (model and EMA) after every epoch"),
        "sync_bn": Cited(False, f"{V2_CMD}: no --sync-bn"),
    },
    published={
        "top1": Cited(0.80858, f"{WEIGHTS}:384 ResNet50_Weights.IMAGENET1K_V2 acc@1 80.858 (at resize 232, crop 224)"),
        "top5": Cited(0.95434, f"{WEIGHTS}:385 acc@5 95.434"),
        "minutes": Cited(None, "not published"),
        "hardware": Cited("8 GPUs (type not stated)", f"{V2_CMD}"),
    },
    changes=COMMON_CHANGES + (
        "repeated augmentation: like torchvision's RASampler, each rank gets floor(N // 256 * 256 / W) samples an "
        "epoch, ~N/4 distinct ones each shown 4 times on 4 different ranks in the same step (on fewer than 4 GPUs in "
        "4 different accumulated micro-batches of the step: docs/loader.md); the distinct "
        "samples are a random quarter of the shards (the loader streams shards), where torchvision draws a "
        "random quarter of the samples",
        "random erasing: torchvision erases area fractions in [0.02, 0.33], ours in [0.02, 1/3] (timm's bound); "
        "the fill (0, the mean after normalization), aspect range and 10 attempts are torchvision's",
        "MixUp/CutMix pairs sample i with B-1-i (timm's flip), torchvision with i-1 (roll); the same distribution "
        "over a shuffled batch",
    ),
    data="the original ImageNet JPEGs (see tv-rn50-v1)",
    shards_resize=Cited("none", f"{TRAIN} load_data: torchvision.datasets.ImageFolder over the original JPEGs; "
                                f"{SHARDS_MEASURED}"),
    ema_adjust=True,
    metric=Cited("ema_val_top1", "the 'How to Train State-Of-The-Art Models Using TorchVision's Latest Primitives' "
                                 "post's ablation table: 80.858 is the '+ EMA' row (best of 3 runs), the EMA model's "
                                 "top-1 at val resize 232 / crop 224 (issue 30's audit of the post; the raw model sits ~0.25 pt lower)"),
)

RECIPES = (V1, V2)
