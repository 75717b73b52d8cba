"""The model and what updates it: a torchvision classifier by name (optionally with FFCV's
BlurPool), initial weights, the optimizer (SGD, or LAMB from `lamb`) with its weight-decay rule,
and the EMA.

Nothing here reads files beyond `--weights` or decides what to run; `build` wires these together.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
import torchvision

# Builders that take zero_init_residual (last BN of each block starts at 0: Goyal et al. 2017).
ZERO_INIT_FAMILIES = ("resnet", "resnext", "wide_resnet")
NORM_TYPES = (torch.nn.modules.batchnorm._NormBase, torch.nn.GroupNorm, torch.nn.LayerNorm,
              torch.nn.LocalResponseNorm)


def classification_models() -> list[str]:
    """torchvision's classification model names, sorted."""
    return sorted(torchvision.models.list_models(module=torchvision.models))


def build_model(arch: str, num_classes: int, *, zero_init_residual: bool = True,
                blurpool: bool = False) -> torch.nn.Module:
    """A randomly initialised torchvision classifier by name; ValueError for an unknown name.
    `zero_init_residual` applies to the ResNet families (torchvision's own default is off, timm's on);
    `blurpool` puts FFCV's blur in front of the strided convolutions (`apply_blurpool`)."""
    names = classification_models()
    if arch not in names:
        raise ValueError(f"unknown --arch {arch!r}; torchvision classification models: {', '.join(names)}")
    kwargs = {"zero_init_residual": zero_init_residual} if arch.startswith(ZERO_INIT_FAMILIES) else {}
    model = torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **kwargs)
    return apply_blurpool(model) if blurpool else model


# FFCV's blur (ffcv-imagenet train_imagenet.py:115-126): [1, 2, 1]^T [1, 2, 1] / 16, depthwise, stride 1,
# zero padding 1, in front of every Conv2d with a stride > 1 and at least 16 input channels (:335-340).
BLUR_KERNEL = (1.0, 2.0, 1.0)
BLUR_MIN_CHANNELS = 16


