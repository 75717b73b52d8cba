"""The model and what updates it: a torchvision classifier by name, initial weights, SGD, and the EMA.

Nothing here reads files beyond `--weights` or decides what to run; `build` wires these together.
"""

from __future__ import annotations

import copy

import torch
import torchvision

# Builders that take zero_init_residual (last BN of each block starts at 0: Goyal et al. 2017).
ZERO_INIT_FAMILIES = ("resnet", "resnext", "wide_resnet")
NORM_TYPES = (torch.nn.modules.batchnorm._NormBase, torch.nn.GroupNorm, torch.nn.LayerNorm,
              torch.nn.LocalResponseNorm)


def classification_models() -> list[str]:
    """torchvision's classification model names, sorted."""
    return sorted(torchvision.models.list_models(module=torchvision.models))


def build_model(arch: str, num_classes: int) -> torch.nn.Module:
    """A randomly initialised torchvision classifier by name; ValueError for an unknown name."""
    names = classification_models()
    if arch not in names:
        raise ValueError(f"unknown --arch {arch!r}; torchvision classification models: {', '.join(names)}")
    kwargs = {"zero_init_residual": True} if arch.startswith(ZERO_INIT_FAMILIES) else {}
    return torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **kwargs)


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


def build_optimizer(model: torch.nn.Module, *, lr: float, momentum: float, nesterov: bool,
                    weight_decay: float, no_bn_wd: bool,
                    device: torch.device = torch.device("cpu")) -> torch.optim.SGD:
    """SGD (fused on CUDA, see `optimizer_impl`); with `no_bn_wd`, normalization-layer weights and
    biases get no weight decay."""
    norm, other = [], []
    for module in model.modules():
        params = [p for p in module.parameters(recurse=False) if p.requires_grad]
        (norm if no_bn_wd and isinstance(module, NORM_TYPES) else other).extend(params)
    groups = [{"params": other, "weight_decay": weight_decay}]
    if norm:
        groups.append({"params": norm, "weight_decay": 0.0})
    return torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0,
                           weight_decay=weight_decay, **optimizer_impl(device))


class ModelEma:
    """Exponential moving average of a model's weights, kept in fp32 on the same device.

    decay ramps as min(decay, (1 + n) / (10 + n)) over updates n, so short runs get a useful EMA.
    Float buffers (BN running stats) are averaged like weights; integer buffers are copied. One
    `torch._foreach_lerp_` over tensor lists made once per source module: no state_dict() per step.
    """

    def __init__(self, model: torch.nn.Module, decay: float):
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.decay = decay
        self.updates = 0
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
    def update(self, model: torch.nn.Module) -> None:
        """One EMA step towards `model` (the module the EMA was copied from)."""
        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        ema_float, model_float, ema_other, model_other = self._pairs(model)
        torch._foreach_lerp_(ema_float, model_float, 1.0 - decay)
        if ema_other:
            torch._foreach_copy_(ema_other, model_other)

    def state_dict(self) -> dict:
        """The averaged module's state dict, the decay and the update count."""
        return {"module": self.module.state_dict(), "decay": self.decay, "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of `state_dict` (in place, so the tensor lists stay valid)."""
        self.module.load_state_dict(state["module"])
        self.updates = int(state["updates"])
