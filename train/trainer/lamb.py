"""LAMB (You et al. 2019, arXiv 1904.00962) with the behaviour timm's `Lamb` gives ResNet Strikes Back.

torch has no LAMB, so it is written here, from the algorithm as timm 0.5 runs it (timm/optim/lamb.py,
the NVLAMB variant of apex's FusedLAMB), not from its code:

1. All gradients are divided by max(1, ||g||_2 / max_grad_norm), the norm taken over every parameter
   of every group (max_grad_norm 1.0: LAMB always clips the global gradient norm).
2. Adam moments with bias correction: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
   u = (m / (1 - b1^t)) / (sqrt(v) / sqrt(1 - b2^t) + eps).
3. Weight decay is added to the update, not to the gradient: u += wd * p.
4. Only where wd != 0 (timm's `always_adapt=False`), the update is scaled by the trust ratio
   ||p|| / ||u|| (1 where either norm is 0); parameters exempt from decay (BN, biases) take plain Adam steps.
5. p -= lr * u.

Defaults are timm's: betas (0.9, 0.999), eps 1e-6, max_grad_norm 1.0. The step count is kept per
group (`group["step"]`) and the moments per parameter, so `state_dict()` carries all of it into
checkpoints. The arithmetic is `torch._foreach_*` over each group's tensors and the trust ratio a
`torch.where` on the device: no host sync, a handful of kernels per group rather than per tensor.
"""

from __future__ import annotations

import math

import torch

DEFAULT_BETAS = (0.9, 0.999)
DEFAULT_EPS = 1e-6
DEFAULT_MAX_GRAD_NORM = 1.0


class Lamb(torch.optim.Optimizer):
    """LAMB as described in the module docstring; `params` may be parameter groups with their own
    `weight_decay` (e.g. 0 for normalization layers and biases)."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = DEFAULT_BETAS,
                 eps: float = DEFAULT_EPS, weight_decay: float = 0.01,
                 max_grad_norm: float | None = DEFAULT_MAX_GRAD_NORM):
        if lr < 0 or eps <= 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"bad LAMB arguments: lr={lr} betas={betas} eps={eps}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.max_grad_norm = max_grad_norm

    def _clip_divisor(self, grads: list[torch.Tensor]) -> torch.Tensor | None:
        """max(1, ||all grads|| / max_grad_norm) as a device scalar (None when clipping is off)."""
        if not grads or not self.max_grad_norm:
            return None
        norms = torch._foreach_norm(grads)
        total = torch.linalg.vector_norm(torch.stack([n.float() for n in norms]))
        return torch.clamp(total / self.max_grad_norm, min=1.0)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        every_grad = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        if any(g.is_sparse for g in every_grad):
            raise RuntimeError("LAMB does not support sparse gradients")
        divisor = self._clip_divisor(every_grad)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            group["step"] = group.get("step", 0) + 1
            t = group["step"]
            beta1, beta2 = group["betas"]
            grads = [p.grad for p in params]
            if divisor is not None:
                torch._foreach_div_(grads, divisor)
            for p in params:
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            exp_avg = [self.state[p]["exp_avg"] for p in params]
            exp_avg_sq = [self.state[p]["exp_avg_sq"] for p in params]
            torch._foreach_mul_(exp_avg, beta1)
            torch._foreach_add_(exp_avg, grads, alpha=1 - beta1)
            torch._foreach_mul_(exp_avg_sq, beta2)
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
            denom = torch._foreach_sqrt(exp_avg_sq)
            torch._foreach_div_(denom, math.sqrt(1 - beta2 ** t))
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(exp_avg, 1 - beta1 ** t)
            torch._foreach_div_(update, denom)
            wd = group["weight_decay"]
            if wd != 0:
                torch._foreach_add_(update, params, alpha=wd)
                w_norms = torch._foreach_norm(params)
                u_norms = torch._foreach_norm(update)
                ratios = [torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w)) for w, u in zip(w_norms, u_norms)]
                torch._foreach_mul_(update, ratios)
            torch._foreach_add_(params, update, alpha=-group["lr"])
        return loss