class BlurPoolConv2d(torch.nn.Module):
    """`conv` applied to a [1,2,1]^T[1,2,1]/16 depthwise blur of its input (anti-aliased downsampling,
    Zhang 2019, as FFCV applies it). The wrapped convolution keeps its parameters under `.conv`."""

    def __init__(self, conv: torch.nn.Conv2d):
        super().__init__()
        k = torch.tensor(BLUR_KERNEL)
        kernel = (k[:, None] * k[None, :]) / k.sum() ** 2
        self.conv = conv
        self.register_buffer("blur_filter", kernel.expand(conv.in_channels, 1, 3, 3).contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        blurred = F.conv2d(x, self.blur_filter.to(x.dtype), stride=1, padding=1, groups=self.conv.in_channels)
        return self.conv(blurred)


def apply_blurpool(module: torch.nn.Module) -> torch.nn.Module:
    """Wrap (in place) every Conv2d with max(stride) > 1 and >= 16 input channels in `BlurPoolConv2d`;
    returns `module`. In a torchvision ResNet that is each stage's first strided 3x3 and downsample 1x1
    (the stem's 3-channel conv is left alone)."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Conv2d) and max(child.stride) > 1 and child.in_channels >= BLUR_MIN_CHANNELS:
            setattr(module, name, BlurPoolConv2d(child))
        else:
            apply_blurpool(child)
    return module


def strip_wrapper_prefixes(state_dict: dict) -> dict:
    """Drop DDP's `module.` and torch.compile's `_orig_mod.` key prefixes."""
    out = {}
    for key, value in state_dict.items():
        for prefix in ("module.", "_orig_mod."):
            while key.startswith(prefix):
                key = key[len(prefix):]
        out[key] = value
    return out


def load_weights(model: torch.nn.Module, path: str) -> None:
    """Load a state dict (or one of our checkpoints' "model") from `path` into `model`.

    Raises ValueError naming the first mismatching keys/shapes; no downloads ever.
    """
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    if not isinstance(state, dict):
        raise ValueError(f"--weights {path}: not a state dict")
    state = strip_wrapper_prefixes(state)
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or wrong:
        parts = []
        if wrong:
            parts.append("shape mismatch: " + ", ".join(
                f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in wrong[:3]))
        if missing:
            parts.append(f"missing {len(missing)} keys (e.g. {', '.join(missing[:3])})")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} keys (e.g. {', '.join(unexpected[:3])})")
        raise ValueError(f"--weights {path} does not fit this model: " + "; ".join(parts))
    model.load_state_dict(state)


def optimizer_impl(device: torch.device) -> dict:
    """SGD implementation flags for `device`. CUDA: the fused kernel, one launch for all parameters,
    and the only kind GradScaler hands its inf check to on the device; with any other, fp16's
    `scaler.step` reads `found_inf` on the host, a sync every step. Elsewhere torch's default."""
    return {"fused": True} if device.type == "cuda" else {}


# Which parameters get no weight decay (--wd-exempt):
#   none     every parameter is decayed (torchvision's reference default, --norm-weight-decay unset)
#   norm     normalization layers' weights and biases (torchvision's --norm-weight-decay 0.0; --no-bn-wd)
#   bn-name  parameters whose name contains "bn" (FFCV, train_imagenet.py:195-205: in a torchvision
#            ResNet the downsample BatchNorm is `downsample.1`, so it stays decayed, as in FFCV)
#   1d       1-d parameters and biases (timm's add_weight_decay: every BN parameter and the fc bias)
WD_EXEMPT = ("none", "norm", "bn-name", "1d")
OPTIMIZERS = ("sgd", "lamb")


def weight_decay_groups(model: torch.nn.Module, weight_decay: float, exempt: str) -> list[dict]:
    """[decayed, exempt] parameter groups of `model` (the bare module) under the rule `exempt`."""
    if exempt not in WD_EXEMPT:
        raise ValueError(f"unknown weight-decay rule {exempt!r} (expected one of {', '.join(WD_EXEMPT)})")
    norm_params = {id(p) for m in model.modules() if isinstance(m, NORM_TYPES) for p in m.parameters(recurse=False)}
    decayed, skipped = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = {"none": False, "norm": id(p) in norm_params, "bn-name": "bn" in name,
                "1d": p.ndim <= 1 or name.endswith(".bias")}[exempt]
        (skipped if skip else decayed).append(p)
    groups = [{"params": decayed, "weight_decay": weight_decay}]
    if skipped:
        groups.append({"params": skipped, "weight_decay": 0.0})
    return groups


def build_optimizer(model: torch.nn.Module, *, lr: float, momentum: float, nesterov: bool,
                    weight_decay: float, no_bn_wd: bool, wd_exempt: str | None = None, optimizer: str = "sgd",
                    device: torch.device = torch.device("cpu")) -> torch.optim.Optimizer:
    """SGD (fused on CUDA, see `optimizer_impl`) or LAMB (`lamb.Lamb`, timm's defaults). Weight decay
    follows `wd_exempt` (`WD_EXEMPT`); without one, `no_bn_wd` means "norm" and its absence "none"."""
    groups = weight_decay_groups(model, weight_decay, wd_exempt or ("norm" if no_bn_wd else "none"))
    if optimizer == "lamb":
        from imagenet_shards.train.trainer.lamb import Lamb
        return Lamb(groups, lr=lr, weight_decay=weight_decay)
    if optimizer != "sgd":
        raise ValueError(f"unknown optimizer {optimizer!r} (expected one of {', '.join(OPTIMIZERS)})")
    return torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0,
                           weight_decay=weight_decay, **optimizer_impl(device))


def ema_due(global_step: int, *, epoch: int, steps_per_epoch: int, every: int) -> bool:
    """Whether the EMA updates after optimizer step `global_step` (0-based) of `epoch`: torchvision's
    `i % model_ema_steps == 0` with i the step's index within its epoch (so also after each epoch's
    first step), computed from the global step so a resumed run recomputes it."""
    return (global_step - epoch * steps_per_epoch) % max(1, every) == 0


class ModelEma:
    """Exponential moving average of a model's weights, kept in fp32 on the same device.

    With `ramp` (ours) decay ramps as min(decay, (1 + n) / (10 + n)) over updates n, so short runs
    get a useful EMA. Without it (torchvision's `ExponentialMovingAverage`) the decay is constant
    and an update copies the weights while `n_averaged` is 0: the first update, and every update in
    the first `copy_epochs` epochs (torchvision resets `n_averaged` during the lr warmup). Float
    buffers (BN running stats) are averaged like weights; integer buffers are copied. One
    `torch._foreach_lerp_` over tensor lists made once per source module: no state_dict() per step.
    How often it updates is the caller's (`ema_due`).
    """

    def __init__(self, model: torch.nn.Module, decay: float, *, ramp: bool = True, copy_epochs: int = 0):
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.decay = decay
        self.ramp = ramp
        self.copy_epochs = copy_epochs
        self.updates = 0
        self.n_averaged = 0
        self._source: torch.nn.Module | None = None
        self._lists: tuple = ()

    def _pairs(self, model: torch.nn.Module) -> tuple:
        if model is not self._source:
            ema = [*self.module.parameters(), *self.module.buffers()]
            src = [*model.parameters(), *model.buffers()]
            if len(ema) != len(src) or any(a.shape != b.shape for a, b in zip(ema, src)):
                raise ValueError("the EMA's source module does not match the module it was made from")
            floats = [i for i, t in enumerate(ema) if t.is_floating_point()]
            others = [i for i, t in enumerate(ema) if not t.is_floating_point()]
            self._lists = ([ema[i] for i in floats], [src[i] for i in floats],
                           [ema[i] for i in others], [src[i] for i in others])
            self._source = model
        return self._lists

    @torch.no_grad()
    def update(self, model: torch.nn.Module, epoch: int = 0) -> None:
        """One EMA step towards `model` (the module the EMA was copied from), made in `epoch`."""
        self.updates += 1
        if self.ramp:
            decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        else:
            decay = 0.0 if self.n_averaged == 0 else self.decay
        ema_float, model_float, ema_other, model_other = self._pairs(model)
        if decay == 0.0:
            torch._foreach_copy_(ema_float, model_float)
        else:
            torch._foreach_lerp_(ema_float, model_float, 1.0 - decay)
        if ema_other:
            torch._foreach_copy_(ema_other, model_other)
        self.n_averaged = 0 if epoch < self.copy_epochs else self.n_averaged + 1

    def state_dict(self) -> dict:
        """The averaged module's state dict, the decay, the update counts and the policy."""
        return {"module": self.module.state_dict(), "decay": self.decay, "updates": self.updates,
                "n_averaged": self.n_averaged, "ramp": self.ramp, "copy_epochs": self.copy_epochs}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of `state_dict` (in place, so the tensor lists stay valid)."""
        self.module.load_state_dict(state["module"])
        self.updates = int(state["updates"])
        self.n_averaged = int(state.get("n_averaged", self.updates))
